package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/policy"
)

// cdpID matches the raw ids Chromium hands out: target, frame, loader,
// browser context and session ids are 32 upper-case hex characters;
// interception and request ids have their own shapes.
var cdpID = regexp.MustCompile(`[0-9A-F]{32}|interception-job-\d+|\b\d+\.\d+\b.*requestId|"(backendNodeId|nodeId|frameId|targetId|loaderId|sessionId|executionContextId|objectId)"`)

// TestNoRawCDPIdsReachClients drives every operation and scans every string
// a client could see (results, errors, events) for raw protocol ids.
func TestNoRawCDPIdsReachClients(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var seen []any
	keep := func(v any, err error) {
		if err != nil {
			seen = append(seen, err.Error())
		}
		seen = append(seen, v)
	}
	ctx := tctx(t)
	keep(b.s.Navigate(ctx, NavigateRequest{URL: fx.A + "/frames.html"}))
	keep(b.s.Observe(ctx, ObserveRequest{Mode: ModeFull}))
	keep(b.s.QueryNodes(ctx, QueryRequest{Query: Query{Role: "button"}}))
	keep(b.s.Act(ctx, ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Top button"}}))
	keep(b.s.Extract(ctx, ExtractRequest{Kind: ExtractLinks}))
	keep(b.s.Navigate(ctx, NavigateRequest{URL: fx.A + "/popup.html"}))
	keep(b.s.Act(ctx, ActRequest{Action: ActionClick, Query: &Query{Role: "link", Name: "Open in new tab"}}))
	keep(b.s.Navigate(ctx, NavigateRequest{URL: fx.Other + "/x"}))
	keep(b.s.Navigate(ctx, NavigateRequest{URL: fx.A + "/dialogs.html"}))
	keep(b.s.Act(ctx, ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Alert"}}))
	keep(b.s.Act(ctx, ActRequest{Action: ActionClick, NodeID: "nd_0000000000"}))
	keep(b.s.Navigate(ctx, NavigateRequest{URL: fx.A + "/download.html"}))
	keep(b.s.Act(ctx, ActRequest{Action: ActionClick, Query: &Query{Role: "link", Name: "Download report"}}))
	keep(b.s.Navigate(ctx, NavigateRequest{URL: "http://127.0.0.1:1/refused"}))
	keep(b.s.Observe(ctx, ObserveRequest{ContextID: "ctx_nope"}))
	keep(b.s.DefaultContext(), nil)
	keep(b.s.Contexts(), nil)
	for _, e := range b.ev.all() {
		seen = append(seen, e)
	}
	raw, err := json.Marshal(seen)
	if err != nil {
		t.Fatal(err)
	}
	if m := cdpID.FindString(string(raw)); m != "" {
		i := strings.Index(string(raw), m)
		t.Fatalf("a raw protocol id reached a client: %q in …%s…", m, raw[max(0, i-80):min(len(raw), i+80)])
	}
	// Every id-looking field is one of ours.
	for _, re := range []*regexp.Regexp{regexp.MustCompile(`"(context_id|opener)":"([^"]*)"`), regexp.MustCompile(`"epoch_id":"([^"]*)"`), regexp.MustCompile(`"node_id":"([^"]*)"`)} {
		for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
			v := m[len(m)-1]
			if _, ok := ids.PrefixOf(v); !ok {
				t.Fatalf("id %q is not a BAP id", v)
			}
		}
	}
}

func TestWebSocketToRefusedOriginIsBlocked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := fx.otherHitCount()
	ws := strings.Replace(fx.Other, "http://", "ws://", 1) + "/ws"
	b.navigate("/ws.html?ws=" + ws)
	b.waitText("error")
	if n := fx.otherHitCount(); n != before {
		t.Fatalf("the WebSocket handshake reached the refused origin: %v", fx.otherHits)
	}
	b.ev.wait(t, func(e Event) bool { return e.Type == EventNavigationCommitted })
}

func TestSessionsAreIsolatedAndConcurrent(t *testing.T) {
	t.Parallel()
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			ev := &eventLog{wake: make(chan struct{})}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s, err := testBrowser.OpenSession(ctx, ids.New(ids.BrowserSession), testPolicy(t), ev.add)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close(context.Background())
			if _, err := s.Navigate(ctx, NavigateRequest{URL: fmt.Sprintf("%s/shop.html?i=%d", fx.A, i)}); err != nil {
				errs <- err
				return
			}
			if _, err := s.Act(ctx, ActRequest{Action: ActionFill, Query: &Query{Label: "Full name"}, Value: fmt.Sprint("user ", i)}); err != nil {
				errs <- err
				return
			}
			res, err := s.QueryNodes(ctx, QueryRequest{Query: Query{Label: "Full name"}})
			if err != nil || len(res.Nodes) != 1 || res.Nodes[0].Value != fmt.Sprint("user ", i) {
				errs <- fmt.Errorf("session %d: %+v %w", i, res, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Storage is per session.
	a, c := setup(t), setup(t)
	a.navigate("/shop.html")
	c.navigate("/shop.html")
	if _, err := a.s.Navigate(tctx(t), NavigateRequest{URL: fx.A + "/thanks.html"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.s.Extract(tctx(t), ExtractRequest{Kind: ExtractText}); err != nil {
		t.Fatal(err)
	}
	if a.s.ID() == c.s.ID() || a.s.DefaultContext() == c.s.DefaultContext() {
		t.Fatal("sessions share ids")
	}
	if _, err := c.s.Observe(tctx(t), ObserveRequest{ContextID: a.s.DefaultContext()}); !errors.Is(err, ErrNoSuchContext) {
		t.Fatalf("another session's context: %v", err)
	}
	snapA := a.observe("")
	first, _ := find(snapA.Nodes, func(n Node) bool { return n.NodeID != "" })
	if _, err := c.s.Act(tctx(t), ActRequest{Action: ActionClick, NodeID: first.NodeID}); !errors.Is(err, ErrNoSuchNode) {
		t.Fatalf("another session's handle: %v", err)
	}
	if _, err := testBrowser.OpenSession(tctx(t), a.s.ID(), testPolicy(t), nil); !errors.Is(err, ErrSessionExists) {
		t.Fatalf("duplicate id: %v", err)
	}
}

func TestCookiesDoNotCrossSessions(t *testing.T) {
	t.Parallel()
	a, c := setup(t), setup(t)
	a.navigate("/shop.html")
	c.navigate("/shop.html")
	// Set a cookie through the page (the test reaches into the package to
	// run page script; clients cannot).
	ctx := tctx(t)
	ta, _ := a.s.tab("")
	if err := a.s.inFrame(ctx, ta, ta.main, func(w *world) error {
		return a.s.eval(ctx, w, `document.cookie = "who=a; path=/"`, false, nil)
	}); err != nil {
		t.Fatal(err)
	}
	var got string
	tc, _ := c.s.tab("")
	if err := c.s.inFrame(ctx, tc, tc.main, func(w *world) error {
		return c.s.eval(ctx, w, `document.cookie`, false, &got)
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "who=a") {
		t.Fatalf("session c sees session a's cookie: %q", got)
	}
}

// TestRendererCrashLosesTheSession crashes a session's renderer; the session
// answers ErrSessionLost, reports session.lost, and the browser serves new
// sessions.
func TestRendererCrashLosesTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/shop.html")
	tb, _ := b.s.tab("")
	_ = tb.page.sess.Call(tctx(t), page.Crash.Method, struct{}{}, nil)
	b.ev.wait(t, func(e Event) bool { return e.Type == EventSessionLost })
	if _, err := b.s.Observe(tctx(t), ObserveRequest{}); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("observe after crash: %v", err)
	}
	if _, err := b.s.Act(tctx(t), ActRequest{Action: ActionClick, Query: &Query{Role: "button"}}); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("act after crash: %v", err)
	}
	other := setup(t)
	other.navigate("/shop.html")
	other.observe("")
}

// TestBrowserRestartsAfterCrash uses a browser of its own (killing the
// package's shared one would disturb the parallel tests).
func TestBrowserRestartsAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	br, err := Start(ctx, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), WarmContexts: 1, MaxSessions: 2, IdleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	ev := &eventLog{wake: make(chan struct{})}
	s, err := br.OpenSession(ctx, ids.New(ids.BrowserSession), testPolicy(t), ev.add)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Navigate(ctx, NavigateRequest{URL: fx.A + "/shop.html"}); err != nil {
		t.Fatal(err)
	}
	// MaxSessions is enforced.
	s2, err := br.OpenSession(ctx, ids.New(ids.BrowserSession), testPolicy(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := br.OpenSession(ctx, ids.New(ids.BrowserSession), testPolicy(t), nil); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("third session: %v", err)
	}
	_ = s2.Close(ctx)

	br.mu.Lock()
	pid := br.proc.p.cmd.Process.Pid
	br.mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ev.wait(t, func(e Event) bool { return e.Type == EventSessionLost })
	if _, err := s.Observe(ctx, ObserveRequest{}); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("observe after the browser died: %v", err)
	}
	if got, ok := br.Session(s.ID()); !ok || got != s {
		t.Fatal("a lost session must stay listed until closed")
	}
	_ = s.Close(ctx)
	s3, err := br.OpenSession(ctx, ids.New(ids.BrowserSession), testPolicy(t), nil)
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if _, err := s3.Navigate(ctx, NavigateRequest{URL: fx.A + "/thanks.html"}); err != nil {
		t.Fatalf("navigate after restart: %v", err)
	}
}

func TestIdleSessionsAreReaped(t *testing.T) {
	t.Parallel()
	ctx := tctx(t)
	br, err := Start(ctx, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), WarmContexts: -1, IdleTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	ev := &eventLog{wake: make(chan struct{})}
	pol, _ := policy.ParsePolicy([]string{fx.A}, nil)
	s, err := br.OpenSession(ctx, ids.New(ids.BrowserSession), pol, ev.add)
	if err != nil {
		t.Fatal(err)
	}
	ev.wait(t, func(e Event) bool { return e.Type == EventSessionClosed })
	if _, err := s.Observe(ctx, ObserveRequest{}); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("observe on a reaped session: %v", err)
	}
	if _, ok := br.Session(s.ID()); ok {
		t.Fatal("a reaped session is still listed")
	}
}

func TestUnavailableWithoutBrowser(t *testing.T) {
	t.Parallel()
	_, err := Start(context.Background(), Config{Binary: "/nonexistent/chromium"})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "chromium") {
		t.Fatalf("Start without a browser: %v", err)
	}
}
