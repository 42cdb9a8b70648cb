package firefox

import (
	"fmt"
	"sync"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// documents is the registry of a session's tab: its current document (the token its agent was
// installed with), the document's epoch (ep_), and the node handles (nd_, minted by
// pagekit.Minter as the CDP adapter mints them) of that document. A handle names one element of
// one document: its index in the agent's registry there. When the tab shows another document
// (any navigation but a same-document one), every handle of the previous documents is retired
// and answers page.ErrStaleNodeHandle, and never resolves to another element: each call with a
// handle runs only in the document it was issued in (engine.go's agentIn). Guarded by Session.mu.
type documents struct {
	mint  *minter // the session's, shared by its tabs
	doc   string  // the current document's token ("" before the first)
	epoch string
	url   string // the current document's URL as the last navigation or agent call saw it
	byID  map[string]handle
	byKey map[handle]string
	stale map[string]struct{}
	// frames maps the token of a document in one of the tab's frames to its browsing context:
	// a handle of that document runs there (frames.go).
	frames map[string]bidi.BrowsingContextBrowsingContext
}

type handle struct {
	doc string
	idx int
}

// minter is a session's pagekit.Minter, shared by its tabs (each guarded by its own lock), so a
// handle names one node of one tab of the session.
type minter struct {
	mu sync.Mutex
	m  pagekit.Minter
}

func (m *minter) next() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m.Next()
}

// init starts a tab's registry; mint is the session's minter (nil: a new one).
func (d *documents) init(mint *minter) {
	if mint == nil {
		mint = &minter{m: pagekit.NewMinter()}
	}
	d.mint = mint
	d.epoch = ids.New(ids.DocumentEpoch)
	d.byID = make(map[string]handle)
	d.byKey = make(map[handle]string)
	d.stale = make(map[string]struct{})
	d.frames = make(map[string]bidi.BrowsingContextBrowsingContext)
}

// see records that the tab shows document doc; it reports whether that is a new document (a new
// epoch, the old handles retired).
func (d *documents) see(doc string) bool {
	if doc == "" || doc == d.doc {
		return false
	}
	first := d.doc == ""
	d.doc = doc
	if !first {
		d.epoch = ids.New(ids.DocumentEpoch)
	}
	for h, rec := range d.byID {
		if rec.doc != doc {
			delete(d.byID, h)
			delete(d.byKey, rec)
			d.stale[h] = struct{}{}
		}
	}
	// A new top document brings new frames: the old ones' documents are gone with it.
	clear(d.frames)
	return !first
}

// issue returns the handle of element idx of document doc (the same one each time).
func (d *documents) issue(doc string, idx int) string {
	k := handle{doc: doc, idx: idx}
	if h, ok := d.byKey[k]; ok {
		return h
	}
	h := d.mint.next()
	d.byID[h] = k
	d.byKey[k] = h
	return h
}

// lookup returns what a handle names, or page.ErrStaleNodeHandle / page.ErrUnknownHandle.
func (d *documents) lookup(h string) (handle, error) {
	rec, ok := d.byID[h]
	if !ok {
		if _, ok := d.stale[h]; ok {
			return handle{}, fmt.Errorf("%w: the browsing context navigated since it was issued", page.ErrStaleNodeHandle)
		}
		return handle{}, fmt.Errorf("%w: %q is not a node handle of this session", page.ErrUnknownHandle, h)
	}
	return rec, nil
}

// noteDocument records the document an agent call ran in and, for a new one, reports the
// navigation as the CDP adapter does (navigation.committed with the new epoch).
func (s *Session) noteDocument(doc string) {
	s.mu.Lock()
	isNew := s.docs.see(doc)
	ev := page.Event{Type: page.EventNavigationCommitted, ContextID: s.ctxID, EpochID: s.docs.epoch, URL: s.docs.url}
	s.mu.Unlock()
	if isNew {
		s.emit(ev)
	}
}

// frameOf is the browsing context showing document doc: the frame it was seen in, else the tab.
func (s *Session) frameOf(doc string) bidi.BrowsingContextBrowsingContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.docs.frames[doc]; ok && doc != "" {
		return f
	}
	return s.top
}

// noteFrameDocument records that frame shows document doc (its handles run there).
func (s *Session) noteFrameDocument(frame bidi.BrowsingContextBrowsingContext, doc string) {
	if doc == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs.frames[doc] = frame
}

// emit hands an event to the session's callback (none for a bare session).
func (s *Session) emit(ev page.Event) {
	if s.onEvent != nil {
		s.onEvent(ev)
	}
}
