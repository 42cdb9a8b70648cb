package firefox

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/url"
	"time"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// Side effects judged by what leaves the browser, as the CDP adapter judges them (browser/hold.go,
// ADR 0029).
//
// A session whose policy has a form_submission rule has every request of its user context (its
// tab, the tab's frames and dedicated workers, its popups) blocked before it is sent: the browser
// has one intercept (network.addIntercept, phase beforeRequestSent), which blocks a request only
// where network.beforeRequestSent is subscribed, and such a session subscribes it for its user
// context alone, so sessions without the rule pay nothing. Request bodies are collected for the
// user context (network.addDataCollector, request data). A request with a non-safe method (policy.HoldsRequest) is never sent on the page's
// word alone:
//   - while an act runs (from its input until it settles), the first such request is held: left
//     blocked in the browser, unsent, and the act returns at once with ActResult.Held. Release
//     sends exactly that request, once (network.continueRequest), and waits for the site's answer
//     and what it causes, as an act would; Deny fails it (network.failRequest). Unlike Chromium,
//     Firefox keeps answering script and input while a navigation is blocked, so a held form
//     submission stays blocked too and is released as it is, never replayed.
//   - any other such request — one the page sends on its own, after the act returned, or while a
//     hold is pending — is refused (network.failRequest: a refused navigation keeps its document)
//     and reported (request.blocked, reason unapproved_side_effect).
//
// While a release settles only the released request goes out (its redirects keep its BiDi
// request id); an act a person approved before it ran is not held again, nor are the requests
// that reach interception within pagekit.ApprovedGrace after it. Requests Firefox attributes to no browsing context
// are out of reach of the intercept: service workers are switched off (proxyPrefs), so a page
// cannot send one from there. A GET-borne side effect cannot be told from a read and is not
// held. No BiDi request id leaves this file: a hold is named by its own random id.

// maxHeldBody bounds the request bodies the browser collects for holds; a longer one is held with
// BodyKnown false.
const maxHeldBody = 1 << 20

// holdCmdTimeout bounds the commands that answer a blocked request.
const holdCmdTimeout = 10 * time.Second

// actHold is the hold state of the act (or release) that is running.
type actHold struct {
	approved bool                // its requests go out: a person approved the act itself
	release  bidi.NetworkRequest // the request a Release is sending: only it goes out
	// the tab it acts on, and what that tab started from: its document and the navigations
	// started before the input
	tab      *Session
	doc0     string
	started0 int
}

// heldReq is a request held for approval.
type heldReq struct {
	info  page.HeldRequest
	rid   bidi.NetworkRequest
	ready chan struct{} // closed once its body was read
	// the tab of the act that caused it and what it started from, for the settle after the release
	tab      *Session
	doc0     string
	started0 int
}

// interceptRequests sets up the holds of a session whose policy needs them: request bodies are
// collected for its user context, and its network events are subscribed there, which makes the
// browser's intercept block every request of the user context before it is sent. It fails closed: without any of them the session is not opened.
func (s *Session) interceptRequests(ctx context.Context) error {
	c, d := s.e.c, s.e.drv
	if d == nil {
		return fmt.Errorf("firefox: a session without a driver cannot hold requests")
	}
	coll, err := c.NetworkAddDataCollector(ctx, bidi.NetworkAddDataCollectorParameters{
		DataTypes: []bidi.NetworkDataType{bidi.NetworkDataTypeRequest}, MaxEncodedDataSize: maxHeldBody,
		UserContexts: []bidi.BrowserUserContext{s.uc}})
	if err != nil {
		return fmt.Errorf("firefox: collecting request bodies: %w", err)
	}
	s.collector = coll.Collector
	if err := d.holdFor(ctx, s); err != nil {
		return err
	}
	// Its browsing contexts are learnt from the contextCreated events OpenSession subscribes for
	// every session's user context.
	if _, err := c.SessionSubscribe(ctx, bidi.SessionSubscribeParameters{Events: []string{
		bidi.EventNetworkBeforeRequestSent, bidi.EventNetworkResponseCompleted, bidi.EventNetworkFetchError,
	}, UserContexts: []bidi.BrowserUserContext{s.uc}}); err != nil {
		return fmt.Errorf("firefox: subscribing to the session's requests: %w", err)
	}
	return nil
}

// fire sends a command that answers a blocked request, off the connection's reader (an event
// handler must not wait for a response the reader has to deliver).
func (s *Session) fire(ctx context.Context, f func(ctx context.Context) error) {
	go func() {
		ctx, cancel := context.WithTimeout(ctx, holdCmdTimeout)
		defer cancel()
		_ = f(ctx) // a request the page gave up meanwhile is no longer there to answer
	}()
}

func (s *Session) continueRequest(ctx context.Context, rid bidi.NetworkRequest) {
	s.fire(ctx, func(ctx context.Context) error {
		return s.e.c.NetworkContinueRequest(ctx, bidi.NetworkContinueRequestParameters{Request: rid})
	})
}

func (s *Session) failRequest(ctx context.Context, rid bidi.NetworkRequest) {
	s.fire(ctx, func(ctx context.Context) error {
		return s.e.c.NetworkFailRequest(ctx, bidi.NetworkFailRequestParameters{Request: rid})
	})
}

// onRequestBlocked decides a request blocked in the session's user context (s is its first tab;
// tab the tab whose document sent it, nil for a frame's): it goes on, or is held, or is refused.
// Called on the connection's reader.
func (s *Session) onRequestBlocked(ctx context.Context, ev bidi.NetworkBeforeRequestSentParameters, tab *Session) {
	rid := ev.Request.Request
	u, err := url.Parse(ev.Request.URL)
	var sender *url.URL // a frame's: unknown, so every rule applies (fail safe)
	if tab != nil {
		tab.mu.Lock()
		sender, _ = url.Parse(tab.docs.url) // its document's (a form's submission: the one it replaces)
		tab.mu.Unlock()
	}
	s.mu.Lock()
	s.lastPaused = time.Now()
	pol, a := s.pol, s.acting
	if a != nil && a.release != "" && a.release == rid {
		s.mu.Unlock()
		s.continueRequest(ctx, rid) // a redirect hop of the released request: still that request
		return
	}
	s.mu.Unlock()
	if err != nil || !pol.AllowsURL(u) {
		s.continueRequest(ctx, rid) // elsewhere: the egress proxy refuses it and reports it
		return
	}
	rule, ok := pol.HoldsRequest(ev.Request.Method, u, sender)
	if !ok {
		s.continueRequest(ctx, rid)
		return
	}
	s.holdOrRefuse(ctx, ev, u, rule, tab)
}

// holdOrRefuse holds a request an approval rule covers, lets an approved act's go, or refuses it.
func (s *Session) holdOrRefuse(ctx context.Context, ev bidi.NetworkBeforeRequestSentParameters, u *url.URL, rule int, tab *Session) {
	rid := ev.Request.Request
	s.mu.Lock()
	a := s.acting
	if a != nil && a.approved || a == nil && time.Now().Before(s.approvedUntil) {
		s.mu.Unlock()
		s.continueRequest(ctx, rid)
		return
	}
	if a != nil && a.release == "" && s.hold == nil {
		h := &heldReq{
			info: page.HeldRequest{ID: "hold_" + rand.Text()[:16], Method: ev.Request.Method, URL: pagekit.RedactURL(u.String()), Rule: rule},
			rid:  rid, ready: make(chan struct{}), tab: a.tab, doc0: a.doc0, started0: a.started0,
		}
		s.hold = h
		s.mu.Unlock()
		s.notifyTabs()
		go s.readBody(ctx, h, ev.Request.BodySize)
		return
	}
	s.mu.Unlock()
	s.failRequest(ctx, rid)
	ctxID := s.ctxID
	if tab != nil {
		ctxID = tab.ctxID
	}
	s.emit(page.Event{Type: page.EventRequestBlocked, ContextID: ctxID, URL: pagekit.RedactURL(u.String()), Data: map[string]any{
		"resource_type": resourceType(ev.Request.Destination),
		"layer":         "interception",
		"reason":        "unapproved_side_effect",
		"method":        ev.Request.Method,
	}})
}

// readBody fetches a held request's body from the collector (while it is still blocked).
func (s *Session) readBody(ctx context.Context, h *heldReq, size *int64) {
	defer close(h.ready)
	if size != nil && *size == 0 {
		h.info.BodyKnown = true
		return
	}
	ctx, cancel := context.WithTimeout(ctx, holdCmdTimeout)
	defer cancel()
	disown := true
	res, err := s.e.c.NetworkGetData(ctx, bidi.NetworkGetDataParameters{DataType: bidi.NetworkDataTypeRequest,
		Collector: s.collector, Disown: &disown, Request: h.rid})
	if err != nil {
		return // not collected (larger than maxHeldBody, or a file): BodyKnown stays false
	}
	switch res.Bytes.Type {
	case "string":
		h.info.Body, h.info.BodyKnown = []byte(res.Bytes.Value), true
	case "base64":
		if b, err := base64.StdEncoding.DecodeString(res.Bytes.Value); err == nil {
			h.info.Body, h.info.BodyKnown = b, true
		}
	}
}

// resourceType is a request's destination as request.blocked events name it.
func resourceType(dest string) string {
	if dest == "" {
		return "other"
	}
	return dest
}

// onRequestAnswered notes that a request got its response or failed, unsent when it failed before
// a byte was sent (the released one: Release returns once the site answered).
func (s *Session) onRequestAnswered(rid bidi.NetworkRequest, unsent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released != "" && s.released == rid {
		s.releasedDone, s.releasedUnsent = true, unsent
		s.notifyLocked()
	}
}

// notifyLocked wakes whatever waits for the tab's navigations or the session's holds.
func (s *Session) notifyLocked() {
	close(s.navCh)
	s.navCh = make(chan struct{})
}

// notifyTabs wakes whatever waits on any tab of the session (a hold ends an act's wait, whichever
// tab it acts on).
func (s *Session) notifyTabs() {
	for _, t := range s.tabs() {
		t.mu.Lock()
		t.notifyLocked()
		t.mu.Unlock()
	}
}

// heldNow is the session's pending hold once its body was read, nil when none.
func (s *Session) heldNow(ctx context.Context) *page.HeldRequest {
	m := s.first()
	m.mu.Lock()
	h := m.hold
	m.mu.Unlock()
	if h == nil {
		return nil
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
	}
	info := h.info
	if !isClosed(h.ready) {
		info.Body, info.BodyKnown = nil, false
	}
	return &info
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// holding tells whether the session holds a request.
func (s *Session) holding() bool {
	m := s.first()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hold != nil
}

// awaitLateRequests waits, after an act that may submit settled, until the page has been quiet
// at interception (pagekit.AwaitQuiet): Firefox reports some requests a little after the input
// that caused them (beacons, a loaded machine), and a non-safe request that arrives after the act
// returned is refused rather than held.
func (s *Session) awaitLateRequests(ctx context.Context, req page.ActRequest) {
	switch req.Action {
	case page.ActionFill, page.ActionClear, page.ActionHover, page.ActionFocus, page.ActionScrollIntoView:
		return
	}
	if req.Approved || !s.pol.HoldsRequests() {
		return
	}
	m := s.first()
	pagekit.AwaitQuiet(ctx, func() (bool, time.Time, <-chan struct{}) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.hold != nil, m.lastPaused, m.navCh
	})
}

// takeHold removes the hold id.
func (s *Session) takeHold(id string) (*heldReq, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold == nil || s.hold.info.ID != id {
		return nil, page.ErrNoSuchHold
	}
	h := s.hold
	s.hold = nil
	s.notifyLocked()
	return h, nil
}

// Release sends the held request id, exactly once, and waits for the site's answer and what it
// causes (a navigation it is part of) as an act does. A request the page abandoned meanwhile (it
// timed out, was aborted, its document went away) is page.ErrHoldAbandoned: nothing was sent.
func (s *Session) Release(ctx context.Context, id string) (*page.ActResult, error) {
	s = s.first() // holds are the session's
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx, commandTimeout)
	defer cancel()
	s.actMu.Lock()
	defer s.actMu.Unlock()
	h, err := s.takeHold(id)
	if err != nil {
		return nil, err
	}
	<-h.ready // its body is read before it goes (the collector gives it up once sent)
	s.mu.Lock()
	s.acting = &actHold{release: h.rid}
	s.released, s.releasedDone, s.releasedUnsent = h.rid, false, false
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.acting, s.released = nil, ""
		s.mu.Unlock()
	}()
	if err := s.e.c.NetworkContinueRequest(ctx, bidi.NetworkContinueRequestParameters{Request: h.rid}); err != nil {
		if err := s.check(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", page.ErrHoldAbandoned, s.mapErr(err))
	}
	for {
		s.mu.Lock()
		done, ch := s.releasedDone, s.navCh
		s.mu.Unlock()
		if done {
			break
		}
		select {
		case <-ch:
			continue
		case <-ctx.Done():
		}
		if err := s.check(); err != nil {
			return nil, err
		}
		return nil, &page.ActionTimeoutError{Reason: "the site did not answer the released request in time"}
	}
	s.mu.Lock()
	unsent := s.releasedUnsent
	s.mu.Unlock()
	if unsent {
		// Firefox keeps a request the page gave up while it was blocked, and reports it only when
		// it is continued: it fails then, before a byte is written.
		return nil, fmt.Errorf("%w: the browser failed it before sending it", page.ErrHoldAbandoned)
	}
	// No grace after a release (unlike an approved act): what was approved is that one request.
	t, doc0, started0 := h.tab, h.doc0, h.started0
	if t == nil || t.check() != nil { // its tab closed meanwhile: the first one's state now
		t = s
		s.mu.Lock()
		doc0, started0 = s.docs.doc, s.navStarted
		s.mu.Unlock()
	}
	return t.settle(ctx, doc0, started0)
}

// Deny refuses the held request id: the page sees a network error (a form's submission keeps its
// document); nothing was sent. It returns once the browser has failed it.
func (s *Session) Deny(ctx context.Context, id string) error {
	s = s.first()
	if err := s.check(); err != nil {
		return err
	}
	h, err := s.takeHold(id)
	if err != nil {
		return err
	}
	ctx, cancel := withTimeout(ctx, holdCmdTimeout)
	defer cancel()
	if err := s.e.c.NetworkFailRequest(ctx, bidi.NetworkFailRequestParameters{Request: h.rid}); err != nil && !bidi.IsCode(err, bidi.ErrorCodeNoSuchRequest) {
		return s.mapErr(fmt.Errorf("firefox: failing the held request: %w", err))
	}
	return nil
}
