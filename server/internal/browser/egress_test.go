package browser

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
	cases := []struct {
		name string
		page func(target string) string
		// blocked is how many request.blocked events name the target: each try, once. A
		// preconnect sends no request (nothing to report). A fetch's redirect is refused by the CSP
		// before any request exists, and the browser names only the URL before it: the event
		// naming the target is the proxy's, which saw the redirect.
		blocked int
	}{
		{"websocket", page("websocket"), 1},
		{"eventsource", page("eventsource"), 1},
		{"beacon", page("beacon"), 1},
		{"fetch", page("fetch"), 1},
		{"image", page("image"), 1},
		{"redirect of a fetch", page("redirect-fetch"), 1},
		{"redirect of an image", page("redirect-image"), 1},
		{"redirect of a navigation", page("redirect-navigation"), 1},
		{"preconnect", page("preconnect"), 0},
		// Its script carries no CSP: its WebSocket meets the proxy, its fetch and EventSource
		// interception.
		{"dedicated worker served as text/plain", page("worker"), 3},
		{"service worker", page("serviceworker"), 2},
		{"document served as unknown/unknown", sniffed(url.Values{"ct": {"unknown/unknown"}}), 2},
		{"document served as application/unknown", sniffed(url.Values{"ct": {"application/unknown"}}), 2},
		{"Content-Disposition attachment=1", sniffed(url.Values{"cd": {"attachment=1"}}), 2},
		// Its body outlasts the wait for it, so it renders without the CSP.
		{"document whose body outlasts the CSP", sniffed(url.Values{"slow": {"3000"}}), 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := newListener(t)
			b := setup(t)
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
				if strings.Contains(e.URL, "?") {
					t.Errorf("the event shows the query: %s", e.URL)
				}
				if _, ok := e.Data["layer"].(string); !ok {
					t.Errorf("the event names no layer: %+v", e)
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
