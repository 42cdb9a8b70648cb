package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/browser"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
)

// The registry puts one observation keeper in front of each session, whatever engine runs it
// (ADR 0028): a cursor issued through the session OpenSession returned continues through the one
// Session finds later, the engine's own session refuses the budget fields, and closing the
// session drops its keeper. Real Chromium behind the registry's CDP entry.
func TestSessionsObserveThroughTheirKeeper(t *testing.T) {
	var b strings.Builder
	b.WriteString(`<!doctype html><title>List</title><ul>`)
	for i := range 120 {
		fmt.Fprintf(&b, `<li><button type="button">Item %d</button></li>`, i)
	}
	b.WriteString(`</ul>`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(b.String()))
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	br, err := browser.Start(ctx, browser.Config{Binary: os.Getenv("BAP_CHROMIUM")})
	if err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	t.Cleanup(func() { _ = br.Close() })
	e := Chromium(br)
	pol, err := policy.ParsePolicy([]string{srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := ids.New(ids.BrowserSession)
	opened, err := e.OpenSession(ctx, "chromium", id, pol, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opened.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	first, err := opened.Observe(ctx, page.ObserveRequest{MaxBytes: 2048})
	if err != nil || first.Continuation == nil {
		t.Fatalf("first part: %v %+v", err, first)
	}
	found, ok := e.Session(id)
	if !ok {
		t.Fatal("the open session is not found")
	}
	next, err := found.Observe(ctx, page.ObserveRequest{Cursor: first.Continuation.Cursor})
	if err != nil || next.ObservationID != first.ObservationID || next.Continuation == nil || next.Continuation.Part != 2 {
		t.Fatalf("the cursor through the session found later: %v %+v", err, next)
	}
	raw, _ := br.Session(id)
	if _, err := raw.Observe(ctx, page.ObserveRequest{Cursor: first.Continuation.Cursor}); err == nil {
		t.Fatal("the engine's own session answered a cursor")
	}
	if err := found.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	n := len(e.kept)
	e.mu.Unlock()
	if _, ok := e.Session(id); ok || n != 0 {
		t.Fatalf("after close: found %v, %d keepers kept", ok, n)
	}
}
