package browser

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
)

// listener is a site on an origin no test policy allows, counting every TCP connection it
// accepts: the proof that nothing got out is zero.
type listener struct {
	*httptest.Server
	conns atomic.Int64
}

func newListener(t *testing.T) *listener {
	t.Helper()
	l := &listener{}
	l.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("reached"))
	}))
	l.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			l.conns.Add(1)
		}
	}
	l.Start()
	t.Cleanup(l.Close)
	return l
}

// waitDistinct waits until events give n different non-empty keys.
func (l *eventLog) waitDistinct(t *testing.T, n int, key func(Event) string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		keys := map[string]bool{}
		for _, e := range l.events {
			if k := key(e); k != "" {
				keys[k] = true
			}
		}
		ch := l.wake
		l.mu.Unlock()
		if len(keys) >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d of %d matching events; got %+v", len(keys), n, l.all())
		}
	}
}

// hostilePage is a URL of testdata/hostile on the allowed origin A, aimed at target.
func hostilePage(name, target string, q url.Values) string {
	if q == nil {
		q = url.Values{}
	}
	q.Set("t", target)
	return fx.A + "/hostile/" + name + "?" + q.Encode()
}

// Tried as a hostile page would: a page on an allowed origin tries every channel it has to reach
// a disallowed origin. None gets a connection through, and each try is a request.blocked event.
func TestHostilePageGetsNothingOut(t *testing.T) {
	t.Parallel()
	page := func(hash string) func(string) string {
		return func(tg string) string { return hostilePage("channels.html", tg, nil) + "#" + hash }
	}
	sniffed := func(q url.Values) func(string) string {
		return func(tg string) string { return hostilePage("sniffed.html", tg, q) }
	}
	// Each case names the resource_type its events must carry, by the layer that refused the
	// try and the path it aimed at ("" for a proxy tunnel, which sees only host:port). The CSP
	// names a WebSocket websocket and any other connection connect (its report does not say
	// which); interception names Chromium's resource type; the proxy names Sec-Fetch-Dest, or
	// tunnel for a CONNECT (a WebSocket through the proxy). A layer or path not listed fails.
	type types = map[string]string
	sniffedCSP := types{"csp /sniffed-ws": "websocket", "csp /sniffed-fetch": "connect"}
	workerCSP := types{"csp /worker-ws": "websocket", "csp /worker-fetch": "connect", "csp /worker-es": "connect"}
	cases := []struct {
		name string
		page func(target string) string
		// blocked is how many request.blocked events name the target: each try, once. A
		// preconnect sends no request (nothing to report). A fetch's redirect is refused by the CSP
		// before any request exists, and the browser names only the URL before it: the event
		// naming the target is the proxy's, which saw the redirect.
		blocked int
		// layer is the layer every event must name, "" for any, "-csp" for any but the CSP (the
		// case runs in a session without it).
		layer string
		// types is the resource_type each event must name, keyed by "layer path".
		types types
	}{
		{"websocket", page("websocket"), 1, "csp", types{"csp /ws": "websocket"}},
		{"eventsource", page("eventsource"), 1, "csp", types{"csp /es": "connect"}},
		{"beacon", page("beacon"), 1, "csp", types{"csp /beacon": "connect"}},
		{"fetch", page("fetch"), 1, "csp", types{"csp /fetch": "connect"}},
		{"image", page("image"), 1, "interception", types{"interception /pixel.png": "image"}},
		{"redirect of a fetch", page("redirect-fetch"), 1, "proxy", types{"proxy /redirected": "empty"}},
		// Interception, or the proxy when the hop came later than its report's wait (a loaded
		// machine): one event either way.
		{"redirect of an image", page("redirect-image"), 1, "", types{"interception /pixel.png": "image", "proxy /pixel.png": "image"}},
		{"redirect of a navigation", page("redirect-navigation"), 1, "", types{"interception /landing": "document", "proxy /landing": "document"}},
		{"preconnect", page("preconnect"), 0, "", types{}},
		// Over plain HTTP the egress proxy adds the connect-src policy by what the browser asked
		// for (Sec-Fetch-Dest), not by the response's type, disposition or speed: the browser's
		// own re-serve skips these (a text/plain worker script, a sniffed document, an attachment
		// rendered inline, a body slower than its wait), and the proxy's policy still refuses
		// their tries in the renderer, before any request exists.
		{"dedicated worker served as text/plain", page("worker"), 3, "csp", workerCSP},
		{"service worker", page("serviceworker"), 2, "csp", types{"csp /sw-ws": "websocket", "csp /sw-fetch": "connect"}},
		{"document served as unknown/unknown", sniffed(url.Values{"ct": {"unknown/unknown"}}), 2, "csp", sniffedCSP},
		{"document served as application/unknown", sniffed(url.Values{"ct": {"application/unknown"}}), 2, "csp", sniffedCSP},
		{"Content-Disposition attachment=1", sniffed(url.Values{"cd": {"attachment=1"}}), 2, "csp", sniffedCSP},
		{"document whose body outlasts the CSP", sniffed(url.Values{"slow": {"3000"}}), 2, "csp", sniffedCSP},
		// Without any CSP (as over TLS, where the proxy cannot add one, for the documents above),
		// the proxy and interception still let nothing out. The WebSocket goes to the proxy as a
		// CONNECT tunnel; a fetch or EventSource is Chromium's xhr when interception refuses it,
		// Sec-Fetch-Dest empty when the proxy does.
		{"no CSP: document served as unknown/unknown", sniffed(url.Values{"ct": {"unknown/unknown"}}), 2, "-csp", types{
			"proxy ": "tunnel", "interception /sniffed-fetch": "xhr", "proxy /sniffed-fetch": "empty"}},
		{"no CSP: dedicated worker served as text/plain", page("worker"), 3, "-csp", types{
			"proxy ": "tunnel", "interception /worker-fetch": "xhr", "proxy /worker-fetch": "empty",
			"interception /worker-es": "xhr", "proxy /worker-es": "empty"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := newListener(t)
			b := setup(t)
			if c.layer == "-csp" {
				b.s.mu.Lock()
				b.s.csp = "" // neither the browser nor the proxy adds it
				b.s.mu.Unlock()
			}
			_, err := b.s.Navigate(tctx(t), NavigateRequest{URL: c.page(l.URL), WaitUntil: WaitLoad})
			if err != nil {
				t.Fatalf("navigate: %v", err)
			}
			_, port, _ := net.SplitHostPort(l.Listener.Addr().String())
			blocked := func() []Event {
				var out []Event
				for _, e := range b.ev.all() {
					if e.Type == EventRequestBlocked && strings.Contains(e.URL, "127.0.0.1:"+port) {
						out = append(out, e)
					}
				}
				return out
			}
			if c.blocked > 0 {
				b.ev.waitDistinct(t, c.blocked, func(e Event) string {
					if e.Type != EventRequestBlocked || !strings.Contains(e.URL, "127.0.0.1:"+port) {
						return ""
					}
					return e.URL
				})
			} else {
				// Nothing to wait for but the page's own word that it tried.
				b.waitText("tried")
			}
			for _, e := range blocked() {
				if l, _ := e.Data["layer"].(string); c.layer == "-csp" && l == "csp" || c.layer != "" && c.layer != "-csp" && l != c.layer {
					t.Errorf("refused by layer %q, want %q: %+v", l, c.layer, e)
				}
				if strings.Contains(e.URL, "?") {
					t.Errorf("the event shows the query: %s", e.URL)
				}
				if _, ok := e.Data["layer"].(string); !ok {
					t.Errorf("the event names no layer: %+v", e)
				}
				// What the try was, as the refusing layer names it (the path after the target).
				_, path, _ := strings.Cut(e.URL, "127.0.0.1:"+port)
				key := fmt.Sprint(e.Data["layer"], " ", path)
				if want, ok := c.types[key]; !ok || e.Data["resource_type"] != want {
					t.Errorf("%s: resource_type %q, want %q: %+v", key, e.Data["resource_type"], want, e)
				}
			}
			// Each try once; a service worker may run its install twice (the browser's update
			// check), so tries are counted by what they named.
			named := map[string]bool{}
			for _, e := range blocked() {
				named[e.URL] = true
			}
			if len(named) != c.blocked {
				t.Errorf("request.blocked events name %d different requests to the target, want %d: %+v", len(named), c.blocked, blocked())
			}
			if strings.HasPrefix(c.name, "redirect") {
				// One event per redirect, not one per layer that saw it: wait until no report of
				// the proxy waits for a browser layer's, and until every event emitted so far
				// has been delivered (a marker after them), then count them all.
				if err := b.s.waitFor(tctx(t), func() bool { return len(b.s.redirects) == 0 }); err != nil {
					t.Fatal(err)
				}
				b.s.emit(Event{Type: "test.marker"})
				b.ev.wait(t, func(e Event) bool { return e.Type == "test.marker" })
				if n := len(blocked()); n != 1 {
					t.Errorf("%d request.blocked events for one redirect: %+v", n, blocked())
				}
			}
			if n := l.conns.Load(); n != 0 {
				t.Errorf("the disallowed origin accepted %d connections; events %+v", n, b.ev.all())
			}
		})
	}
}

// A page that tries thousands of refused requests gets at most blockedBurst events into the
// history per window; the rest are counted, not recorded one by one.
func TestBlockedEventsAreBounded(t *testing.T) {
	t.Parallel()
	s := &Session{evWake: make(chan struct{}, 1)}
	for range 3 * blockedBurst {
		s.emit(Event{Type: EventRequestBlocked, URL: "http://127.0.0.1:9/x", Data: map[string]any{}})
	}
	s.evMu.Lock()
	n, dropped := len(s.evQueue), s.blkDropped
	s.blkStart = s.blkStart.Add(-blockedWindow) // the window has passed
	s.evMu.Unlock()
	if n != blockedBurst || dropped != 2*blockedBurst {
		t.Fatalf("%d events queued, %d dropped; want %d and %d", n, dropped, blockedBurst, 2*blockedBurst)
	}
	s.emit(Event{Type: EventRequestBlocked, URL: "http://127.0.0.1:9/y", Data: map[string]any{}})
	s.evMu.Lock()
	last := s.evQueue[len(s.evQueue)-1]
	s.evMu.Unlock()
	if last.Data["suppressed"] != 2*blockedBurst {
		t.Fatalf("the next event after the window: %+v, want suppressed %d", last, 2*blockedBurst)
	}
}

// Over plain HTTP the egress proxy adds the connect-src policy and the browser re-serves nothing
// (no body read, no fulfil: the round trips navigate no longer pays); the policy is in force all
// the same. A response without it (over TLS, where the proxy sees only a tunnel) is re-served by
// the browser as before.
func TestPlainHTTPDocumentsCarryTheProxysCSP(t *testing.T) {
	t.Parallel()
	const csp = "connect-src blob: data: http://127.0.0.1:1 ws://127.0.0.1:1"
	hdr := func(kv ...string) []*fetch.HeaderEntry {
		var hs []*fetch.HeaderEntry
		for i := 0; i+1 < len(kv); i += 2 {
			hs = append(hs, &fetch.HeaderEntry{Name: kv[i], Value: kv[i+1]})
		}
		return hs
	}
	page, worker := &targetConn{typ: "page"}, &targetConn{typ: "worker"}
	for _, tt := range []struct {
		name string
		tc   *targetConn
		hs   []*fetch.HeaderEntry
		want bool
	}{
		{"plain-HTTP document with the proxy's policy", page, hdr("Content-Type", "text/html", "content-security-policy", csp), false},
		{"plain-HTTP document with the site's policy and the proxy's", page, hdr("Content-Type", "text/html", "Content-Security-Policy", "script-src 'self'", "Content-Security-Policy", csp), false},
		{"plain-HTTP worker script with the proxy's policy", worker, hdr("Content-Type", "text/javascript", "Content-Security-Policy", csp), false},
		{"TLS document", page, hdr("Content-Type", "text/html"), true},
		{"TLS document with a policy of the site's own only", page, hdr("Content-Type", "text/html", "Content-Security-Policy", "script-src 'self'"), true},
		{"TLS document whose policy only resembles ours", page, hdr("Content-Type", "text/html", "Content-Security-Policy", csp+" http://evil.test"), true},
		{"TLS worker script", worker, hdr("Content-Type", "application/javascript"), true},
		{"TLS image in a worker", worker, hdr("Content-Type", "image/png"), false},
	} {
		ev := &fetch.EventRequestPaused{ResourceType: network.ResourceTypeDocument, ResponseStatusCode: 200, ResponseHeaders: tt.hs}
		if tt.tc.typ == "worker" {
			ev.ResourceType = network.ResourceTypeScript
		}
		if got := browserAddsCSP(tt.tc, ev, csp); got != tt.want {
			t.Errorf("%s: the browser re-serves it: %v, want %v", tt.name, got, tt.want)
		}
	}

	l := newListener(t)
	b := setup(t)
	if _, err := b.s.Navigate(tctx(t), NavigateRequest{URL: hostilePage("channels.html", l.URL, nil) + "#websocket", WaitUntil: WaitLoad}); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Listener.Addr().String())
	b.ev.wait(t, func(e Event) bool {
		return e.Type == EventRequestBlocked && e.Data["layer"] == "csp" && strings.Contains(e.URL, "127.0.0.1:"+port)
	})
	if n := b.s.reserved.Load(); n != 0 {
		t.Errorf("the browser re-served %d plain-HTTP responses with the CSP, want 0 (the proxy adds it)", n)
	}
	if n := l.conns.Load(); n != 0 {
		t.Errorf("the disallowed origin accepted %d connections", n)
	}
}

// A proxy report of a redirect, once recorded, stands for the browser's refusal of the same hop
// however late the browser reaches it (a loaded machine past redirectReportDelay): one hop, one
// event. It stands for that hop once, and only for the URL (or tunnel authority) it named.
func TestLateBrowserRefusalOfAReportedRedirectIsNotRecordedTwice(t *testing.T) {
	cases := []struct {
		name     string
		reported string // what the proxy's recorded report named
		refused  []string
		want     []bool
	}{
		{"the same hop", "http://127.0.0.1:9/pixel.png?x=1", []string{"http://127.0.0.1:9/PIXEL.png", "http://127.0.0.1:9/pixel.png"}, []bool{true, false}},
		{"a tunnel's authority", "127.0.0.1:443", []string{"https://127.0.0.1/a"}, []bool{true}},
		{"another URL", "http://127.0.0.1:9/a", []string{"http://127.0.0.1:9/b"}, []bool{false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Session{}
			s.mu.Lock()
			s.noteReportedLocked(redirectKey(c.reported))
			s.mu.Unlock()
			for i, u := range c.refused {
				if got := s.redirectReported(u); got != c.want[i] {
					t.Errorf("refusal %d of %s: reported %v, want %v", i+1, u, got, c.want[i])
				}
			}
		})
	}
	s := &Session{}
	s.mu.Lock()
	s.reported = map[string]time.Time{"http://127.0.0.1:9/old": time.Now().Add(-2 * reportedRedirectTTL)}
	s.mu.Unlock()
	if s.redirectReported("http://127.0.0.1:9/old") {
		t.Error("a report older than reportedRedirectTTL stood for a refusal")
	}
}
