package app

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/originweave/bap/server/internal/ids"
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

// closeEvidence is what close_task captured of the page its postcondition was evaluated on.
type closeEvidence struct {
	sessionID string
	out       *evidenceOut
}

// captureCloseEvidence captures a screenshot and an MHTML snapshot (when its engine can make one)
// of the task's most recently used browsing context (nil when there is none, or it cannot be captured). Browser work: no
// transaction is open.
func (s *Service) captureCloseEvidence(ctx context.Context, taskID string) *closeEvidence {
	v, ok := s.lastUsed.Load(taskID)
	if !ok || s.cfg.Browser == nil {
		return nil
	}
	lu := v.(lastUse)
	sess, ok := s.cfg.Browser.Session(lu.sessionID)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	kinds := []string{EvidenceScreenshot, EvidenceDOMSnapshot}
	if se, ok := s.cfg.Browser.(SessionEngine); ok {
		// An engine without MHTML closes with its screenshot only: a missing kind, not a stand-in.
		if name, ok := se.SessionEngine(lu.sessionID); ok {
			if e, ok := s.engineNamed(name); ok && !e.Has(CapMHTMLEvidence) {
				kinds = kinds[:1]
			}
		}
	}
	out, err := captureEvidence(ctx, sess, EvidenceRequest{ContextID: lu.contextID, Kinds: kinds})
	if err != nil {
		s.cfg.Logger.Warn("close_task could not capture evidence", "task_id", taskID, "err", err)
		return nil
	}
	return &closeEvidence{sessionID: lu.sessionID, out: out}
}

// storeCloseEvidence stores close_task's evidence as artifacts of its command.
func (c *commandCtx) storeCloseEvidence(ctx context.Context, ev *closeEvidence) ([]*Artifact, error) {
	arts := []*Artifact{}
	if ev == nil {
		return arts, nil
	}
	if err := c.tx.RecordEpoch(ctx, c.t.Tenant, ev.sessionID, ev.out.contextID, ev.out.epochID, ev.out.url); err != nil {
		return nil, err
	}
	data := make([]map[string]any, 0, len(ev.out.blobs))
	for _, b := range ev.out.blobs {
		a := &Artifact{
			ID: ids.New(ids.Artifact), Tenant: c.t.Tenant, SHA256: sha256Hex(b.content), Size: int64(len(b.content)),
			MediaType: b.mediaType, Kind: b.kind, TaskID: c.t.ID, SessionID: ev.sessionID, ContextID: ev.out.contextID,
			EpochID: ev.out.epochID, CommandID: c.cmd.ID, SourceURL: ev.out.url, CreatedAt: c.now,
		}
		if err := c.tx.InsertArtifact(ctx, a, b.content); err != nil {
			return nil, err
		}
		arts = append(arts, a)
		data = append(data, map[string]any{"artifact_id": a.ID, "kind": a.Kind, "media_type": a.MediaType, "sha256": a.SHA256, "size": a.Size})
	}
	return arts, c.emit(ctx, c.t, "evidence.captured", "close_task", map[string]any{
		"session_id": ev.sessionID, "context_id": ev.out.contextID, "epoch_id": ev.out.epochID, "artifacts": data,
	})
}
