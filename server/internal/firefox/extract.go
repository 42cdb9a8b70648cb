package firefox

import (
	"context"
	"fmt"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/schemaextract"
)

// Extract reads structured data from the tab's document with the page agent, as the CDP adapter
// does: text, table, attributes and links (of the document or of one node), and schema (package
// schemaextract over the agent's matches and field values, as the CDP adapter answers it).
func (s *Session) Extract(ctx context.Context, req page.ExtractRequest) (*page.ExtractResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if t, err := s.route(req.ContextID, firstOf(req.NodeID, queryNode(req.Query))); err != nil {
		return nil, err
	} else if t != s {
		return t.Extract(ctx, req)
	}
	if req.NodeID != "" && req.Query != nil {
		return nil, fmt.Errorf("%w: give node_id or query, not both", page.ErrInvalidRequest)
	}
	switch req.Kind {
	case page.ExtractText, page.ExtractTable, page.ExtractAttributes, page.ExtractLinks, page.ExtractSchema:
	default:
		return nil, fmt.Errorf("%w: kind must be text, table, attributes, links or schema", page.ErrInvalidRequest)
	}
	ctx, cancel := withTimeout(ctx, commandTimeout)
	defer cancel()
	tg := target{}
	if req.Query != nil {
		if err := validQuery(*req.Query); err != nil {
			return nil, err
		}
		nodes, _, err := s.query(ctx, *req.Query, 1)
		if err != nil {
			return nil, err
		}
		if len(nodes) == 0 || nodes[0].NodeID == "" {
			return nil, fmt.Errorf("%w: no node matched the query", page.ErrNoSuchNode)
		}
		req.NodeID = nodes[0].NodeID
	}
	if req.NodeID != "" {
		h, err := s.lookup(req.NodeID)
		if err != nil {
			return nil, err
		}
		tg = target(h)
	} else if req.Kind == page.ExtractAttributes {
		return nil, fmt.Errorf("%w: attributes needs node_id or query", page.ErrInvalidRequest)
	}
	gone := fmt.Errorf("%w: the node is no longer in the document", page.ErrStaleNodeHandle)
	var data any
	var ran string
	var err error
	switch req.Kind {
	case page.ExtractText:
		var r struct {
			St string `json:"st"`
			V  string `json:"v"`
		}
		ran, err = s.agentIn(ctx, tg.doc, &r, "visibleText", tg.idx)
		if err == nil && r.St != "ok" {
			err = gone
		}
		data = r.V
	case page.ExtractTable:
		var r struct {
			St      string     `json:"st"`
			Columns []string   `json:"columns"`
			Rows    [][]string `json:"rows"`
		}
		ran, err = s.agentIn(ctx, tg.doc, &r, "table", tg.idx)
		switch {
		case err != nil:
		case r.St == "notable":
			err = fmt.Errorf("%w: no table there", page.ErrNoSuchNode)
		case r.St != "ok":
			err = gone
		}
		if r.Rows == nil {
			r.Rows = [][]string{}
		}
		data = &page.Table{Columns: r.Columns, Rows: r.Rows}
	case page.ExtractAttributes:
		var r struct {
			St string            `json:"st"`
			V  map[string]string `json:"v"`
		}
		ran, err = s.agentIn(ctx, tg.doc, &r, "attributes", tg.idx)
		if err == nil && r.St != "ok" {
			err = gone
		}
		data = r.V
	case page.ExtractLinks:
		var r struct {
			V []struct {
				I int    `json:"i"`
				T string `json:"t"`
				U string `json:"u"`
			} `json:"v"`
		}
		ran, err = s.agentIn(ctx, tg.doc, &r, "links", tg.idx)
		links := make([]page.Link, 0, len(r.V))
		s.mu.Lock()
		for _, l := range r.V {
			links = append(links, page.Link{Text: l.T, URL: l.U, NodeID: s.docs.issue(ran, l.I)})
		}
		s.mu.Unlock()
		data = links
	case page.ExtractSchema:
		ran, data, err = s.extractSchema(ctx, req)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A node's extract ran in the node's own document (a frame's, for a node in a frame), which
	// the agent checked in the page; a document's extract must have run in the tab's current one.
	want := s.docs.doc
	if tg.doc != "" {
		want = tg.doc
	}
	if ran != want {
		return nil, fmt.Errorf("%w: the document changed during extract", page.ErrStaleNodeHandle)
	}
	return &page.ExtractResult{EpochID: s.docs.epoch, Data: data}, nil
}

// extractSchema answers kind schema in the current document: each field's matches and their
// values (the agent's fieldValue), every query run in one document, which it reports (Extract
// checks it is still the current one).
func (s *Session) extractSchema(ctx context.Context, req page.ExtractRequest) (string, any, error) {
	doc := ""
	data, err := schemaextract.Extract(ctx, req.Schema, req.Fields, func(ctx context.Context, q page.Query, limit int) ([]any, error) {
		nodes, _, err := s.query(ctx, q, limit)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		cur := s.docs.doc // the query ran in it
		s.mu.Unlock()
		if doc != "" && cur != doc {
			return nil, fmt.Errorf("%w: the document changed during extract", page.ErrStaleNodeHandle)
		}
		doc = cur
		vals := make([]any, 0, len(nodes))
		for _, n := range nodes {
			h, err := s.lookup(n.NodeID)
			if err != nil {
				return nil, err
			}
			var r struct {
				St string `json:"st"`
				V  any    `json:"v"`
			}
			if _, err := s.agentIn(ctx, h.doc, &r, "fieldValue", h.idx); err != nil {
				return nil, err
			}
			vals = append(vals, r.V)
		}
		return vals, nil
	})
	if doc == "" {
		s.mu.Lock()
		doc = s.docs.doc
		s.mu.Unlock()
	}
	return doc, data, err
}
