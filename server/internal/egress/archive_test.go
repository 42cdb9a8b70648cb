package egress

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// mapArchive answers from a fixed table keyed by method, URL and body; it counts what it read.
type mapArchive map[string]string

func (m mapArchive) Serve(req *http.Request) (*http.Response, bool) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	got, ok := m[req.Method+" "+req.URL.String()+" "+string(body)]
	if !ok {
		return nil, false
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/html"}, "X-From": {"archive"}},
		Body: io.NopCloser(strings.NewReader(got)), ContentLength: int64(len(got))}, true
}

// A proxy serving from an archive answers what the archive holds and refuses the rest with
// not_in_archive, reported; the site behind it, which is allowed and up, never sees a
// connection: not for a hit, a miss, a POST the archive lacks, nor a tunnel.
func TestProxyServingFromAnArchiveNeverDials(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	p, rec := startProxy(t, []string{s.URL}, nil)
	base := s.URL
	// A kept-alive connection from before the replay must not carry anything either.
	warm := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, p.URL()))}}
	if resp, err := warm.Get(base + "/warm"); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	before := s.conns.Load()
	p.ServeFrom(mapArchive{
		"GET " + base + "/shop ":                     "<h1>shop</h1>",
		"POST " + base + "/order card=[masked:card]": "<h1>thanks</h1>",
	})
	p.ServeFrom(mapArchive{}) // a second archive changes nothing
	c := client(p)
	for _, tt := range []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"a recorded page", "GET", "/shop", "", 200, "<h1>shop</h1>"},
		{"a recorded POST with the same body", "POST", "/order", "card=[masked:card]", 200, "<h1>thanks</h1>"},
		{"a POST with another body", "POST", "/order", "card=1234", 403, "not_in_archive"},
		{"a page never recorded", "GET", "/admin", "", 403, "not_in_archive"},
		{"a kept-alive connection of before", "GET", "/warm", "", 403, "not_in_archive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cl := c
			if tt.path == "/warm" {
				cl = warm
			}
			req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.status || !bytes.Contains(body, []byte(tt.want)) {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, body, tt.status, tt.want)
			}
			if tt.status == 200 && resp.Header.Get("X-From") != "archive" {
				t.Errorf("headers %v", resp.Header)
			}
		})
	}
	// A tunnel: refused before any connection.
	conn := connectThrough(t, p, "127.0.0.1:"+s.port)
	if !strings.Contains(conn, "403") {
		t.Errorf("CONNECT answered %q", conn)
	}
	if n := s.conns.Load() - before; n != 0 {
		t.Errorf("the site accepted %d connections during the replay", n)
	}
	misses := 0
	for _, b := range rec.all() {
		if b.Reason == ReasonNotInArchive {
			misses++
		}
	}
	if misses != 4 {
		t.Errorf("%d not_in_archive refusals reported, want 4 (two misses, the kept-alive one, the tunnel): %+v", misses, rec.all())
	}
}

// connectThrough sends a CONNECT for authority through p and returns its status line.
func connectThrough(t *testing.T, p *Proxy, authority string) string {
	t.Helper()
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A proxy carrying a dry run forwards what a safe method asks over plain HTTP and refuses the
// rest — a POST, a PUT, an upgrade, a tunnel — before the site sees a connection, reporting each
// with dry_run.
func TestProxyCarryingADryRunSendsNothingUnsafe(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	p, rec := startProxy(t, []string{s.URL}, nil)
	p.RefuseUnsafe()
	c := client(p)
	for _, tt := range []struct {
		method  string
		upgrade bool
		status  int
	}{
		{"GET", false, 200},
		{"HEAD", false, 200},
		{"POST", false, 403},
		{"PUT", false, 403},
		{"DELETE", false, 403},
		{"GET", true, 403},
	} {
		req, _ := http.NewRequest(tt.method, s.URL+"/x", strings.NewReader("a=1"))
		if tt.upgrade {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s (upgrade %v): %d, want %d", tt.method, tt.upgrade, resp.StatusCode, tt.status)
		}
	}
	if line := connectThrough(t, p, "127.0.0.1:"+s.port); !strings.Contains(line, "403") {
		t.Errorf("CONNECT answered %q", line)
	}
	if n := s.hits.Load(); n != 2 {
		t.Errorf("the site served %d requests, want the GET and the HEAD", n)
	}
	refused := 0
	for _, b := range rec.all() {
		if b.Reason == ReasonDryRun {
			refused++
		}
	}
	if refused != 5 {
		t.Errorf("%d dry_run refusals reported, want 5: %+v", refused, rec.all())
	}
}
