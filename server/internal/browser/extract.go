package browser

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/schemaextract"
)

// Extract returns data from the browsing context:
//   - text: the visible text of the node, or of the page (same-origin frames
//     included, after the page's own text) without a node;
//   - table: {columns, rows} of the node's table (or the page's first table),
//     with header detection (thead, or a first row of th cells; otherwise
//     columns are named column_1…);
//   - attributes: the node's attributes (the current value of a form
//     control; never a password);
//   - links: text, absolute URL and handle of every visible link (in the
//     node, or in the page and all its frames);
//   - schema: for each field of Fields, the value of its query's best match
//     (a control's value, a checkbox's state, else the text), converted to
//     the type the schema gives the property, then validated against the
//     JSON Schema.
func (s *Session) Extract(ctx context.Context, req ExtractRequest) (*ExtractResult, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	if req.NodeID != "" && req.Query != nil {
		return nil, fmt.Errorf("%w: give node_id or query, not both", ErrInvalidRequest)
	}
	switch req.Kind {
	case ExtractText, ExtractTable, ExtractAttributes, ExtractLinks, ExtractSchema:
	default:
		return nil, fmt.Errorf("%w: kind must be text, table, attributes, links or schema", ErrInvalidRequest)
	}
	if req.Query != nil {
		if err := validQuery(*req.Query); err != nil {
			return nil, err
		}
	}
	t, err := s.readyTab(ctx, req.ContextID)
	if err != nil {
		return nil, err
	}
	if req.NodeID == "" {
		s.waitDocument(ctx, t)
	}
	var tg *actTarget
	if req.NodeID != "" || req.Query != nil {
		if req.Query != nil {
			ms, _, err := s.query(ctx, t, *req.Query, 1)
			if err != nil {
				return nil, err
			}
			if len(ms) == 0 {
				return nil, fmt.Errorf("%w: no node matched the query", ErrNoSuchNode)
			}
			req.NodeID = ms[0].node.NodeID
		}
		tg, err = s.resolveTarget(ctx, ActRequest{ContextID: req.ContextID, NodeID: req.NodeID})
		if err != nil {
			return nil, err
		}
		t = tg.t
	}
	s.mu.Lock()
	epoch := t.epoch
	s.mu.Unlock()
	var data any
	switch req.Kind {
	case ExtractText:
		data, err = s.extractText(ctx, t, tg)
	case ExtractTable:
		data, err = s.extractTable(ctx, t, tg)
	case ExtractAttributes:
		if tg == nil {
			return nil, fmt.Errorf("%w: attributes needs node_id or query", ErrInvalidRequest)
		}
		var r struct {
			St string            `json:"st"`
			V  map[string]string `json:"v"`
		}
		err = s.agent(ctx, tg, "attributes", &r)
		if err == nil && r.St != "ok" {
			err = fmt.Errorf("%w: the node is no longer in the document", ErrStaleNodeHandle)
		}
		data = r.V
	case ExtractLinks:
		data, err = s.extractLinks(ctx, t, tg)
	case ExtractSchema:
		data, err = s.extractSchema(ctx, t, req)
	}
	if err != nil {
		return nil, err
	}
	return &ExtractResult{EpochID: epoch, Data: data}, nil
}

type textResult struct {
	St string `json:"st"`
	V  string `json:"v"`
}

func (s *Session) extractText(ctx context.Context, t *tab, tg *actTarget) (string, error) {
	if tg != nil {
		var r textResult
		if err := s.agent(ctx, tg, "visibleText", &r); err != nil {
			return "", err
		}
		if r.St != "ok" {
			return "", fmt.Errorf("%w: the node is no longer in the document", ErrStaleNodeHandle)
		}
		return r.V, nil
	}
	// The page, then its same-origin frames in tree order.
	s.mu.Lock()
	origin := originOf(t.main.url)
	frames := t.subtreeLocked(t.main)
	s.mu.Unlock()
	var parts []string
	for i, f := range frames {
		s.mu.Lock()
		fo := originOf(f.url)
		s.mu.Unlock()
		if i > 0 && (fo == "" || fo != origin) {
			continue
		}
		var r textResult
		err := s.inFrame(ctx, t, f, func(w *world) error { return s.eval(ctx, w, agentCall("visibleText", 0), false, &r) })
		if err != nil {
			if i == 0 {
				return "", err
			}
			continue
		}
		if strings.TrimSpace(r.V) != "" {
			parts = append(parts, r.V)
		}
	}
	return strings.Join(parts, "\n"), nil
}

func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}

func (s *Session) extractTable(ctx context.Context, t *tab, tg *actTarget) (*Table, error) {
	var r struct {
		St      string     `json:"st"`
		Columns []string   `json:"columns"`
		Rows    [][]string `json:"rows"`
	}
	var err error
	if tg != nil {
		err = s.agent(ctx, tg, "table", &r)
	} else {
		err = s.inFrame(ctx, t, t.main, func(w *world) error { return s.eval(ctx, w, agentCall("table", 0), false, &r) })
	}
	if err != nil {
		return nil, err
	}
	switch r.St {
	case "ok":
	case "notable":
		return nil, fmt.Errorf("%w: no table there", ErrNoSuchNode)
	default:
		return nil, fmt.Errorf("%w: the node is no longer in the document", ErrStaleNodeHandle)
	}
	if r.Rows == nil {
		r.Rows = [][]string{}
	}
	return &Table{Columns: r.Columns, Rows: r.Rows}, nil
}

func (s *Session) extractLinks(ctx context.Context, t *tab, tg *actTarget) ([]Link, error) {
	type linkRec struct {
		I int    `json:"i"`
		T string `json:"t"`
		U string `json:"u"`
	}
	var r struct {
		St string    `json:"st"`
		V  []linkRec `json:"v"`
	}
	collect := func(f *frameState, w *world) []Link {
		s.mu.Lock()
		defer s.mu.Unlock()
		if f.worldSerial != w.serial {
			return nil
		}
		out := make([]Link, 0, len(r.V))
		for _, l := range r.V {
			out = append(out, Link{Text: l.T, URL: l.U, NodeID: s.reg.issue(t, f, w.serial, l.I)})
		}
		return out
	}
	if tg != nil {
		var links []Link
		err := s.inFrame(ctx, t, tg.f, func(w *world) error {
			if err := s.checkWorld(tg, w); err != nil {
				return err
			}
			if err := s.eval(ctx, w, agentCall("links", tg.rec.idx), false, &r); err != nil {
				return err
			}
			links = collect(tg.f, w)
			return nil
		})
		return links, err
	}
	s.mu.Lock()
	frames := t.subtreeLocked(t.main)
	s.mu.Unlock()
	links := []Link{}
	for i, f := range frames {
		err := s.inFrame(ctx, t, f, func(w *world) error {
			r.V = nil
			if err := s.eval(ctx, w, agentCall("links", 0), false, &r); err != nil {
				return err
			}
			links = append(links, collect(f, w)...)
			return nil
		})
		if err != nil && i == 0 {
			return nil, err
		}
	}
	return links, nil
}

// SchemaError reports extracted data that does not satisfy the schema, or a schema that does not
// compile (package schemaextract, which both engines' adapters answer schema extracts with).
type SchemaError = schemaextract.Error

func (s *Session) extractSchema(ctx context.Context, t *tab, req ExtractRequest) (any, error) {
	return schemaextract.Extract(ctx, req.Schema, req.Fields, func(ctx context.Context, q Query, limit int) ([]any, error) {
		ms, _, err := s.query(ctx, t, q, limit)
		if err != nil {
			return nil, err
		}
		vals := make([]any, 0, len(ms))
		for _, m := range ms {
			tg, err := s.resolveTarget(ctx, ActRequest{NodeID: m.node.NodeID})
			if err != nil {
				return nil, err
			}
			var r struct {
				St string `json:"st"`
				V  any    `json:"v"`
			}
			if err := s.agent(ctx, tg, "fieldValue", &r); err != nil {
				return nil, err
			}
			vals = append(vals, r.V)
		}
		return vals, nil
	})
}
