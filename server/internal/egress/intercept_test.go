package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/tlsmint"
	"github.com/originweave/bap/server/internal/waitfor"
)

// urlRecorder is a Recorder that keeps the URLs of the exchanges and the tunnels it was told of.
type urlRecorder struct {
	mu       sync.Mutex
	urls     []string
	tunnels  []string
	statuses []int
}

func (r *urlRecorder) Exchange(req *http.Request) func(*http.Response) {
	r.mu.Lock()
	r.urls = append(r.urls, req.Method+" "+req.URL.String())
	r.mu.Unlock()
	return func(resp *http.Response) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if resp != nil {
			r.statuses = append(r.statuses, resp.StatusCode)
		}
	}
}

func (r *urlRecorder) Tunnel(hostport string) {
	r.mu.Lock()
	r.tunnels = append(r.tunnels, hostport)
	r.mu.Unlock()
}

func (r *urlRecorder) Close() error { return nil }

// tlsSite is an HTTPS site on 127.0.0.1 with a certificate of its own (httptest's), counting
// connections and requests.
func tlsSite(t *testing.T) (*site, *x509.CertPool) {
	t.Helper()
	s := &site{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "host=%s path=%s method=%s body=%s", r.Host, r.URL.Path, r.Method, body)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	_, s.port, _ = net.SplitHostPort(s.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(s.Certificate())
	return s, roots
}

// newAuthority is an authority and a pool that trusts it (the browser's trust, by key).
func newAuthority(t *testing.T) (*tlsmint.Authority, *x509.CertPool) {
	t.Helper()
	a, err := tlsmint.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(a.Root())
	return a, pool
}

// interceptingProxy is a proxy for allowed origins that can open tunnels with a, and trusts
// upstream what upstream holds.
func interceptingProxy(t *testing.T, allowed []string, a *tlsmint.Authority, upstream *x509.CertPool) (*Proxy, *recorder) {
	t.Helper()
	pol, err := policy.ParsePolicy(allowed, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	p, err := Listen(Config{Policy: func() *policy.Policy { return pol }, OnBlocked: rec.add, DialTimeout: 2 * time.Second,
		Certs: a, UpstreamTLS: &tls.Config{RootCAs: upstream, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, rec
}

// browserLike is a client through p that trusts roots only, as the browser trusts the proxy's
// authority and nothing else of ours.
func browserLike(p *Proxy, roots *x509.CertPool) *http.Client {
	pu, _ := url.Parse(p.URL())
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
}

// A recording proxy opens an HTTPS tunnel: the browser sees the authority's certificate, the
// request is checked, recorded as an https exchange and sent on over TLS the proxy verified. A
// proxy that records nothing, answers from no archive and carries no dry run leaves tunnels
// opaque: the browser then sees the site's own certificate.
func TestProxyOpensTLSTunnelsOnlyWhileItNeedsTheirRequests(t *testing.T) {
	t.Parallel()
	s, siteRoots := tlsSite(t)
	a, ours := newAuthority(t)
	origin := "https://127.0.0.1:" + s.port
	p, blocked := interceptingProxy(t, []string{origin}, a, siteRoots)

	// Not recording: opaque. Our authority's roots do not verify the site's own certificate, the
	// site's do.
	if _, err := browserLike(p, ours).Get(origin + "/plain"); err == nil {
		t.Fatal("an unrecorded tunnel was opened by the proxy")
	}
	if resp, err := browserLike(p, siteRoots).Get(origin + "/plain"); err != nil {
		t.Fatal(err)
	} else {
		_ = resp.Body.Close()
	}

	rec := &urlRecorder{}
	p.SetRecorder(rec)
	c := browserLike(p, ours)
	resp, err := c.Post(origin+"/order?x=1", "application/x-www-form-urlencoded", strings.NewReader("name=Ada"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "host=127.0.0.1:"+s.port+" path=/order method=POST body=name=Ada" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != a.Root().Subject.CommonName {
		t.Fatalf("the browser did not see the authority's certificate: %+v", resp.TLS)
	}
	rec.mu.Lock()
	urls, tunnels, statuses := rec.urls, rec.tunnels, rec.statuses
	rec.mu.Unlock()
	if len(urls) != 1 || urls[0] != "POST "+origin+"/order?x=1" || len(statuses) != 1 || statuses[0] != 200 {
		t.Fatalf("recorded %v (statuses %v), want the POST as an https exchange", urls, statuses)
	}
	if len(tunnels) != 0 {
		t.Fatalf("an opened tunnel was recorded as opaque: %v", tunnels)
	}
	if n := len(blocked.all()); n != 0 {
		t.Fatalf("refusals: %+v", blocked.all())
	}
}

// What an opened tunnel carries is checked as plain HTTP is: a Host that names another site, a
// TLS server name that does, and a site whose certificate the proxy cannot verify are refused;
// the last before any request reaches it.
func TestAnOpenedTunnelRefusesWhatItCannotVouchFor(t *testing.T) {
	t.Parallel()
	s, siteRoots := tlsSite(t)
	a, ours := newAuthority(t)
	origin := "https://127.0.0.1:" + s.port

	t.Run("another Host inside", func(t *testing.T) {
		p, _ := interceptingProxy(t, []string{origin}, a, siteRoots)
		p.SetRecorder(&urlRecorder{})
		req, _ := http.NewRequest("GET", origin+"/x", nil)
		req.Host = "bank.example:443"
		resp, err := browserLike(p, ours).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%d, want 400", resp.StatusCode)
		}
	})
	t.Run("another TLS server name", func(t *testing.T) {
		p, blocked := interceptingProxy(t, []string{origin}, a, siteRoots)
		p.SetRecorder(&urlRecorder{})
		conn, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		fmt.Fprintf(conn, "CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n", s.port, s.port)
		br := bufio.NewReader(conn)
		if line, _ := br.ReadString('\n'); !strings.Contains(line, "200") {
			t.Fatalf("CONNECT: %q", line)
		}
		for line, _ := br.ReadString('\n'); line != "\r\n" && line != ""; line, _ = br.ReadString('\n') {
		}
		tc := tls.Client(conn, &tls.Config{ServerName: "bank.example", RootCAs: ours, MinVersion: tls.VersionTLS12})
		if err := tc.Handshake(); err == nil {
			t.Fatal("a handshake for another name succeeded")
		}
		// The proxy records the refusal after it aborted the handshake: the client may see the
		// abort first.
		waitfor.True(t, 10*time.Second, "the refusal recorded", func() bool { return len(blocked.all()) > 0 })
		if len(blocked.all()) != 1 || blocked.all()[0].Reason != ReasonUnclassifiable {
			t.Errorf("refusals %+v", blocked.all())
		}
	})
	t.Run("a site the proxy cannot verify", func(t *testing.T) {
		before := s.hits.Load()
		p, _ := interceptingProxy(t, []string{origin}, a, x509.NewCertPool())
		p.SetRecorder(&urlRecorder{})
		resp, err := browserLike(p, ours).Get(origin + "/x")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || s.hits.Load() != before {
			t.Fatalf("%d with %d requests served, want 502 and none", resp.StatusCode, s.hits.Load()-before)
		}
	})
	t.Run("an origin the policy does not allow", func(t *testing.T) {
		p, _ := interceptingProxy(t, []string{"https://shop.example"}, a, siteRoots)
		p.SetRecorder(&urlRecorder{})
		if line := connectThrough(t, p, "127.0.0.1:"+s.port); !strings.Contains(line, "403") {
			t.Fatalf("CONNECT answered %q", line)
		}
	})
}

// A replay's proxy opens HTTPS tunnels too and answers inside them from the archive, dialling
// nothing; a dry run's opens them and sends on only what a safe method asks.
func TestAnOpenedTunnelServesAReplayAndADryRun(t *testing.T) {
	t.Parallel()
	s, siteRoots := tlsSite(t)
	a, ours := newAuthority(t)
	origin := "https://127.0.0.1:" + s.port

	replay, blocked := interceptingProxy(t, []string{origin}, a, siteRoots)
	replay.ServeFrom(mapArchive{"GET " + origin + "/shop ": "<h1>shop</h1>"})
	before := s.conns.Load()
	c := browserLike(replay, ours)
	for _, tt := range []struct {
		path   string
		status int
		want   string
	}{{"/shop", 200, "<h1>shop</h1>"}, {"/admin", 403, "not_in_archive"}} {
		resp, err := c.Get(origin + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.want) {
			t.Fatalf("%s: %d %q", tt.path, resp.StatusCode, body)
		}
	}
	if n := s.conns.Load() - before; n != 0 {
		t.Fatalf("the site accepted %d connections during the replay", n)
	}
	if b := blocked.all(); len(b) != 1 || b[0].Reason != ReasonNotInArchive || b[0].URL != origin+"/admin" {
		t.Fatalf("refusals %+v", b)
	}

	dry, blocked := interceptingProxy(t, []string{origin}, a, siteRoots)
	dry.RefuseUnsafe()
	hits := s.hits.Load()
	c = browserLike(dry, ours)
	if resp, err := c.Get(origin + "/page"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a GET in a dry run: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	if resp, err := c.Post(origin+"/order", "text/plain", strings.NewReader("x")); err != nil || resp.StatusCode != 403 {
		t.Fatalf("a POST in a dry run: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	if n := s.hits.Load() - hits; n != 1 {
		t.Fatalf("the site served %d requests, want the GET only", n)
	}
	if b := blocked.all(); len(b) != 1 || b[0].Reason != ReasonDryRun {
		t.Fatalf("refusals %+v", b)
	}
}
