package egress

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/policy"
)

// rawSite is an upstream that answers every request with whatever bytes it is given, then closes:
// a hostile or broken site, below the level of a well-formed HTTP server.
type rawSite struct {
	ln    net.Listener
	reply atomic.Pointer[[]byte]
}

func newRawSite(t testing.TB) *rawSite {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawSite{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				if b := s.reply.Load(); b != nil {
					_, _ = c.Write(*b)
				}
			}()
		}
	}()
	return s
}

// finalOnly records the final response only, as net/http's server sends it: an interim (1xx)
// response other than 101 goes out before it and is not the answer (httptest's recorder would
// keep it as the status).
type finalOnly struct{ *httptest.ResponseRecorder }

func (w finalOnly) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		return
	}
	w.ResponseRecorder.WriteHeader(code)
}

// fuzzCSP is the session policy the fuzzed proxy adds: a value no site sends by chance.
const fuzzCSP = "connect-src 'self' fuzz-csp.invalid"

// relayThrough sends one GET for a document (or, when doc is false, an image) through a fresh
// proxy to site, which answers with raw. It returns what the browser would get, the refusals
// reported, and whether the proxy gave up on the upstream (its error handler ran).
func relayThrough(t testing.TB, site *rawSite, allowed string, raw []byte, doc bool) (*httptest.ResponseRecorder, []Blocked, bool) {
	t.Helper()
	site.reply.Store(&raw)
	pol, err := policy.ParsePolicy([]string{"http://" + allowed, "http://allowed.test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var blocked []Blocked
	p, err := newProxy(Config{Policy: func() *policy.Policy { return pol }, DocumentCSP: func() string { return fuzzCSP },
		OnBlocked: func(b Blocked) { blocked = append(blocked, b) }, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.transport.CloseIdleConnections()
	gaveUp := false
	eh := p.rp.ErrorHandler
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) { gaveUp = true; eh(w, r, err) }
	req := httptest.NewRequest(http.MethodGet, "http://"+allowed+"/page", nil)
	req.Host = allowed
	if doc {
		req.Header.Set("Sec-Fetch-Dest", "document")
	} else {
		req.Header.Set("Sec-Fetch-Dest", "image")
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(finalOnly{rec}, req)
	return rec, blocked, gaveUp
}

// FuzzProxyResponse feeds the proxy arbitrary upstream responses (what a hostile or broken site
// can answer). Properties: it never panics; the browser gets either a well-formed relayed response
// (a document's carrying the session's CSP exactly once, beside any of the site's, anything else's
// not at all) or a bare 502 carrying no byte of the site's; a redirect is reported only when its
// Location leads outside the policy, and only for a relayed redirect.
func FuzzProxyResponse(f *testing.F) {
	site := newRawSite(f)
	allowed := site.ln.Addr().String()
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent-Security-Policy: default-src 'self'\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 302 Found\r\nLocation: http://evil.test/x?q=1\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 302 Found\r\nLocation: /same-origin\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 301 Moved\r\nLocation: http://allowed.test/\r\n\r\n",
		"HTTP/1.1 307 Temporary\r\nLocation: ://bad\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 abc OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/html",
		"SSH-2.0-OpenSSH_9.6\r\n",
		"",
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, doc bool) {
		rec, blocked, gaveUp := relayThrough(t, site, allowed, raw, doc)
		ours := 0
		for _, v := range rec.Header().Values("Content-Security-Policy") {
			if v == fuzzCSP {
				ours++
			}
		}
		if gaveUp {
			// Not relayed: a bare 502, nothing of the site's in it.
			if rec.Code != http.StatusBadGateway || rec.Body.Len() != 0 || len(rec.Header()) != 0 {
				t.Fatalf("the proxy gave up on %q yet answered %d %v %q", raw, rec.Code, rec.Header(), rec.Body.Bytes())
			}
			for _, b := range blocked {
				if b.Reason != ReasonRedirectNotAllowed {
					t.Fatalf("a failed upstream reported %+v", b)
				}
			}
			return
		}
		// Relayed: what the site said, as Go's own client reads it; interim (1xx) responses go to
		// the browser as interim ones, the final one is what it gets.
		br := bufio.NewReader(bytes.NewReader(raw))
		want, err := http.ReadResponse(br, nil)
		for err == nil && want.StatusCode >= 100 && want.StatusCode < 200 && want.StatusCode != http.StatusSwitchingProtocols {
			want, err = http.ReadResponse(br, nil)
		}
		if err != nil {
			t.Fatalf("relayed %d for a response Go cannot read (%v): %q", rec.Code, err, raw)
		}
		if rec.Code != want.StatusCode {
			t.Fatalf("relayed %d for the site's %d: %q", rec.Code, want.StatusCode, raw)
		}
		siteOwn := 0
		for _, v := range want.Header.Values("Content-Security-Policy") {
			if v == fuzzCSP {
				siteOwn++
			}
		}
		if wantOurs := siteOwn + map[bool]int{true: 1, false: 0}[doc]; ours != wantOurs {
			t.Fatalf("the session's CSP relayed %d times, want %d (document %v): %q", ours, wantOurs, doc, raw)
		}
		for _, b := range blocked {
			if b.Reason != ReasonRedirectNotAllowed || rec.Code < 300 || rec.Code > 399 {
				t.Fatalf("reported %+v for a relayed %d", b, rec.Code)
			}
			base, _ := want.Location()
			if base == nil {
				t.Fatalf("reported %+v without a Location", b)
			}
			if tgt, _ := http.NewRequest(http.MethodGet, "http://"+allowed+"/page", nil); tgt != nil {
				u, err := tgt.URL.Parse(want.Header.Get("Location"))
				if err == nil && policyAllows(t, allowed, u.String()) {
					t.Fatalf("reported a redirect to %s, which the policy allows", u)
				}
			}
		}
		if len(blocked) > 1 {
			t.Fatalf("reported %d refusals for one response", len(blocked))
		}
	})
}

func policyAllows(t *testing.T, allowed, raw string) bool {
	t.Helper()
	pol, err := policy.ParsePolicy([]string{"http://" + allowed, "http://allowed.test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := http.NewRequest(http.MethodGet, raw, nil)
	return err == nil && pol.AllowsURL(u.URL)
}

// An unreadable or unclassifiable upstream response is refused: the browser gets a bare 502 and
// no byte of what the site sent, and nothing is reported as relayed.
func TestProxyRefusesUnreadableResponses(t *testing.T) {
	t.Parallel()
	site := newRawSite(t)
	allowed := site.ln.Addr().String()
	for _, raw := range []string{
		"SSH-2.0-OpenSSH_9.6\r\nsecret-banner\r\n\r\n",
		"HTTP/1.1 abc OK\r\nX-Site: secret\r\n\r\nsecret",
		"HTTP/1.1 200 OK\r\nX-Site: secret\r\nBad Header\r\n\r\nsecret",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nsecret",
		"HTTP/1.1 200 OK\r\nX-Site: secret",             // the head never ends
		"HTTP/1.1 000 \r\nX-Site: secret\r\n\r\nsecret", // no such status (found by FuzzProxyResponse)
		"",
	} {
		for _, doc := range []bool{true, false} {
			rec, _, gaveUp := relayThrough(t, site, allowed, []byte(raw), doc)
			if !gaveUp || rec.Code != http.StatusBadGateway || rec.Body.Len() != 0 || rec.Header().Get("X-Site") != "" {
				t.Errorf("%q (document %v): gave up %v, %d %v %q; want a bare 502", raw, doc, gaveUp, rec.Code, rec.Header(), rec.Body.Bytes())
			}
		}
	}
}
