package browser

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
)

// Side effects judged by what leaves the browser.
//
// Under a form_submission rule, a request with a non-safe method (policy.HoldsRequest) is never
// sent on the page's word alone:
//   - while an act runs (from its input until it settles), the first such request is held: paused
//     by interception, unsent, and the act returns at once with ActResult.Held. Release sends
//     exactly that request, once, and waits for what it causes as an act would; Deny fails it.
//   - any other such request — one the page sends on its own, after the act returned, or while a
//     hold is pending — is refused (request.blocked, reason unapproved_side_effect). Holding it
//     instead would let a page queue requests nobody asked for behind an approval.
//
// While a release settles, only the released request and its own redirects go out: a page that
// sends a harmless request to be approved and the real one once it is answered gets the second
// refused. An act a person approved before it ran (ActRequest.Approved: an any_action hold) is
// not held again; nor are requests that reach interception within
// approvedGrace after such an act returned (the browser reports a request the page sent during
// the act a little later than the act's own events, more so on a loaded machine). A side effect carried by a GET (a link that deletes)
// cannot be told from a read and is not held; any_action rules cover those.

// An act that may submit (a click, a key, a choice) waits, after it settled, until the page has
// been quiet at interception for requestQuiet (at most requestQuietMax): the browser reports some
// requests late — beacons are sent asynchronously, a loaded machine delays the rest — and a
// non-safe request that arrives after the act returned is refused rather than held. Only sessions
// with a form_submission rule pay this.
const (
	requestQuiet    = 150 * time.Millisecond
	requestQuietMax = time.Second
)

// awaitLateRequests waits for the requests an act caused that the browser reports late.
func (s *Session) awaitLateRequests(ctx context.Context, req ActRequest) {
	switch req.Action {
	case ActionFill, ActionClear, ActionHover, ActionFocus, ActionScrollIntoView:
		return
	}
	s.mu.Lock()
	a, pol := s.acting, s.pol
	s.mu.Unlock()
	if a == nil || a.approved || a.release != "" || !pol.HoldsRequests() {
		return
	}
	start := time.Now()
	for {
		s.mu.Lock()
		held, last, ch := s.hold != nil, s.lastPaused, s.changed
		s.mu.Unlock()
		now := time.Now()
		until := start
		if last.After(until) {
			until = last
		}
		until = until.Add(requestQuiet)
		if held || !now.Before(until) || now.Sub(start) >= requestQuietMax {
			return
		}
		timer := time.NewTimer(until.Sub(now))
		select {
		case <-timer.C:
		case <-ch:
		case <-ctx.Done():
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// approvedGrace is how long after an approved act its late requests still go out.
const approvedGrace = time.Second

// actHold is the hold state of the act that is running.
type actHold struct {
	approved bool // its requests go out: a person approved the act itself
	// release is the held request a Release is sending: only its own redirects go out with it;
	// anything else the page sends meanwhile is refused (it was not what the person approved).
	release fetch.RequestID
	tab     *tab      // the act's tab
	win     actWindow // the act's window, for the settle after a release
}

// heldReq is a request held for approval.
type heldReq struct {
	info HeldRequest
	tc   *targetConn
	rid  fetch.RequestID
	tab  *tab
	win  actWindow
	doc  bool // it loads a document (a form's submission): denied with an empty 204
}

// holdOrRefuse decides a paused request that an approval rule covers (rule); it returns false
// when the request may go on (an approved act's). Called for allowed origins only.
func (s *Session) holdOrRefuse(tc *targetConn, ev *fetch.EventRequestPaused, u *url.URL, rule int) bool {
	s.mu.Lock()
	a := s.acting
	if a != nil && a.approved || a == nil && time.Now().Before(s.approvedUntil) {
		s.mu.Unlock()
		return false
	}
	if a != nil && a.release != "" && ev.RedirectedRequestID == a.release {
		a.release = ev.RequestID // a 307/308 hop of the released request: still that request
		s.mu.Unlock()
		return false
	}
	if a != nil && a.release == "" && s.hold == nil {
		body, known := postData(ev.Request)
		s.hold = &heldReq{
			info: HeldRequest{ID: "hold_" + rand.Text()[:16], Method: ev.Request.Method, URL: redactURL(u.String()),
				Rule: rule, Body: body, BodyKnown: known},
			tc: tc, rid: ev.RequestID, tab: a.tab, win: a.win, doc: ev.ResourceType == network.ResourceTypeDocument,
		}
		s.notifyLocked()
		s.mu.Unlock()
		return true
	}
	ctxID, epoch := "", ""
	if t := tc.tab; t != nil {
		ctxID, epoch = t.id, t.epoch
	}
	s.mu.Unlock()
	s.refuseRequest(tc, ev)
	s.emit(Event{Type: EventRequestBlocked, ContextID: ctxID, EpochID: epoch, URL: redactURL(u.String()), Data: map[string]any{
		"resource_type": resourceType(ev),
		"layer":         "interception",
		"reason":        "unapproved_side_effect",
		"method":        ev.Request.Method,
	}})
	return true
}

// refuseRequest answers a refused paused request: a document with an empty 204 (the frame keeps
// its document), anything else with a network error.
func (s *Session) refuseRequest(tc *targetConn, ev *fetch.EventRequestPaused) {
	if ev.ResourceType == network.ResourceTypeDocument {
		fireCmd(tc.sess, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: ev.RequestID, ResponseCode: 204})
		return
	}
	fireCmd(tc.sess, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
}

// heldNowLocked is the pending hold, nil when none.
func (s *Session) heldNowLocked() *HeldRequest {
	if s.hold == nil {
		return nil
	}
	h := s.hold.info
	return &h
}

// Release sends the held request id, exactly once, and waits for what it causes (its response,
// a navigation it is part of, popups, downloads) as an act does. A request the page abandoned
// meanwhile is ErrHoldAbandoned: nothing was sent.
func (s *Session) Release(ctx context.Context, id string) (*ActResult, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	s.actMu.Lock()
	defer s.actMu.Unlock()
	h, err := s.takeHold(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.acting = &actHold{release: h.rid, tab: h.tab, win: h.win}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.acting = nil
		s.mu.Unlock()
	}()
	s.mu.Lock()
	s.released, s.releasedDone = h.rid, false
	s.mu.Unlock()
	// Its response is paused too, so that Release returns once the site has answered: the site
	// has processed the request by then, whatever the page does with the answer.
	if _, err := call(ctx, h.tc.sess, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: h.rid, InterceptResponse: ptr(true)}); err != nil {
		if derr := s.deadErr(); derr != nil {
			return nil, derr
		}
		return nil, fmt.Errorf("%w: %w", ErrHoldAbandoned, err)
	}
	if err := s.waitFor(ctx, func() bool { return s.releasedDone || h.tab.closed }); err != nil {
		if derr := s.deadErr(); derr != nil {
			return nil, derr
		}
		return nil, &ActionTimeoutError{Reason: "the site did not answer the released request in time"}
	}
	// No grace after a release (unlike an approved act): what was approved is that one request.
	res := s.settle(ctx, h.tab, nil, h.win, ActRequest{})
	if derr := s.deadErr(); derr != nil {
		return nil, derr
	}
	return res, nil
}

// Deny refuses the held request id: the page sees a network error (or, for a form's navigation,
// stays on its document); nothing was sent.
func (s *Session) Deny(ctx context.Context, id string) error {
	_, end, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer end()
	h, err := s.takeHold(id)
	if err != nil {
		return err
	}
	if h.doc {
		fireCmd(h.tc.sess, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: h.rid, ResponseCode: 204})
		return nil
	}
	fireCmd(h.tc.sess, fetch.FailRequest, fetch.FailRequestParams{RequestID: h.rid, ErrorReason: network.ErrorReasonBlockedByClient})
	return nil
}

// noteAnswered marks the released request answered (its response, or its failure, arrived).
func (s *Session) noteAnswered(rid fetch.RequestID) {
	s.mu.Lock()
	if s.released != "" && s.released == rid {
		s.releasedDone = true
		s.notifyLocked()
	}
	s.mu.Unlock()
}

// takeHold removes the hold id.
func (s *Session) takeHold(id string) (*heldReq, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold == nil || s.hold.info.ID != id {
		return nil, ErrNoSuchHold
	}
	h := s.hold
	s.hold = nil
	s.notifyLocked()
	return h, nil
}

// postData is the body of a paused request as the browser handed it over.
func postData(r *network.Request) ([]byte, bool) {
	if r == nil || !r.HasPostData {
		return nil, true
	}
	if len(r.PostDataEntries) == 0 {
		return nil, false
	}
	var b []byte
	for _, e := range r.PostDataEntries {
		b = append(b, e.Bytes...)
	}
	return b, true
}

// resourceType is a paused request's resource type as events name it.
func resourceType(ev *fetch.EventRequestPaused) string {
	return strings.ToLower(string(ev.ResourceType))
}
