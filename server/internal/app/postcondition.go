package app

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/originweave/bap/server/internal/page"
)

// lastUse is the browsing context a task used most recently: the one its postcondition is
// evaluated on (CONTRACT "Task lifecycle").
type lastUse struct{ sessionID, contextID string }

func (s *Service) noteUse(taskID, sessionID, contextID string) {
	if contextID != "" {
		s.lastUsed.Store(taskID, lastUse{sessionID: sessionID, contextID: contextID})
	}
}

// evaluatePostcondition checks each clause on the task's most recently used browsing context.
// Without a live context no clause can be shown to hold: every clause is unmet. It runs outside
// any transaction (it is browser work).
func (s *Service) evaluatePostcondition(ctx context.Context, taskID string, clauses []json.RawMessage) (holds []bool, contextID string) {
	holds = make([]bool, len(clauses))
	v, ok := s.lastUsed.Load(taskID)
	if !ok || s.cfg.Browser == nil {
		return holds, ""
	}
	lu := v.(lastUse)
	sess, ok := s.cfg.Browser.Session(lu.sessionID)
	if !ok {
		return holds, ""
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	var snap *page.Snapshot
	var text *string
	for i, raw := range clauses {
		var cl struct {
			URLMatches   *string     `json:"url_matches"`
			TitleMatches *string     `json:"title_matches"`
			TextPresent  *string     `json:"text_present"`
			TextAbsent   *string     `json:"text_absent"`
			NodeExists   *page.Query `json:"node_exists"`
		}
		if json.Unmarshal(raw, &cl) != nil {
			continue
		}
		switch {
		case cl.URLMatches != nil || cl.TitleMatches != nil:
			if snap == nil {
				sn, err := sess.Observe(ctx, page.ObserveRequest{ContextID: lu.contextID, MaxNodes: 1})
				if err != nil {
					continue
				}
				snap = sn
			}
			re, subject := cl.URLMatches, snap.URL
			if re == nil {
				re, subject = cl.TitleMatches, snap.Title
			}
			if rx, err := regexp.Compile(*re); err == nil {
				holds[i] = rx.MatchString(subject)
			}
		case cl.TextPresent != nil || cl.TextAbsent != nil:
			if text == nil {
				res, err := sess.Extract(ctx, page.ExtractRequest{ContextID: lu.contextID, Kind: page.ExtractText})
				if err != nil {
					continue
				}
				t, _ := res.Data.(string)
				text = &t
			}
			if cl.TextPresent != nil {
				holds[i] = strings.Contains(*text, *cl.TextPresent)
			} else {
				holds[i] = !strings.Contains(*text, *cl.TextAbsent)
			}
		case cl.NodeExists != nil:
			res, err := sess.QueryNodes(ctx, page.QueryRequest{ContextID: lu.contextID, Query: *cl.NodeExists, Limit: 1})
			holds[i] = err == nil && len(res.Nodes) > 0
		}
	}
	return holds, lu.contextID
}
