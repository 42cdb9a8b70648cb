package firefox

import (
	"fmt"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// A tab the page opens (window.open, a target=_blank link or form) is a browsing context of the
// session, as on Chromium: the driver learns of it from browsingContext.contextCreated, which
// each session subscribes to for its own user context only, and the tab becomes a *Session of
// its own over that browsing context (its ctx_ id, documents, epochs and navigations), sharing
// the first tab's user context, proxy, policy, events and minter. It is reported in the act's
// new_contexts, in every snapshot's contexts and as a context.opened event naming its opener;
// its going away (window.close) is a context.closed event. Requests name a tab by its ctx_ id,
// or by a node handle, which names one node of one tab.

// openingDoc is the document a popup shows before the agent first reads one: its first real
// document is then a new one, reported as navigation.committed with the popup's first epoch.
const openingDoc = "\u0000bap:opening"

// first is the session's first tab (the one the session opened with).
func (s *Session) first() *Session {
	if s.main != nil {
		return s.main
	}
	return s
}

// tabs lists the session's open tabs, the first one first, then the popups in the order they
// opened.
func (s *Session) tabs() []*Session {
	m := s.first()
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*Session{m}, m.popups...)
}

// route finds the tab a request is for: the tab of contextID ("" the first one), or, without a
// context, the tab whose node handle node is (a handle names a node of one tab).
func (s *Session) route(contextID, node string) (*Session, error) {
	tabs := s.tabs()
	if contextID == "" && node != "" {
		for _, t := range tabs {
			t.mu.Lock()
			_, ok := t.docs.byID[node]
			_, stale := t.docs.stale[node]
			t.mu.Unlock()
			if ok || stale {
				return t, nil
			}
		}
	}
	if contextID == "" {
		return tabs[0], nil
	}
	for _, t := range tabs {
		if t.ctxID == contextID {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", page.ErrNoSuchContext, contextID)
}

// queryNode is the node handle a query is scoped to.
func queryNode(q *page.Query) string {
	if q == nil {
		return ""
	}
	return q.Within
}

// addPopup makes the browsing context top, opened by the tab opener, a tab of the session;
// nil when the session is closing.
func (s *Session) addPopup(top bidi.BrowsingContextBrowsingContext, opener *Session, url string) *Session {
	m := s.first()
	p := &Session{e: m.e, uc: m.uc, top: top, ctxID: ids.New(ids.BrowsingContext), navCh: make(chan struct{}),
		id: m.id, pol: m.pol, onEvent: m.onEvent, main: m, opener: opener.ctxID}
	p.docs.init(m.docs.mint)
	p.docs.doc = openingDoc
	p.docs.url = pagekit.RedactURL(url)
	m.mu.Lock()
	if m.closed || m.lost {
		m.mu.Unlock()
		return nil
	}
	m.popups = append(m.popups, p)
	m.mu.Unlock()
	opener.mu.Lock()
	opener.opened = append(opener.opened, p.ctxID)
	opener.mu.Unlock()
	return p
}

// popupGone removes a popup whose browsing context closed and reports it, unless the whole
// session is closing.
func (s *Session) popupGone() {
	m := s.first()
	if m == s {
		return
	}
	s.mu.Lock()
	was := s.closed
	s.closed = true
	s.mu.Unlock()
	m.mu.Lock()
	for i, p := range m.popups {
		if p == s {
			m.popups = append(m.popups[:i:i], m.popups[i+1:]...)
			break
		}
	}
	ending := m.closed || m.lost
	m.mu.Unlock()
	if !was && !ending {
		s.emit(page.Event{Type: page.EventContextClosed, ContextID: s.ctxID})
	}
}

// onContextCreated makes a top-level browsing context of a session's user context that the
// session did not create (a popup) a tab of that session.
func (d *Driver) onContextCreated(info bidi.BrowsingContextInfo) {
	if info.Parent != "" {
		// A frame, read with its tab (frames.go); remembered so that a popup it opens names
		// its tab as the opener.
		d.mu.Lock()
		if t := d.tabOf(info.Parent); t != nil {
			d.frameTab[info.Context] = t
		}
		d.mu.Unlock()
		return
	}
	d.mu.Lock()
	s := d.byUC[info.UserContext]
	known := d.byTop[info.Context] != nil
	var opener *Session
	if info.OriginalOpener != nil {
		opener = d.tabOf(*info.OriginalOpener)
	}
	d.mu.Unlock()
	if s == nil || known {
		return
	}
	if opener == nil || opener.first() != s {
		opener = s // opened with noopener from a context BiDi does not name: the first tab's
	}
	p := s.addPopup(info.Context, opener, info.URL)
	if p == nil {
		return
	}
	d.mu.Lock()
	if d.sessions[s.id] != s {
		d.mu.Unlock()
		return
	}
	d.byTop[info.Context] = p
	d.mu.Unlock()
	p.mu.Lock()
	ev := page.Event{Type: page.EventContextOpened, ContextID: p.ctxID, EpochID: p.docs.epoch, URL: p.docs.url,
		Data: map[string]any{"opener": p.opener}}
	p.mu.Unlock()
	p.emit(ev)
}

// tabOf is the tab showing browsing context c: the tab itself, or the tab of a frame of it.
// d.mu is held.
func (d *Driver) tabOf(c bidi.BrowsingContextBrowsingContext) *Session {
	if t := d.byTop[c]; t != nil {
		return t
	}
	return d.frameTab[c]
}

// onContextDestroyed reports a popup that closed.
func (d *Driver) onContextDestroyed(info bidi.BrowsingContextInfo) {
	d.mu.Lock()
	delete(d.frameTab, info.Context)
	p := d.byTop[info.Context]
	if p != nil && p.main != nil {
		delete(d.byTop, info.Context)
	}
	d.mu.Unlock()
	if p != nil && p.main != nil {
		p.popupGone()
	}
}

// firstOf is a if it is not empty, else b.
func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
