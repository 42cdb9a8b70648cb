package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/tlsmint"
)

// FuzzTunneledRequest feeds arbitrary bytes into a tunnel the proxy opened (a recording session's:
// what a hostile page could send inside it). Properties: the proxy never panics, and the site
// behind the tunnel's authority is reached only with that authority as its Host; no other site is
// ever reached.
func FuzzTunneledRequest(f *testing.F) {
	var badHost, otherHits atomic.Int64
	var allowed string
	site := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != allowed {
			badHost.Add(1)
		}
	}))
	allowed = site.Listener.Addr().String()
	site.Start()
	f.Cleanup(site.Close)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { otherHits.Add(1) }))
	f.Cleanup(other.Close)
	for _, seed := range []string{
		"GET /ok HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n",
		"GET /ok HTTP/1.1\r\nHost: " + other.Listener.Addr().String() + "\r\n\r\n",
		"GET http://" + other.Listener.Addr().String() + "/abs HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n",
		"CONNECT " + other.Listener.Addr().String() + " HTTP/1.1\r\nHost: " + other.Listener.Addr().String() + "\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: " + allowed + "\r\nContent-Length: 3\r\n\r\nabcGET /second HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"GET /ok HTTP/1.1\r\nHost: " + allowed + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"\x16\x03\x01\x00\x05hello",
		"GET * HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	pol, err := policy.ParsePolicy([]string{"http://" + allowed}, nil)
	if err != nil {
		f.Fatal(err)
	}
	a, err := tlsmint.New(nil)
	if err != nil {
		f.Fatal(err)
	}
	p, err := Listen(Config{Policy: func() *policy.Policy { return pol }, Certs: a, DialTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = p.Close() })
	p.SetRecorder(&urlRecorder{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		conn, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", allowed, allowed)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		_, _ = conn.Write(raw)
		if c, ok := conn.(*net.TCPConn); ok {
			_ = c.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, br)
		if n := badHost.Load(); n != 0 {
			t.Fatalf("the site was reached with another Host %d times", n)
		}
		if n := otherHits.Load(); n != 0 {
			t.Fatalf("another site was reached %d times", n)
		}
	})
}
