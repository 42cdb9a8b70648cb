package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/policy"
)

// site is an upstream HTTP server on loopback that counts the connections it accepted.
type site struct {
	*httptest.Server
	conns atomic.Int64
	hits  atomic.Int64 // requests served
	port  string
}

func newSite(t testing.TB) *site {
	t.Helper()
	s := &site{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		fmt.Fprintf(w, "host=%s path=%s", r.Host, r.URL.Path)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	_, s.port, _ = net.SplitHostPort(s.Listener.Addr().String())
	return s
}

// names is a resolver for made-up names (the proxy's DNS stand-in): each maps to fixed addresses.
type names map[string][]netip.Addr

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type recorder struct {
	mu  sync.Mutex
	got []Blocked
}

func (r *recorder) add(b Blocked) { r.mu.Lock(); r.got = append(r.got, b); r.mu.Unlock() }

func (r *recorder) all() []Blocked {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Blocked(nil), r.got...)
}

func startProxy(t *testing.T, allowed []string, res Resolver) (*Proxy, *recorder) {
	t.Helper()
	var pol *policy.Policy
	if allowed != nil {
		var err error
		if pol, err = policy.ParsePolicy(allowed, nil); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{}
	p, err := Listen(Config{Policy: func() *policy.Policy { return pol }, OnBlocked: rec.add, Resolver: res, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, rec
}

func client(p *Proxy) *http.Client {
	pu, _ := url.Parse(p.URL())
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}}
}

// Plain HTTP through the proxy: an allowed origin is forwarded, with the Host it was checked for;
// everything else is refused before a connection to the site exists, and reported.
func TestProxyHTTP(t *testing.T) {
	t.Parallel()
	allowedSite, otherSite := newSite(t), newSite(t)
	res := names{
		"shop.test":          {netip.MustParseAddr("127.0.0.1")},
		"a.wild.test":        {netip.MustParseAddr("127.0.0.1")},
		"metadata.evil.test": {netip.MustParseAddr("169.254.169.254")},
	}
	p, rec := startProxy(t, []string{
		"http://127.0.0.1:" + allowedSite.port, "http://shop.test:" + allowedSite.port, "http://*.wild.test:*",
	}, res)
	c := client(p)
	for _, tt := range []struct {
		name, url string
		status    int
		reason    Reason
	}{
		{"allowed IP literal", "http://127.0.0.1:" + allowedSite.port + "/a?q=secret", 200, ""},
		{"allowed name resolving to loopback, named explicitly", "http://shop.test:" + allowedSite.port + "/b", 200, ""},
		{"another port of the same host", "http://127.0.0.1:" + otherSite.port + "/c?q=secret", 403, ReasonOriginNotAllowed},
		{"a wildcard never reaches a private address", "http://a.wild.test:" + otherSite.port + "/d", 403, ReasonPrivateNetwork},
		{"unknown name", "http://nowhere.test:" + otherSite.port + "/", 403, ReasonOriginNotAllowed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Get(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tt.status)
			}
			u, _ := url.Parse(tt.url)
			if tt.status == 200 && !strings.Contains(string(body), "host="+u.Host) {
				t.Errorf("the site saw %q, want host %s", body, u.Host)
			}
			if tt.reason != "" {
				found := false
				for _, b := range rec.all() {
					if b.Reason == tt.reason && strings.HasPrefix(b.URL, "http://"+u.Host) && !strings.Contains(b.URL, "secret") {
						found = true
					}
				}
				if !found {
					t.Errorf("no %s refusal of %s reported without its query: %+v", tt.reason, u.Host, rec.all())
				}
			}
		})
	}
	if n := otherSite.conns.Load(); n != 0 {
		t.Errorf("the disallowed site accepted %d connections", n)
	}
}

// A CONNECT tunnels bytes to an allowed authority (a TLS site or a WebSocket) and is refused for
// any other, and for a private address behind a wildcard.
func TestProxyConnect(t *testing.T) {
	t.Parallel()
	allowedSite, otherSite := newSite(t), newSite(t)
	res := names{"a.wild.test": {netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("127.0.0.1")}}
	p, rec := startProxy(t, []string{"http://127.0.0.1:" + allowedSite.port, "https://*.wild.test:*"}, res)

	tunnel := func(authority string) (int, *bufio.Reader, net.Conn) {
		t.Helper()
		conn, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, br, conn
	}
	status, br, conn := tunnel("127.0.0.1:" + allowedSite.port)
	if status != 200 {
		t.Fatalf("CONNECT to the allowed site: %d", status)
	}
	fmt.Fprintf(conn, "GET /through HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "path=/through") {
		t.Fatalf("through the tunnel: %q", body)
	}
	for _, tt := range []struct {
		authority string
		status    int
		reason    Reason
	}{
		{"127.0.0.1:" + otherSite.port, 403, ReasonOriginNotAllowed},
		{"a.wild.test:" + otherSite.port, 403, ReasonPrivateNetwork},
		{"127.0.0.1:0", 400, ReasonUnclassifiable},
		{"127.0.0.1:080", 400, ReasonUnclassifiable},
		{"bad_host!:443", 400, ReasonUnclassifiable},
		{"[fe80::1%25eth0]:443", 400, ReasonUnclassifiable},
	} {
		if status, _, _ := tunnel(tt.authority); status != tt.status {
			t.Errorf("CONNECT %s: %d, want %d", tt.authority, status, tt.status)
		}
	}
	reasons := map[Reason]int{}
	for _, b := range rec.all() {
		reasons[b.Reason]++
		if b.ResourceType != "tunnel" {
			t.Errorf("a refused CONNECT reported as %q, want tunnel", b.ResourceType)
		}
	}
	if reasons[ReasonOriginNotAllowed] != 1 || reasons[ReasonPrivateNetwork] != 1 || reasons[ReasonUnclassifiable] != 4 {
		t.Errorf("refusals %v", reasons)
	}
	if n := otherSite.conns.Load(); n != 0 {
		t.Errorf("the disallowed site accepted %d connections", n)
	}
}

// Anything the proxy cannot classify is refused: origin-form requests (a client talking to it as
// a site), https in absolute form, no policy yet (a warm context).
func TestProxyFailsClosed(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	p, _ := startProxy(t, []string{"http://127.0.0.1:" + s.port}, nil)
	resp, err := http.Get(p.URL() + "/direct")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("origin-form request: %d, want 400", resp.StatusCode)
	}
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET https://127.0.0.1:%s/ HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n", s.port, s.port)
	r, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode != 400 {
		t.Errorf("https in absolute form: %d, want 400", r.StatusCode)
	}

	none, rec := startProxy(t, nil, nil)
	resp, err = client(none).Get(s.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 403 || len(rec.all()) != 1 {
		t.Errorf("without a policy: %d, %d refusals", resp.StatusCode, len(rec.all()))
	}
	if n := s.conns.Load(); n != 0 {
		t.Errorf("the site accepted %d connections", n)
	}
}

// Close ends open tunnels (a WebSocket kept open by a page must not outlive its session).
func TestProxyCloseEndsTunnels(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	p, _ := startProxy(t, []string{"http://127.0.0.1:" + s.port}, nil)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", s.port)
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the tunnel is still open after Close")
	} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the tunnel is still open after Close (read timed out)")
	}
}

// The server's own listeners are never reached, whatever the policy names: a page must not talk
// to BAP's API (SSRF), on the listener's address or any other loopback address of its port.
func TestProxyNeverReachesTheServerItself(t *testing.T) {
	t.Parallel()
	api := newSite(t) // stands for bap serve's TCP listener
	port, _ := strconv.Atoi(api.port)
	pol, err := policy.ParsePolicy([]string{"http://127.0.0.1:*", "http://localhost:*"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	p, err := Listen(Config{Policy: func() *policy.Policy { return pol }, OnBlocked: rec.add,
		Resolver:  names{"localhost": {netip.MustParseAddr("127.0.0.1")}},
		Forbidden: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	for _, u := range []string{"http://127.0.0.1:" + api.port + "/bap/v1/tasks", "http://localhost:" + api.port + "/"} {
		resp, err := client(p).Get(u)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("%s: %d, want 403", u, resp.StatusCode)
		}
	}
	if n := api.conns.Load(); n != 0 {
		t.Errorf("the server's own listener accepted %d connections", n)
	}
	if got := len(rec.all()); got != 2 {
		t.Errorf("%d refusals reported, want 2", got)
	}
}

// A redirect to a URL the policy does not allow is reported with its target (without the query),
// and relayed as it is: the proxy never follows it, and the browser's hop, if it tries one, is
// refused where it meets a layer. A redirect within the policy is not reported.
func TestProxyReportsRedirectsItMustNotFollow(t *testing.T) {
	t.Parallel()
	otherSite := newSite(t)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", r.URL.Query().Get("to"))
		w.WriteHeader(http.StatusFound)
	}))
	t.Cleanup(redirector.Close)
	p, rec := startProxy(t, []string{redirector.URL}, nil)
	c := client(p)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	other := "http://127.0.0.1:" + otherSite.port
	for _, tt := range []struct {
		name, to string
		report   string // the reported target, "" for none
	}{
		{"to a disallowed origin", other + "/landing?token=secret", other + "/landing"},
		{"protocol-relative to a disallowed origin", "//127.0.0.1:" + otherSite.port + "/rel?token=secret", other + "/rel"},
		{"to a WebSocket of the same origin", "ws" + strings.TrimPrefix(redirector.URL, "http") + "/ws", ""},
		{"within the policy", "/next?token=secret", ""},
		{"not a URL a browser follows", "javascript:alert(1)", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := len(rec.all())
			resp, err := c.Get(redirector.URL + "/go?to=" + url.QueryEscape(tt.to))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != tt.to {
				t.Fatalf("relayed %d Location %q, want the site's 302 to %q", resp.StatusCode, resp.Header.Get("Location"), tt.to)
			}
			got := rec.all()[before:]
			switch {
			case tt.report == "" && len(got) != 0:
				t.Errorf("reported %+v for a redirect the policy allows", got)
			case tt.report != "" && (len(got) != 1 || got[0].URL != tt.report || got[0].Reason != ReasonRedirectNotAllowed):
				t.Errorf("reported %+v, want one %s naming %s", got, ReasonRedirectNotAllowed, tt.report)
			}
		})
	}
	if n := otherSite.conns.Load(); n != 0 {
		t.Errorf("the redirect's target accepted %d connections", n)
	}
}

// The document CSP (Config.DocumentCSP) is added exactly once to a plain-HTTP response that can
// become a document or a worker's global scope, beside the site's own policy and at every status
// (a 304 carries it into the cached response); never to subresources, fetches or WebSocket
// upgrades; and a CONNECT tunnel (TLS) carries the site's bytes untouched.
func TestProxyAddsTheDocumentCSP(t *testing.T) {
	t.Parallel()
	const csp = "connect-src blob: data: http://127.0.0.1:1"
	siteSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if own := r.URL.Query().Get("own"); own != "" {
			w.Header().Set("Content-Security-Policy", own)
		}
		w.Header().Set("Content-Type", r.URL.Query().Get("ct"))
		if r.URL.Query().Get("status") == "304" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, "<p>page")
	}))
	t.Cleanup(siteSrv.Close)
	pol, err := policy.ParsePolicy([]string{siteSrv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Value
	current.Store(csp)
	p, err := Listen(Config{Policy: func() *policy.Policy { return pol }, DocumentCSP: func() string { return current.Load().(string) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := client(p)
	for _, tt := range []struct {
		name, dest, query string
		upgrade           bool
		want              []string // the response's Content-Security-Policy headers, in order
	}{
		{"document", "document", "ct=text/html", false, []string{csp}},
		{"sniffed document", "document", "ct=unknown/unknown", false, []string{csp}},
		{"iframe", "iframe", "ct=text/html", false, []string{csp}},
		{"object", "object", "ct=text/html", false, []string{csp}},
		{"dedicated worker served as text/plain", "worker", "ct=text/plain", false, []string{csp}},
		{"shared worker", "sharedworker", "ct=text/javascript", false, []string{csp}},
		{"service worker", "serviceworker", "ct=text/javascript", false, []string{csp}},
		{"a worker's imported script", "script", "ct=text/javascript", false, []string{csp}},
		{"no Sec-Fetch-Dest (an origin that is not potentially trustworthy)", "", "ct=text/html", false, []string{csp}},
		{"a destination this proxy does not know", "fencedframe", "ct=text/html", false, []string{csp}},
		{"the site's own policy stays first", "document", "ct=text/html&own=" + url.QueryEscape("script-src 'self'"), false, []string{"script-src 'self'", csp}},
		{"a 304 revalidating a cached document", "document", "status=304", false, []string{csp}},
		{"image", "image", "ct=image/png", false, nil},
		{"style sheet", "style", "ct=text/css", false, nil},
		{"fetch", "empty", "ct=text/html", false, nil},
		{"WebSocket upgrade", "websocket", "ct=text/html", true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, siteSrv.URL+"/p?"+tt.query, nil)
			if tt.dest != "" {
				req.Header.Set("Sec-Fetch-Dest", tt.dest)
			}
			if tt.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			got := resp.Header.Values("Content-Security-Policy")
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("Content-Security-Policy %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("none while the session has none", func(t *testing.T) {
		current.Store("")
		defer current.Store(csp)
		req, _ := http.NewRequest(http.MethodGet, siteSrv.URL+"/p?ct=text/html", nil)
		req.Header.Set("Sec-Fetch-Dest", "document")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if got := resp.Header.Values("Content-Security-Policy"); len(got) != 0 {
			t.Errorf("Content-Security-Policy %q, want none", got)
		}
	})
	t.Run("a tunnel carries the site's bytes untouched", func(t *testing.T) {
		conn, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		host := strings.TrimPrefix(siteSrv.URL, "http://")
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		fmt.Fprintf(conn, "GET /p?ct=text/html HTTP/1.1\r\nHost: %s\r\nSec-Fetch-Dest: document\r\nConnection: close\r\n\r\n", host)
		inner, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = inner.Body.Close()
		if got := inner.Header.Values("Content-Security-Policy"); len(got) != 0 {
			t.Errorf("the tunnelled response carries %q: the proxy changed bytes inside a tunnel", got)
		}
	})
}

// rebinding is a resolver whose name answers a public address once and the site's loopback
// address ever after, counting its lookups: a DNS rebinding attack on the proxy's check.
type rebinding struct {
	mu      sync.Mutex
	lookups int
	first   netip.Addr
	then    netip.Addr
}

func (r *rebinding) LookupNetIP(_ context.Context, _, _ string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookups++
	if r.lookups == 1 {
		return []netip.Addr{r.first}, nil
	}
	return []netip.Addr{r.then}, nil
}

func (r *rebinding) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups
}

// A name is resolved once per connection and the connection goes to the address that was
// checked: a name that answers a public address to the check and loopback to a second lookup
// never reaches the loopback site, and once it answers loopback the check refuses it (a wildcard
// never matches a private address). Issue #24 item 2.
func TestProxyDefeatsDNSRebinding(t *testing.T) {
	t.Parallel()
	site := newSite(t)
	res := &rebinding{first: netip.MustParseAddr("198.51.100.7"), then: netip.MustParseAddr("127.0.0.1")}
	p, rec := startProxy(t, []string{"http://*.rebind.test:*"}, res)
	c := client(p)
	get := func() int {
		t.Helper()
		resp, err := c.Get("http://a.rebind.test:" + site.port + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// The check sees the public address, and the proxy connects to it (unreachable here): one
	// lookup, and nothing reaches the site that a second lookup would have named.
	if st := get(); st == http.StatusOK || res.count() != 1 || site.conns.Load() != 0 {
		t.Fatalf("first request: status %d, %d lookups, %d connections to the loopback site; want a failure, 1, 0",
			st, res.count(), site.conns.Load())
	}
	// Rebound to loopback: refused by the check, before any connection.
	if st := get(); st != http.StatusForbidden || res.count() != 2 || site.conns.Load() != 0 {
		t.Fatalf("rebound request: status %d, %d lookups, %d connections; want 403, 2, 0", st, res.count(), site.conns.Load())
	}
	var private bool
	for _, b := range rec.all() {
		private = private || b.Reason == ReasonPrivateNetwork
	}
	if !private {
		t.Fatalf("no private_network refusal reported: %+v", rec.all())
	}
}
