package browser

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/audits"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"

	"github.com/originweave/bap/server/internal/egress"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
)

// The origin policy at the network layer: three layers, outermost last (ADR 0016).
//
// Interception. Every attached target (pages, popups, iframes in or out of process, dedicated,
// shared and service workers) has Fetch interception on every request before it runs (targets are
// auto-attached paused), so the policy is checked for top-level and frame navigations (each
// redirect hop is paused again as a new request) and every subresource. A refused document is
// answered with an empty 204, which makes the browser abandon the navigation and keep the current
// document; a refused subresource fails with ERR_BLOCKED_BY_CLIENT. Interception also holds the
// non-safe requests an act causes under a form_submission rule (hold.go).
//
// CSP. A Content-Security-Policy connect-src directive listing the allowed origins (and their
// ws/wss forms) is added to documents and workers' script responses, so that the renderer refuses
// WebSockets, fetch, EventSource and beacons to other origins before a request exists; those
// refusals are reported from Audits issues (onIssue). CSP can only narrow a page's own policies.
// Over plain HTTP the egress proxy adds it (egress.Config.DocumentCSP) to every response that can
// become a document or a worker's global scope, judged by the request's Sec-Fetch-Dest, not by the
// response: sniffed documents, attachments rendered inline, slow bodies and scripts served as
// text/plain get it too, and the browser passes the response on untouched (no body read, no
// fulfil: two round trips fewer on every navigation). Over TLS the proxy sees only a tunnel, so
// the browser re-serves HTML, XML and SVG documents and worker scripts with it
// (onResponsePaused); there it is best-effort: sniffed documents, attachments rendered inline,
// bodies slower than Config.cspBodyTimeout and scripts served as text/plain go without it.
//
// Proxy. Every browser context sends all its traffic through an egress proxy of its own
// (package egress, started in newContextSession with proxyBypassList "<-loopback>"): each HTTP
// request and each CONNECT (TLS, WebSockets) is checked against the session's policy before a byte
// leaves, private addresses are reached only when the policy names the host, names are resolved
// once and the checked address is dialled (no DNS rebinding), and the server's own listeners are
// never reached. This is the layer nothing gets around; what the other two miss ends here.
//
// Channels a proxy cannot see are switched off where the browser starts (process.go): QUIC
// (--disable-quic) and WebRTC's non-proxied UDP (--webrtc-ip-handling-policy). DNS prefetch and
// preconnect resolve nothing: with a proxy, name resolution is the proxy's. Every refusal is a
// request.blocked event naming its layer and reason, with the URL stripped of its query.

// onRequestPaused answers a paused request: continue it when the policy
// allows its URL, refuse it otherwise.
func (s *Session) onRequestPaused(tc *targetConn, ev *fetch.EventRequestPaused) {
	if ev.ResponseStatusCode != 0 || ev.ResponseErrorReason != "" {
		s.noteAnswered(ev.RequestID)
		s.onResponsePaused(tc, ev)
		return
	}
	raw := ""
	if ev.Request != nil {
		raw = ev.Request.URL + ev.Request.URLFragment
	}
	if s.fulfillSeed(tc, ev, raw) {
		return
	}
	u, err := url.Parse(raw)
	s.mu.Lock()
	pol := s.pol
	s.lastPaused = time.Now()
	s.mu.Unlock()
	if err == nil && pol.AllowsURL(u) {
		if s.onReplay(tc, ev, u) {
			return // the approved navigation, sent again exactly as it was held (hold.go)
		}
		if ev.Request != nil {
			if rule, ok := pol.HoldsRequest(ev.Request.Method, u, s.senderURL(tc, ev)); ok && s.holdOrRefuse(tc, ev, u, rule) {
				return // held for approval, or refused (hold.go)
			}
		}
		fireCmd(tc.sess, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		return
	}
	red := redactURL(raw)
	isDoc := ev.ResourceType == network.ResourceTypeDocument
	ctxID, epoch := "", ""
	main := false
	if t := tc.tab; t != nil {
		s.mu.Lock()
		ctxID, epoch = t.id, t.epoch
		if isDoc && t.main != nil && ev.FrameID == t.main.id {
			main = true
			t.blocked++
			t.blockedURL = red
			s.notifyLocked()
		}
		s.mu.Unlock()
	}
	s.refuseRequest(tc, ev)
	if ev.RedirectedRequestID != "" && s.redirectReported(red) {
		return // the proxy's report of this hop was recorded already (a loaded browser came late)
	}
	s.claimRedirect(red) // this event, with its tab, stands for the proxy's report of the redirect
	s.emit(Event{Type: EventRequestBlocked, ContextID: ctxID, EpochID: epoch, URL: red, Data: map[string]any{
		"resource_type": resourceType(ev),
		"layer":         "interception",
		"reason":        "origin_not_allowed",
		"navigation":    isDoc,
		"main_frame":    main,
		"redirect":      ev.RedirectedRequestID != "",
	}})
}

// senderURL is the URL of the document that sent a paused request (its frame's, else its tab's),
// nil when unknown (a worker's request, a frame not seen yet): the rules then apply (fail safe).
func (s *Session) senderURL(tc *targetConn, ev *fetch.EventRequestPaused) *url.URL {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := tc.tab
	if t == nil || tc.typ != "page" && tc.typ != "iframe" {
		return nil
	}
	raw := ""
	if f := t.frames[ev.FrameID]; f != nil {
		raw = f.url
	} else if t.main != nil {
		raw = t.main.url
	}
	if ev.ResourceType == network.ResourceTypeDocument && ev.FrameID == t.main.id && t.main != nil {
		raw = t.main.url // a form's submission is sent by the document it replaces
	}
	u, err := url.Parse(raw)
	if err != nil || raw == "" {
		return nil
	}
	return u
}

// onResponsePaused records a document's status and adds the connect-src
// policy to the response of a document (or of a worker's script).
//
// Headers changed by Fetch.continueResponse are not parsed again by
// Chromium (its CSP would be ignored), so the response is fulfilled anew
// with the original body: this buffers a document before it renders, which
// is why it is limited to HTML/SVG/XML documents and worker scripts of at
// most maxCSPBody bytes that are not attachments.
func (s *Session) onResponsePaused(tc *targetConn, ev *fetch.EventRequestPaused) {
	if ev.ResponseErrorReason != "" || ev.ResponseStatusCode == 0 {
		fireCmd(tc.sess, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		return
	}
	s.mu.Lock()
	csp := s.csp
	if t := tc.tab; t != nil && ev.ResourceType == network.ResourceTypeDocument {
		if f := t.frames[ev.FrameID]; f != nil {
			f.status = int(ev.ResponseStatusCode)
		}
		if ownCSP(ev.ResponseHeaders, csp) {
			tc.ownCSP = true
		}
		if isAttachment(ev.ResponseHeaders) {
			// The navigation becomes a download; an act waits for it.
			t.expectDL++
			s.notifyLocked()
		}
	}
	s.mu.Unlock()
	if !browserAddsCSP(tc, ev, csp) {
		fireCmd(tc.sess, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		return
	}
	s.reserved.Add(1)
	headers := make([]*fetch.HeaderEntry, 0, len(ev.ResponseHeaders)+1)
	headers = append(headers, ev.ResponseHeaders...)
	headers = append(headers, &fetch.HeaderEntry{Name: "Content-Security-Policy", Value: csp})
	wait := s.b.cfg.cspBodyTimeout
	if wait <= 0 {
		wait = 60 * time.Second
	}
	go func() {
		// A body that takes longer goes on without the CSP: the proxy is what guarantees that its
		// WebSockets and requests stay within the policy; the CSP only reports them earlier.
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		body, err := call(ctx, tc.sess, fetch.GetResponseBody, fetch.GetResponseBodyParams{RequestID: ev.RequestID})
		if err != nil {
			// No body (204, 304, …) or the request went away.
			fireCmd(tc.sess, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
			return
		}
		fireCmd(tc.sess, fetch.FulfillRequest, fetch.FulfillRequestParams{
			RequestID: ev.RequestID, ResponseCode: ev.ResponseStatusCode, ResponsePhrase: ev.ResponseStatusText,
			ResponseHeaders: headers, Body: body.Body,
		})
	}()
}

// browserAddsCSP tells whether the paused response is re-served with the connect-src policy csp
// by the browser: a document or worker script (needsCSP) that does not carry csp already. Over
// plain HTTP the egress proxy has added it (Config.DocumentCSP) to any document, whatever its
// type, size or speed, so the response goes on untouched: no body read, no fulfil. A response
// over TLS (the proxy sees only a tunnel), or one that lacks it for any other reason, is
// re-served as before.
func browserAddsCSP(tc *targetConn, ev *fetch.EventRequestPaused, csp string) bool {
	return csp != "" && !hasCSP(ev.ResponseHeaders, csp) && needsCSP(tc, ev)
}

// hasCSP tells whether the response carries the policy csp (as the egress proxy adds it to
// plain-HTTP documents).
func hasCSP(hs []*fetch.HeaderEntry, csp string) bool {
	if csp == "" {
		return false
	}
	for _, h := range hs {
		if strings.EqualFold(h.Name, "content-security-policy") && h.Value == csp {
			return true
		}
	}
	return false
}

// ownCSP tells whether the response carries a Content-Security-Policy of the site's own, other
// than the session's policy csp.
func ownCSP(hs []*fetch.HeaderEntry, csp string) bool {
	for _, h := range hs {
		if strings.EqualFold(h.Name, "content-security-policy") && h.Value != csp {
			return true
		}
	}
	return false
}

func isAttachment(hs []*fetch.HeaderEntry) bool {
	for _, h := range hs {
		if strings.EqualFold(h.Name, "content-disposition") && strings.HasPrefix(strings.ToLower(strings.TrimSpace(h.Value)), "attachment") {
			return true
		}
	}
	return false
}

// maxCSPBody bounds the responses that get the connect-src policy.
const maxCSPBody = 8 << 20

// needsCSP tells whether the paused response is a document or worker script
// that can run code and is small enough to buffer.
func needsCSP(tc *targetConn, ev *fetch.EventRequestPaused) bool {
	if ev.ResponseStatusCode/100 == 3 || ev.ResponseStatusCode == 204 || ev.ResponseStatusCode == 304 {
		return false
	}
	ctype, disp, length := "", "", ""
	for _, h := range ev.ResponseHeaders {
		switch strings.ToLower(h.Name) {
		case "content-type":
			ctype = strings.ToLower(h.Value)
		case "content-disposition":
			disp = strings.ToLower(h.Value)
		case "content-length":
			length = h.Value
		}
	}
	if strings.HasPrefix(strings.TrimSpace(disp), "attachment") {
		return false
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(length), 10, 64); err == nil && n > maxCSPBody {
		return false
	}
	if tc.typ == "page" || tc.typ == "iframe" {
		return ev.ResourceType == network.ResourceTypeDocument &&
			(ctype == "" || strings.Contains(ctype, "html") || strings.Contains(ctype, "xml"))
	}
	return strings.Contains(ctype, "javascript") || strings.Contains(ctype, "ecmascript")
}

// connectSrc returns the CSP that limits connections (WebSocket above all)
// to the policy's origins.
func connectSrc(pol *policy.Policy) string {
	var b strings.Builder
	b.WriteString("connect-src blob: data:")
	for _, p := range pol.AllowedOrigins() {
		s := p.String()
		if strings.Contains(s, "[") {
			continue // CSP has no syntax for IPv6 literals
		}
		b.WriteByte(' ')
		b.WriteString(s)
		b.WriteByte(' ')
		if rest, ok := strings.CutPrefix(s, "https://"); ok {
			b.WriteString("wss://" + rest)
		} else if rest, ok := strings.CutPrefix(s, "http://"); ok {
			b.WriteString("ws://" + rest)
		}
	}
	return b.String()
}

// onIssue reports what the connect-src CSP refused (a WebSocket, fetch, EventSource, beacon or a
// redirect of one) as request.blocked: the renderer refused it before a request existed, so
// neither interception nor the proxy saw it. Only connect-src refusals of URLs the policy does
// not allow are ours; the page's own CSP refusing one of its allowed URLs is the page's business.
func (s *Session) onIssue(tc *targetConn, is *audits.InspectorIssue) {
	if is == nil || is.Code != audits.InspectorIssueCodeContentSecurityPolicyIssue || is.Details == nil {
		return
	}
	d := is.Details.ContentSecurityPolicyIssueDetails
	if d == nil || d.IsReportOnly || d.ViolatedDirective != "connect-src" || d.BlockedURL == "" {
		return
	}
	u, err := url.Parse(d.BlockedURL)
	s.mu.Lock()
	pol := s.pol
	ctxID, epoch := "", ""
	if t := tc.tab; t != nil {
		ctxID, epoch = t.id, t.epoch
	}
	s.mu.Unlock()
	reason := "origin_not_allowed"
	data := map[string]any{}
	if err == nil && pol.AllowsURL(u) {
		// The browser names a refused redirect by the URL before it. Over plain HTTP the proxy saw
		// the redirect and reports where it led (deferRedirect); a document with a CSP of its own may
		// have refused the request itself, which is not ours to report.
		s.mu.Lock()
		own := tc.ownCSP
		s.mu.Unlock()
		if own || u.Scheme == "http" || u.Scheme == "ws" {
			return
		}
		reason = "redirect_not_allowed"
		data["before_redirect"] = true
	}
	rt := "connect" // fetch, XHR, EventSource or beacon: the CSP does not say which
	if err == nil && (u.Scheme == "ws" || u.Scheme == "wss") {
		rt = "websocket"
	}
	data["resource_type"], data["layer"], data["reason"] = rt, "csp", reason
	red := redactURL(d.BlockedURL)
	s.claimRedirect(red)
	s.emit(Event{Type: EventRequestBlocked, ContextID: ctxID, EpochID: epoch, URL: red, Data: data})
}

// redirectReportDelay is how long the proxy's report of a redirect to a disallowed URL waits for a
// browser layer to report the hop itself.
const redirectReportDelay = 750 * time.Millisecond

// maxPendingRedirects bounds the reports waiting; past it they are recorded at once.
const maxPendingRedirects = 256

// deferRedirect records the proxy's report of a redirect to a disallowed URL after
// redirectReportDelay, unless a browser layer reports the hop first (claimRedirect): a refused
// hop is then one event, with its tab and whether it was a navigation. When the browser never
// tries the hop (the CSP refused a fetch's redirect, naming only the URL before it), the proxy's
// report is the one event, and the only one that says where the redirect led.
func (s *Session) deferRedirect(ev Event) {
	k := redirectKey(ev.URL)
	s.mu.Lock()
	if s.redirects == nil {
		s.redirects = make(map[string]*time.Timer)
	}
	if _, dup := s.redirects[k]; dup {
		s.mu.Unlock()
		return // the same redirect again before the first was settled: one report
	}
	if len(s.redirects) >= maxPendingRedirects {
		s.mu.Unlock()
		s.emit(ev)
		return
	}
	var tm *time.Timer
	tm = time.AfterFunc(redirectReportDelay, func() {
		s.mu.Lock()
		mine := s.redirects[k] == tm
		s.mu.Unlock()
		if !mine {
			return
		}
		s.emit(ev) // before it stops waiting: whoever waits for none to wait sees it recorded
		s.mu.Lock()
		if s.redirects[k] == tm {
			delete(s.redirects, k)
		}
		s.noteReportedLocked(k)
		s.notifyLocked()
		s.mu.Unlock()
	})
	s.redirects[k] = tm
	s.mu.Unlock()
}

// claimRedirect drops a waiting proxy report of a redirect to u (a URL, or the host:port of a
// tunnel), because the caller reports the refused hop itself.
func (s *Session) claimRedirect(u string) {
	k := redirectKey(u)
	s.mu.Lock()
	defer s.mu.Unlock()
	for pk, tm := range s.redirects {
		if pk == k || authorityOf(pk) == k {
			tm.Stop()
			delete(s.redirects, pk)
			s.notifyLocked()
		}
	}
}

// reportedRedirectTTL is how long a recorded proxy report of a redirect stands for the browser's
// own refusal of that hop, should the browser reach it after redirectReportDelay.
const reportedRedirectTTL = 30 * time.Second

// noteReportedLocked remembers that the proxy's report of the redirect keyed k was recorded (s.mu
// held), forgetting reports older than reportedRedirectTTL and keeping at most
// maxPendingRedirects.
func (s *Session) noteReportedLocked(k string) {
	now := time.Now()
	if s.reported == nil {
		s.reported = make(map[string]time.Time)
	}
	for rk, at := range s.reported {
		if now.Sub(at) > reportedRedirectTTL {
			delete(s.reported, rk)
		}
	}
	if len(s.reported) < maxPendingRedirects {
		s.reported[k] = now
	}
}

// redirectReported tells whether the proxy's report of a redirect to u was recorded within
// reportedRedirectTTL, and forgets it: one hop, one event, however late the browser reaches it.
func (s *Session) redirectReported(u string) bool {
	k := redirectKey(u)
	s.mu.Lock()
	defer s.mu.Unlock()
	for rk, at := range s.reported {
		if (rk == k || rk == authorityOf(k)) && time.Since(at) <= reportedRedirectTTL {
			delete(s.reported, rk)
			return true
		}
	}
	return false
}

// redirectKey is u compared without case, query or fragment.
func redirectKey(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	return strings.ToLower(u)
}

// authorityOf is the host:port of a URL key, with the scheme's default port: what a tunnel to it
// is named by.
func authorityOf(k string) string {
	u, err := url.Parse(k)
	if err != nil || u.Host == "" {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	switch u.Scheme {
	case "https", "wss":
		return u.Host + ":443"
	default:
		return u.Host + ":80"
	}
}

// claimAudits tells whether tc is the first session attached to its target to ask for its
// issues: a worker attached through more than one session (the browser's and its page's) would
// report each refusal once per session.
func (s *Session) claimAudits(tc *targetConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.auditing == nil || len(s.auditing) > 4096 {
		s.auditing = make(map[target.ID]bool)
	}
	if s.auditing[tc.id] {
		return false
	}
	s.auditing[tc.id] = true
	return true
}

// proxyBypassList is every context's proxy bypass list. "<-loopback>" removes Chromium's implicit
// bypass of localhost and loopback addresses, so that they go through the proxy too (they are
// private addresses, reachable only when the policy names them); nothing bypasses the proxy.
const proxyBypassList = "<-loopback>"

// sessionGate connects a context's egress proxy to its session, which exists only after the
// context does: until bind, and while the session has no policy (a warm context), the proxy
// refuses everything.
type sessionGate struct {
	mu sync.Mutex
	s  *Session
}

func (g *sessionGate) bind(s *Session) {
	g.mu.Lock()
	g.s = s
	g.mu.Unlock()
}

func (g *sessionGate) session() *Session {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.s
}

// documentCSP is the connect-src policy the proxy adds to plain-HTTP documents and worker
// scripts, "" before the session has one.
func (g *sessionGate) documentCSP() string {
	s := g.session()
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.csp
}

// policy is the session's policy, nil (refuse everything) before it has one.
func (g *sessionGate) policy() *policy.Policy {
	s := g.session()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pol
}

// blocked reports a refusal of the proxy as a request.blocked event of the session. The proxy
// cannot tell which tab sent it (all of a context's tabs share it): no context id.
func (g *sessionGate) blocked(b egress.Blocked) {
	s := g.session()
	if s == nil {
		return
	}
	ev := Event{Type: EventRequestBlocked, URL: b.URL, Data: map[string]any{
		"resource_type": b.ResourceType,
		"layer":         "proxy",
		"reason":        string(b.Reason),
	}}
	if b.Reason == egress.ReasonRedirectNotAllowed {
		s.deferRedirect(ev)
		return
	}
	s.claimRedirect(b.URL)
	s.emit(ev)
}

// Record makes the context's egress proxy archive what it forwards into rec (a task's
// policy.record) until the session closes; rec must implement egress.Recorder.
func (s *Session) Record(rec page.Recorder) error { return s.proxy.Record(rec) }

// ServeFrom makes the context's egress proxy answer every request from a (a replay, ADR 0035)
// and never reach the network again; a must implement egress.Archive.
func (s *Session) ServeFrom(a page.Archive) error { return s.proxy.Replay(a) }

// RefuseUnsafe makes the context's egress proxy send only plain-HTTP requests with a safe method
// from now on (a live dry-run replay, ADR 0035).
func (s *Session) RefuseUnsafe() error {
	s.proxy.RefuseUnsafe()
	return nil
}
