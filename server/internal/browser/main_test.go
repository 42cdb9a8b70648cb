package browser

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/policy"
)

// One browser per test package (STYLE.md), a fresh session per test.
var (
	testBrowser *Browser
	fx          *fixtures
	cleanups    []func() // run after the tests (benchmarks' own browsers)
)

func TestMain(m *testing.M) {
	fx = startFixtures()
	var err error
	lvl := slog.LevelWarn
	if os.Getenv("BAP_BROWSER_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	testBrowser, err = Start(ctx, Config{
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})),
		WarmContexts:     4,
		MaxSessions:      64,
		MaxDownloadBytes: 1 << 20,
		cspBodyTimeout:   2 * time.Second, // the slow-body test outlasts it (egress_test.go)
		transport:        tap.transport,   // wire_test.go counts the messages of one operation
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "browser tests need Chromium:", err)
		fx.close()
		os.Exit(1)
	}
	code := m.Run()
	for _, fn := range cleanups {
		fn()
	}
	_ = testBrowser.Close()
	fx.close()
	os.Exit(code)
}

// fixtures serves testdata/ on three 127.0.0.1 ports: A (the site under
// test, also reachable as localhost:A, a different site), B (another origin
// of the same site) and Other (an origin no test policy allows).
type fixtures struct {
	a, b, other *httptest.Server
	A, B, Site  string // base URLs
	Other       string
	orders      atomic.Int64
	frameOrders atomic.Int64 // orders placed from a form inside an iframe (frame-order)
	giftOrders  atomic.Int64 // orders from widgets.html's hostile form: its own counter, as tests run in parallel
	heldOrders  sync.Map     // hold_test.go: the bodies each checkout (by its ?id=) sent, as *heldLog
	stalls      sync.Map     // state_test.go: /stalled?id= answers once its *stall is released
	mu          sync.Mutex
	otherHits   []string
}

func startFixtures() *fixtures {
	f := &fixtures{}
	f.a = httptest.NewServer(http.HandlerFunc(f.serve))
	f.b = httptest.NewServer(http.HandlerFunc(f.serve))
	f.other = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.otherHits = append(f.otherHits, r.URL.Path)
		f.mu.Unlock()
		f.serve(w, r)
	}))
	f.A = f.a.URL
	f.B = f.b.URL
	f.Other = f.other.URL
	_, port, _ := net.SplitHostPort(f.a.Listener.Addr().String())
	f.Site = "http://localhost:" + port
	return f
}

func (f *fixtures) close() {
	f.a.Close()
	f.b.Close()
	f.other.Close()
}

// otherHitCount is how many requests reached the disallowed origin.
func (f *fixtures) otherHitCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.otherHits)
}

func (f *fixtures) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/order":
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		n := f.orders.Add(1)
		http.Redirect(w, r, fmt.Sprintf("/thanks.html?order=%d", n), http.StatusSeeOther)
		return
	case "/held-order":
		f.heldOrder(w, r)
		return
	case "/stalled":
		if v, ok := f.stalls.Load(r.URL.Query().Get("id")); ok {
			st := v.(*stall)
			st.arrive.Do(func() { close(st.arrived) })
			select {
			case <-st.release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<!doctype html><title>Statement</title><p>statement"))
		return
	case "/gift-order":
		f.giftOrders.Add(1)
		http.Redirect(w, r, "/thanks.html?order=gift", http.StatusSeeOther)
		return
	case "/frame-order":
		// A slow site: the order counts only once it was processed.
		time.Sleep(300 * time.Millisecond)
		f.frameOrders.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<!doctype html><title>Ordered</title><p>Frame order placed"))
		return
	case "/redirect":
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		return
	case "/download/report.csv":
		w.Header().Set("Content-Type", "text/csv")
		w.Header().Set("Content-Disposition", `attachment; filename="report.csv"`)
		_, _ = w.Write([]byte("order,total\n1001,31.50\n"))
		return
	case "/download/big.bin":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="big.bin"`)
		_, _ = w.Write(make([]byte, 3<<20))
		return
	case "/pixel.png":
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(pixelPNG)
		return
	case "/signin":
		// Signs in with an HttpOnly cookie, then lets the page keep state of its own.
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: "s3cret-session", Path: "/", HttpOnly: true})
		http.Redirect(w, r, "/signin.html", http.StatusFound)
		return
	case "/whoami":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if c, err := r.Cookie("sid"); err == nil {
			fmt.Fprintf(w, "<!doctype html><title>Who</title><p>signed in: %s</p>", c.Value)
		} else {
			fmt.Fprint(w, "<!doctype html><title>Who</title><p>signed out</p>")
		}
		return
	case "/hostile/checkout.html", "/hostile/channels.html", "/hostile/worker.js", "/hostile/sw.js", "/hostile/sniffed.html":
		f.serveHostile(w, r)
		return
	case "/status/404":
		http.Error(w, "not here", http.StatusNotFound)
		return
	}
	name := filepath.Base(r.URL.Path)
	if name == "/" || name == "." {
		name = "shop.html"
	}
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	s := strings.NewReplacer("{{CROSS}}", f.B, "{{SITE}}", f.Site, "{{OTHER}}", f.Other).Replace(string(b))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(s))
}

// serveHostile serves a page of testdata/hostile with {{TARGET}} set to the query's t (each test
// has a listener of its own), the Content-Type ct and Content-Disposition cd, and with slow set,
// a body that stalls that many milliseconds after its first half.
func (f *fixtures) serveHostile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	b, err := os.ReadFile(filepath.Join("testdata", "hostile", filepath.Base(r.URL.Path)))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	body := strings.ReplaceAll(string(b), "{{TARGET}}", q.Get("t"))
	ct := q.Get("ct")
	if ct == "" {
		ct = "text/html; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	if cd := q.Get("cd"); cd != "" {
		w.Header().Set("Content-Disposition", cd)
	}
	w.Header().Set("Cache-Control", "no-store")
	if ms, err := strconv.Atoi(q.Get("slow")); err == nil && ms > 0 {
		half := len(body) / 2
		_, _ = io.WriteString(w, body[:half])
		http.NewResponseController(w).Flush()
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		body = body[half:]
	}
	_, _ = io.WriteString(w, body)
}

var pixelPNG = []byte{
	0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
	0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
	0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
	0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
	0x42, 0x60, 0x82,
}

// bundle is what a test works with.
type bundle struct {
	t  *testing.T
	s  *Session
	ev *eventLog
}

// eventLog collects a session's events.
type eventLog struct {
	mu     sync.Mutex
	events []Event
	wake   chan struct{}
}

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
}

func (l *eventLog) all() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...)
}

// wait waits for an event matching fn.
func (l *eventLog) wait(t *testing.T, fn func(Event) bool) Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		for _, e := range l.events {
			if fn(e) {
				l.mu.Unlock()
				return e
			}
		}
		ch := l.wake
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no matching event; got %+v", l.all())
		}
	}
}

// testPolicy allows the fixtures' A, B and localhost:A origins.
func testPolicy(t testing.TB, extra ...string) *policy.Policy {
	t.Helper()
	pol, err := policy.ParsePolicy(append([]string{fx.A, fx.B, fx.Site}, extra...), nil)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, testPolicy(t))
}

func setupWith(t *testing.T, pol *policy.Policy) *bundle {
	t.Helper()
	ev := &eventLog{wake: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := testBrowser.OpenSession(ctx, ids.New(ids.BrowserSession), pol, ev.add)
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return &bundle{t: t, s: s, ev: ev}
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (b *bundle) navigate(path string) *NavigateResult {
	b.t.Helper()
	u := path
	if strings.HasPrefix(path, "/") {
		u = fx.A + path
	}
	res, err := b.s.Navigate(tctx(b.t), NavigateRequest{URL: u})
	if err != nil {
		b.t.Fatalf("Navigate %s: %v", u, err)
	}
	return res
}

func (b *bundle) observe(mode string) *Snapshot {
	b.t.Helper()
	snap, err := b.s.Observe(tctx(b.t), ObserveRequest{Mode: mode})
	if err != nil {
		b.t.Fatalf("Observe: %v", err)
	}
	return snap
}

// find returns the first node (depth first) matching fn.
func find(nodes []Node, fn func(Node) bool) (Node, bool) {
	for _, n := range nodes {
		if fn(n) {
			return n, true
		}
		if c, ok := find(n.Children, fn); ok {
			return c, true
		}
	}
	return Node{}, false
}

func (b *bundle) node(snap *Snapshot, role, name string) Node {
	b.t.Helper()
	n, ok := find(snap.Nodes, func(n Node) bool { return n.Role == role && n.Name == name })
	if !ok {
		b.t.Fatalf("no %s %q in snapshot", role, name)
	}
	if n.NodeID == "" {
		b.t.Fatalf("%s %q has no handle", role, name)
	}
	return n
}

func (b *bundle) query(q Query) Node {
	b.t.Helper()
	res, err := b.s.QueryNodes(tctx(b.t), QueryRequest{Query: q})
	if err != nil {
		b.t.Fatalf("QueryNodes %+v: %v", q, err)
	}
	if len(res.Nodes) == 0 {
		b.t.Fatalf("QueryNodes %+v: no match", q)
	}
	return res.Nodes[0]
}

func (b *bundle) act(req ActRequest) *ActResult {
	b.t.Helper()
	if req.Timeout == 0 {
		req.Timeout = 10 * time.Second
	}
	res, err := b.s.Act(tctx(b.t), req)
	if err != nil {
		b.t.Fatalf("Act %s: %v", req.Action, err)
	}
	return res
}

func (b *bundle) text(nodeID string) string {
	b.t.Helper()
	res, err := b.s.Extract(tctx(b.t), ExtractRequest{Kind: ExtractText, NodeID: nodeID})
	if err != nil {
		b.t.Fatalf("Extract text: %v", err)
	}
	return res.Data.(string)
}

// waitText waits until the page's visible text contains want.
func (b *bundle) waitText(want string) {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := b.text("")
		if strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("page text never contained %q; last: %q", want, got)
		}
		// Poll the page again (each call is a round trip to the renderer).
	}
}
