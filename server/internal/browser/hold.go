package browser

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"

	"github.com/originweave/bap/server/internal/pagekit"
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
// been quiet at interception (pagekit.AwaitQuiet). Only sessions with a form_submission rule pay
// this.

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
	pagekit.AwaitQuiet(ctx, func() (bool, time.Time, <-chan struct{}) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.hold != nil, s.lastPaused, s.changed
	})
}

// approvedGrace is how long after an approved act its late requests still go out.
const approvedGrace = pagekit.ApprovedGrace

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
	doc  bool // it loads a document (a form's submission): abandoned at once, replayed by Release
	// A held navigation is not left paused: while a frame's navigation is pending, the browser
	// holds back every DevTools command to that frame (observe, act, evaluate), so a paused
	// submission would freeze the page for as long as the approval waits. It is answered with an
	// empty 204 at once (the page keeps its document; nothing was sent) and Release sends it
	// again, exactly as it was, by navigating the frame and overriding that request's method,
	// headers and body at interception.
	frame   cdp.FrameID
	headers []*fetch.HeaderEntry
	rawURL  string // the URL as sent, query included (info.URL is what people see)
}

// replayNav is a held navigation Release is sending again: the next document request of its
// frame to its URL is given the held request's method, headers and body.
type replayNav struct {
	frame  cdp.FrameID
	url    string
	method string
	hdrs   []*fetch.HeaderEntry
	body   []byte
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
		if s.hold.doc {
			s.hold.frame, s.hold.headers, s.hold.rawURL = ev.FrameID, headerEntries(ev.Request.Headers), u.String()
		}
		doc := s.hold.doc
		s.notifyLocked()
		s.mu.Unlock()
		if doc {
			s.refuseRequest(tc, ev) // abandoned now, sent again by Release (see heldReq.doc)
		}
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
	if h.doc {
		if err := s.replayNavigation(ctx, h); err != nil {
			return nil, err
		}
	} else if _, err := call(ctx, h.tc.sess, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: h.rid, InterceptResponse: ptr(true)}); err != nil {
		// Its response is paused too, so that Release returns once the site has answered: the
		// site has processed the request by then, whatever the page does with the answer.
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
		return nil // abandoned when it was held: the page kept its document
	}
	fireCmd(h.tc.sess, fetch.FailRequest, fetch.FailRequestParams{RequestID: h.rid, ErrorReason: network.ErrorReasonBlockedByClient})
	return nil
}

// replayNavigation sends a held navigation again: the frame navigates to its URL, and
// interception gives that request the held method, headers and body (onReplay).
func (s *Session) replayNavigation(ctx context.Context, h *heldReq) error {
	raw := h.rawURL
	s.mu.Lock()
	s.replay = &replayNav{frame: h.frame, url: raw, method: h.info.Method, hdrs: h.headers, body: h.info.Body}
	s.mu.Unlock()
	var res page.NavigateResult
	f := start(ctx, h.tc.sess, page.Navigate, page.NavigateParams{URL: raw, FrameID: h.frame})
	if err := f.wait(ctx, &res); err != nil || res.ErrorText != "" {
		s.mu.Lock()
		s.replay = nil
		s.mu.Unlock()
		if derr := s.deadErr(); derr != nil {
			return derr
		}
		return fmt.Errorf("%w: sending it again failed: %w %s", ErrHoldAbandoned, err, res.ErrorText)
	}
	return nil
}

// onReplay continues the document request that replays a held navigation with the held
// method, headers and body (and its response intercepted, so Release knows when the site
// answered); false when ev is not that request.
func (s *Session) onReplay(tc *targetConn, ev *fetch.EventRequestPaused, u *url.URL) bool {
	if ev.ResourceType != network.ResourceTypeDocument {
		return false
	}
	s.mu.Lock()
	r := s.replay
	if r == nil || ev.FrameID != r.frame || u == nil || u.String() != r.url {
		s.mu.Unlock()
		return false
	}
	s.replay = nil
	s.released = ev.RequestID
	s.mu.Unlock()
	fireCmd(tc.sess, fetch.ContinueRequest, fetch.ContinueRequestParams{
		RequestID: ev.RequestID, Method: r.method, Headers: r.hdrs, PostData: r.body, InterceptResponse: ptr(true),
	})
	return true
}

// headerEntries are a request's headers as interception overrides take them.
func headerEntries(h network.Headers) []*fetch.HeaderEntry {
	out := make([]*fetch.HeaderEntry, 0, len(h))
	for k, v := range h {
		if sv, ok := v.(string); ok {
			out = append(out, &fetch.HeaderEntry{Name: k, Value: sv})
		}
	}
	return out
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
