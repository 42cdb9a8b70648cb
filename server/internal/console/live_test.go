package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
)

// The live view's upgrade is refused, before any WebSocket exists, to another site (Origin or
// Sec-Fetch-Site), to a cookie without its CSRF token, to a caller without bap:browser.observe
// and to a foreign subprotocol; the console's own origin with the session's token gets through
// the checks (to the missing Service here: 503 browser_unavailable, proving no check refused it).
func TestLiveViewUpgradeRefusesOtherSites(t *testing.T) {
	s := NewSessions(nil)
	tok, _ := s.NewLink(app.Actor{Tenant: "local", Subject: api.LocalOperator})
	cookie, sess, _ := s.Redeem(tok)
	srv := httptest.NewServer(New(Options{Profile: ProfileLocal, Auth: Wrap(s, operatorOnSocket{})}))
	defer srv.Close()
	self := srv.URL
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + "/console/api/sessions/bs_x/live"
	csrf := liveCSRFPrefix + sess.CSRF
	for _, tt := range []struct {
		name      string
		origin    string
		fetchSite string
		cookie    string
		protocols []string
		status    int
	}{
		{"the console itself", self, "same-origin", cookie, []string{LiveProtocol, csrf}, http.StatusServiceUnavailable},
		{"another site's page", "http://evil.example", "cross-site", cookie, []string{LiveProtocol, csrf}, http.StatusUnauthorized},
		{"another origin, no fetch metadata", "http://evil.example", "", cookie, []string{LiveProtocol, csrf}, http.StatusUnauthorized},
		{"a sibling port of the same host", "http://127.0.0.1:1", "same-site", cookie, []string{LiveProtocol, csrf}, http.StatusUnauthorized},
		{"the cookie without its CSRF token", self, "same-origin", cookie, []string{LiveProtocol}, http.StatusUnauthorized},
		{"a wrong CSRF token", self, "same-origin", cookie, []string{LiveProtocol, csrf + "x"}, http.StatusUnauthorized},
		{"no cookie: the agent, without bap:browser.observe here", self, "same-origin", "", []string{LiveProtocol}, http.StatusForbidden},
		{"a foreign subprotocol", self, "same-origin", cookie, []string{LiveProtocol, csrf, "chat"}, http.StatusBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("Origin", tt.origin)
			if tt.fetchSite != "" {
				h.Set("Sec-Fetch-Site", tt.fetchSite)
			}
			if tt.cookie != "" {
				h.Set("Cookie", CookieName+"="+tt.cookie)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: h, Subprotocols: tt.protocols})
			if err == nil {
				_ = c.CloseNow()
				t.Fatal("the upgrade was accepted")
			}
			if resp == nil || resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("got %v (%v), want HTTP %d", resp, err, tt.status)
			}
		})
	}
}

// FuzzLiveRequest: whatever a page puts in Sec-WebSocket-Protocol, liveRequest refuses any entry
// other than bap.live.v1 and the credential subprotocols, accepts only when bap.live.v1 itself is
// an entry (not a substring of another), sets the credential headers only from their prefixed
// entries, leaves the caller's request unchanged, and never panics.
func FuzzLiveRequest(f *testing.F) {
	for _, seed := range []string{"bap.live.v1", "bap.live.v1, bap.csrf.abc", "bap.live.v1,bap.bearer.eyJ.x.y", "chat", "", ",,",
		"bap.csrf.", " bap.live.v1 ,\tbap.csrf.x", "bap.csrf.bap.live.v1", "bap.live.v1x", "bap.live.v1, chat",
		"bap.live.v1, bap.csrf.a, bap.csrf.b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, protos string) {
		r := httptest.NewRequest("GET", "http://127.0.0.1:7777/console/api/sessions/bs_x/live", nil)
		r.Header.Set("Sec-WebSocket-Protocol", protos)
		// The oracle: the entries as the WebSocket handshake lists them.
		entries := map[string]bool{}
		wantLive, other := false, false
		for p := range strings.SplitSeq(protos, ",") {
			p = strings.TrimSpace(p)
			entries[p] = true
			switch {
			case p == LiveProtocol:
				wantLive = true
			case !strings.HasPrefix(p, liveCSRFPrefix) && !strings.HasPrefix(p, liveBearerPrefix):
				other = true
			}
		}
		r2, ok := liveRequest(r)
		if r.Header.Get(CSRFHeader) != "" || r.Header.Get("Authorization") != "" {
			t.Fatal("liveRequest changed the caller's request")
		}
		if other {
			if r2 != nil || ok {
				t.Fatalf("%q has a foreign subprotocol, yet liveRequest answered ok=%v", protos, ok)
			}
			return
		}
		if r2 == nil || ok != wantLive {
			t.Fatalf("for %q: request %v, ok %v; want a request and ok %v", protos, r2 != nil, ok, wantLive)
		}
		if v := r2.Header.Get(CSRFHeader); v != "" && !entries[liveCSRFPrefix+v] {
			t.Fatalf("a CSRF token %q not from a bap.csrf. entry of %q", v, protos)
		}
		if v := r2.Header.Get("Authorization"); v != "" && !entries[liveBearerPrefix+strings.TrimPrefix(v, "Bearer ")] {
			t.Fatalf("a bearer %q not from a bap.bearer. entry of %q", v, protos)
		}
	})
}
