package app

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/originweave/bap/server/internal/page"
)

// Durable node handles (issue #23 item 1, ADR 0019). The browser knows the handles of its live
// sessions only; every handle observe and query_nodes hand out is also recorded
// (node_handle_record, under its document epoch), so that a handle the browser no longer knows —
// its session was lost with a node, or closed — answers 409 stale_node_handle with its reason
// instead of 404, and never resolves to an element of another document.

// Reasons of a stale_node_handle problem.
const (
	// HandleEpochSuperseded: the handle's document was replaced (navigation, reload, a frame's
	// new document, a closed browsing context).
	HandleEpochSuperseded = "epoch_superseded"
	// HandleSessionLost: the handle's browser session ended (lost with its node, or closed); a
	// resumed session has new handles.
	HandleSessionLost = "session_lost"
)

// staleHandleError is a handle the browser does not know and the records say is stale.
type staleHandleError struct {
	reason string
}

func (e *staleHandleError) Error() string {
	return fmt.Sprintf("%v: %s", page.ErrStaleNodeHandle, e.reason)
}

func (e *staleHandleError) Unwrap() error { return page.ErrStaleNodeHandle }

// staleHandleProblem is the problem of a stale handle, with its reason.
func staleHandleProblem(err error) *Error {
	var she *staleHandleError
	if errors.As(err, &she) && she.reason == HandleSessionLost {
		return &Error{Code: CodeStaleNodeHandle, Reason: HandleSessionLost,
			Detail: "the node handle belongs to a browser session that ended; observe or query this session again"}
	}
	return &Error{Code: CodeStaleNodeHandle, Reason: HandleEpochSuperseded,
		Detail: "the node handle belongs to a document that is gone; observe or query again"}
}

// recordHandles records the handles a read of sessionID handed out that are not recorded yet:
// observing the same page again hands out the same handles and writes nothing.
func (s *Service) recordHandles(ctx context.Context, tenant, sessionID string, b HandleBatch, nodes []page.Node) error {
	collectHandles(&b, nodes)
	s.handles.keepNew(sessionID, &b)
	if len(b.Handles) == 0 {
		return nil
	}
	if err := s.store.RecordHandles(ctx, tenant, sessionID, b); err != nil {
		return err
	}
	s.handles.add(sessionID, b.Handles, func(id string) bool {
		if s.cfg.Browser == nil {
			return false
		}
		_, live := s.cfg.Browser.Session(id)
		return live
	})
	return nil
}

// handleCache remembers, per session of this node, the handles already recorded, so that a read
// sends only new ones. It only saves writes: a handle it forgot is recorded again, harmlessly.
type handleCache struct {
	mu        sync.Mutex
	bySession map[string]map[string]struct{}
	adds      int
}

// maxCachedHandles bounds one session's entry; past it the entry starts over.
const maxCachedHandles = 200_000

// keepNew drops from b the handles already recorded for sessionID.
func (c *handleCache) keepNew(sessionID string, b *HandleBatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.bySession[sessionID]
	if len(seen) == 0 {
		return
	}
	hs, rs := b.Handles[:0:0], b.Roles[:0:0]
	for i, h := range b.Handles {
		if _, ok := seen[h]; !ok {
			hs, rs = append(hs, h), append(rs, b.Roles[i])
		}
	}
	b.Handles, b.Roles = hs, rs
}

// add notes handles as recorded for sessionID; now and then it forgets the sessions live no
// longer reports.
func (c *handleCache) add(sessionID string, handles []string, live func(sessionID string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bySession == nil {
		c.bySession = map[string]map[string]struct{}{}
	}
	seen := c.bySession[sessionID]
	if seen == nil || len(seen) > maxCachedHandles {
		seen = make(map[string]struct{}, len(handles))
		c.bySession[sessionID] = seen
	}
	for _, h := range handles {
		seen[h] = struct{}{}
	}
	if c.adds++; c.adds%64 == 0 {
		for id := range c.bySession {
			if !live(id) {
				delete(c.bySession, id)
			}
		}
	}
}

func collectHandles(b *HandleBatch, nodes []page.Node) {
	for i := range nodes {
		if n := &nodes[i]; n.NodeID != "" {
			b.Handles = append(b.Handles, n.NodeID)
			b.Roles = append(b.Roles, n.Role)
		}
		collectHandles(b, nodes[i].Children)
	}
}

// explainHandle looks up the handles a request named when the browser answered that one is not
// a handle its registry issued (page.ErrUnknownHandle): one recorded for this session or for an
// ended session of the tenant is stale; anything else stays ErrNoSuchNode (404). A handle of
// another tenant is never found. A live handle used in another browsing context of its session
// is the browser's plain ErrNoSuchNode and is not looked up.
func (s *Service) explainHandle(ctx context.Context, tenant, sessionID string, err error, handles ...string) error {
	if !errors.Is(err, page.ErrUnknownHandle) {
		return err
	}
	for _, h := range handles {
		if h == "" {
			continue
		}
		rec, lerr := s.store.NodeHandle(context.WithoutCancel(ctx), tenant, h, sessionID)
		if lerr != nil {
			if !errors.Is(lerr, ErrNotFound) {
				s.cfg.Logger.Warn("looking up a node handle", "session_id", sessionID, "err", lerr)
			}
			continue
		}
		switch {
		case rec.SessionID == sessionID:
			return &staleHandleError{reason: HandleEpochSuperseded}
		case rec.SessionState != SessionOpen:
			return &staleHandleError{reason: HandleSessionLost}
		}
	}
	return err
}

// actWithin is the within handle of an act's query ("" when none).
func actWithin(req page.ActRequest) string {
	if req.Query == nil {
		return ""
	}
	return req.Query.Within
}
