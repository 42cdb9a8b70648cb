package egress

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/policy"
)

// FuzzProxyRequest feeds the proxy arbitrary requests (what a hostile page, or anything else on
// loopback, could send it). Properties: it never panics; every answer but a forwarded one is a
// reported refusal; and only the allowed site is ever reached, with the Host it was checked for.
func FuzzProxyRequest(f *testing.F) {
	site := newSite(f)
	allowed := "127.0.0.1:" + site.port
	for _, seed := range []string{
		"GET http://" + allowed + "/ok HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n",
		"GET http://127.0.0.1:1/no HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n",
		"GET /origin-form HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n",
		"CONNECT " + allowed + " HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n",
		"CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n",
		"GET https://" + allowed + "/ HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n",
		"GET http://user:pw@" + allowed + "/ HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n",
		"GET http://" + allowed + "/ HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"GET http://a.rebind.test:" + site.port + "/ HTTP/1.1\r\nHost: a.rebind.test:" + site.port + "\r\n\r\n",
		"POST http://" + allowed + "/p HTTP/1.1\r\nHost: " + allowed + "\r\nContent-Length: 3\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nabc",
	} {
		f.Add([]byte(seed))
	}
	res := names{"a.rebind.test": {netip.MustParseAddr("127.0.0.1")}}
	// The site's origin, and a wildcard whose names resolve to loopback: a private address the
	// wildcard must never reach.
	pol, err := policy.ParsePolicy([]string{"http://" + allowed, "http://*.rebind.test:*"}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		var refusals int
		p, err := newProxy(Config{Policy: func() *policy.Policy { return pol }, DocumentCSP: func() string { return "connect-src blob: data:" }, OnBlocked: func(Blocked) { refusals++ }, Resolver: res, DialTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer p.transport.CloseIdleConnections()
		before := site.hits.Load()
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		reached := site.hits.Load() > before
		if reached && req.Method != http.MethodConnect && !strings.EqualFold(req.Host, allowed) {
			t.Fatalf("the site was reached for host %q", req.Host)
		}
		if rec.Code == http.StatusForbidden || rec.Code == http.StatusBadRequest {
			if refusals == 0 {
				t.Fatalf("%d without a reported refusal", rec.Code)
			}
			if reached {
				t.Fatalf("refused (%d) yet the site was reached", rec.Code)
			}
		}
	})
}
