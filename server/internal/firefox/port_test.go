package firefox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/waitfor"
)

// site is a small shop on one origin (with a page that reaches for another) and the other origin,
// which counts what reached it.
type site struct {
	shop, other *httptest.Server
	otherHits   atomic.Int64
	orders      atomic.Int64
	buyer       atomic.Pointer[string]
}

const shopPage = `<!doctype html><title>Checkout</title><h1>Checkout</h1>
<form method="post" action="/order"><label for="n">Full name</label><input id="n" name="name">
<label><input type="checkbox" name="terms"> I accept the terms</label>
<select aria-label="Country" name="c"><option value="">Choose</option><option value="fr">France</option></select>
<button type="submit">Place order</button></form><a href="/thanks">Skip</a>`

func newSite(t *testing.T) *site {
	t.Helper()
	s := &site{}
	s.other = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.otherHits.Add(1)
		_, _ = w.Write([]byte("other"))
	}))
	t.Cleanup(s.other.Close)
	mux := http.NewServeMux()
	html := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(body))
	}
	mux.HandleFunc("GET /checkout", func(w http.ResponseWriter, r *http.Request) { html(w, shopPage) })
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		name := r.FormValue("name")
		s.buyer.Store(&name)
		s.orders.Add(1)
		http.Redirect(w, r, "/thanks", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /thanks", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<!doctype html><title>Thanks</title><h1>Thank you</h1>`)
	})
	mux.HandleFunc("GET /reach", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<!doctype html><title>Reach</title><p id="r">waiting</p><img src="`+s.other.URL+`/pixel">
<script>fetch("`+s.other.URL+`/data").then(() => { document.getElementById("r").textContent = "reached" }, () => { document.getElementById("r").textContent = "refused" })</script>`)
	})
	mux.HandleFunc("GET /away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.other.URL+"/landing", http.StatusFound)
	})
	s.shop = httptest.NewServer(mux)
	t.Cleanup(s.shop.Close)
	return s
}

// events collects a session's events.
type events struct {
	mu   sync.Mutex
	list []page.Event
}

func (e *events) add(ev page.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *events) all() []page.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]page.Event(nil), e.list...)
}

// portSession opens a BAP session on a driver over the package's browser, allowed on origins.
func portSession(t *testing.T, ctx context.Context, ev *events, origins ...string) *Session {
	t.Helper()
	return openOn(t, ctx, testDriver(t, ctx), ev, allowing(t, origins...))
}

// allowing is a policy allowing origins, without approval rules.
func allowing(t *testing.T, origins ...string) *policy.Policy {
	t.Helper()
	pol, err := policy.ParsePolicy(origins, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// rawBiDi matches what Firefox's BiDi ids look like: UUIDs (browsing, user context and realm ids)
// and shared references.
var rawBiDi = regexp.MustCompile(`(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|f\.[0-9A-F]+\.d\.[0-9A-F]+\.e\.\d+`)

// TestPortFlow drives the use-cases' operations on a Firefox session as the CDP adapter's tests
// do: navigate, observe (the page agent's nodes with handles), query, fill by handle, check,
// select and click through input.performActions (the order is placed with the typed name), a
// handle of the previous document is stale after the navigation, extract, screenshots, state
// export; and nothing it answers or reports holds a raw BiDi id.
func TestPortFlow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := newSite(t)
	ev := &events{}
	s := portSession(t, ctx, ev, st.shop.URL)
	var seen []any
	keep := func(v any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, v)
	}

	nav, err := s.Navigate(ctx, page.NavigateRequest{URL: st.shop.URL + "/checkout"})
	keep(nav, err)
	if nav.ContextID != s.DefaultContext() || !strings.HasPrefix(nav.EpochID, "ep_") || nav.Title != "Checkout" {
		t.Fatalf("navigate: %+v", nav)
	}
	snap, err := s.Observe(ctx, page.ObserveRequest{})
	keep(snap, err)
	raw, _ := json.Marshal(snap)
	if !strings.Contains(string(raw), `"name":"Place order"`) || !strings.Contains(string(raw), `"node_id":"nd_`) || snap.EpochID != nav.EpochID {
		t.Fatalf("observe: %s", raw)
	}
	q, err := s.QueryNodes(ctx, page.QueryRequest{Query: page.Query{Label: "Full name"}})
	keep(q, err)
	if len(q.Nodes) != 1 || q.Nodes[0].Role != "textbox" {
		t.Fatalf("query: %+v", q)
	}
	name := q.Nodes[0].NodeID
	keep(s.Act(ctx, page.ActRequest{Action: page.ActionFill, NodeID: name, Value: "Ada Lovelace"}))
	keep(s.Act(ctx, page.ActRequest{Action: page.ActionCheck, Query: &page.Query{Role: "checkbox", Name: "terms"}}))
	keep(s.Act(ctx, page.ActRequest{Action: page.ActionSelectOption, Query: &page.Query{Label: "Country"}, Values: []string{"France"}}))
	filled, err := s.QueryNodes(ctx, page.QueryRequest{Query: page.Query{Label: "Full name"}})
	keep(filled, err)
	if filled.Nodes[0].Value != "Ada Lovelace" || filled.Nodes[0].NodeID != name {
		t.Fatalf("after fill: %+v", filled.Nodes)
	}
	effect, _, err := s.ClassifyAction(ctx, page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "button", Name: "Place order"}})
	if err != nil || effect != page.EffectFormSubmission {
		t.Fatalf("classify: %q %v", effect, err)
	}
	click, err := s.Act(ctx, page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "button", Name: "Place order"}})
	keep(click, err)
	if !click.Navigated || click.EpochID == nav.EpochID || st.orders.Load() != 1 || *st.buyer.Load() != "Ada Lovelace" {
		t.Fatalf("click: %+v (orders %d)", click, st.orders.Load())
	}
	for _, req := range []page.ActRequest{
		{Action: page.ActionClick, NodeID: name},
		{Action: page.ActionFill, NodeID: name, Value: "x"},
	} {
		if _, err := s.Act(ctx, req); !errors.Is(err, page.ErrStaleNodeHandle) {
			t.Fatalf("%s with a handle of the previous document: %v, want stale", req.Action, err)
		}
	}
	if _, err := s.Observe(ctx, page.ObserveRequest{Within: name}); !errors.Is(err, page.ErrStaleNodeHandle) {
		t.Fatalf("observe within a stale handle: %v", err)
	}
	if _, err := s.Act(ctx, page.ActRequest{Action: page.ActionClick, NodeID: "nd_0000000000"}); !errors.Is(err, page.ErrNoSuchNode) {
		t.Fatalf("an unknown handle: %v", err)
	}
	text, err := s.Extract(ctx, page.ExtractRequest{Kind: page.ExtractText})
	keep(text, err)
	if !strings.Contains(fmt.Sprint(text.Data), "Thank you") || text.EpochID != click.EpochID {
		t.Fatalf("extract: %+v", text)
	}
	for _, req := range []page.ScreenshotRequest{{}, {FullPage: true}} {
		png, err := s.Screenshot(ctx, req)
		if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
			t.Fatalf("screenshot %+v: %d bytes, %v", req, len(png), err)
		}
	}
	state, err := s.ExportState(ctx)
	if err != nil || len(state.Contexts) != 1 || !strings.HasSuffix(state.Contexts[0].URL, "/thanks") {
		t.Fatalf("export: %+v %v", state, err)
	}
	noRawBiDi(t, seen, ev)
}

// noRawBiDi fails when a raw BiDi id is in the answers seen or the session's events.
func noRawBiDi(t *testing.T, seen []any, ev *events) {
	t.Helper()
	for _, e := range ev.all() {
		seen = append(seen, e)
	}
	all, _ := json.Marshal(seen)
	if m := rawBiDi.Find(all); m != nil {
		t.Fatalf("a raw BiDi id reached a client: %q in %s", m, all)
	}
}

// TestPortOriginPolicy: the session's traffic goes through its egress proxy, so the task's origin
// policy holds on Firefox too — a navigation elsewhere is refused before it loads, a redirect
// elsewhere is refused as on Chromium, neither it nor a page's own requests elsewhere reach the
// other origin, and each request refused is a request.blocked event (a navigation refused
// before it is requested is the command's answer).
func TestPortOriginPolicy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := newSite(t)
	ev := &events{}
	s := portSession(t, ctx, ev, st.shop.URL)
	var refused *page.OriginNotAllowedError
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: st.other.URL + "/x"}); !errors.As(err, &refused) {
		t.Fatalf("navigate elsewhere: %v, want OriginNotAllowedError", err)
	}
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: st.shop.URL + "/reach"}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the page's fetch elsewhere to settle", func() (bool, string) {
		var r struct {
			V string `json:"v"`
		}
		if err := s.Agent(ctx, &r, "visibleText", 0); err != nil {
			return false, err.Error()
		}
		if strings.Contains(r.V, "reached") {
			t.Fatalf("the page's fetch reached the other origin: %q", r.V)
		}
		return strings.Contains(r.V, "refused"), r.V
	})
	// A redirect elsewhere is refused as the navigation elsewhere is, naming the refused hop.
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: st.shop.URL + "/away"}); !errors.As(err, &refused) || !strings.HasPrefix(refused.URL, st.other.URL) {
		t.Fatalf("a redirect elsewhere: %v, want OriginNotAllowedError naming %s", err, st.other.URL)
	}
	if n := st.otherHits.Load(); n != 0 {
		t.Fatalf("%d requests reached the other origin", n)
	}
	blocked := 0
	for _, e := range ev.all() {
		if e.Type == page.EventRequestBlocked {
			blocked++
		}
	}
	if blocked < 3 {
		t.Fatalf("request.blocked events: %+v, want the page's requests and the redirect", ev.all())
	}
}

// TestPortDialogs: a dialog an act opens is answered as on Chromium — dismissed (the confirm's
// "no" path runs) — and reported in the act's result and a dialog.handled event.
func TestPortDialogs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := servePage(t, `<!doctype html><title>Dialogs</title><p id="out">none</p>
<button onclick="document.getElementById('out').textContent = confirm('Delete everything?') ? 'deleted' : 'kept'">Delete</button>`)
	ev := &events{}
	s := portSession(t, ctx, ev, srv.URL)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Act(ctx, page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "button", Name: "Delete"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Dialogs) != 1 || res.Dialogs[0].Type != "confirm" || res.Dialogs[0].Message != "Delete everything?" || res.Dialogs[0].Accepted {
		t.Fatalf("act dialogs: %+v", res.Dialogs)
	}
	var r struct {
		V string `json:"v"`
	}
	if err := s.Agent(ctx, &r, "visibleText", 0); err != nil || !strings.Contains(r.V, "kept") {
		t.Fatalf("page after the dismissed confirm: %q %v", r.V, err)
	}
	handled := 0
	for _, e := range ev.all() {
		if e.Type == page.EventDialogHandled && e.Data["dialog_type"] == "confirm" && e.Data["accepted"] == false {
			handled++
		}
	}
	if handled != 1 {
		t.Fatalf("dialog.handled events: %+v", ev.all())
	}
}

// TestPortRefusesDownloads: Firefox has no downloads capability, so a session's browser refuses a
// download (nothing is written) instead of keeping a file nobody gets; the page stays usable.
func TestPortRefusesDownloads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	served := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>Files</title><a href="/report.bin">Report</a>`))
	})
	mux.HandleFunc("GET /report.bin", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="report.bin"`)
		_, _ = w.Write([]byte("REPORT-CONTENT"))
		served <- struct{}{}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s := portSession(t, ctx, &events{}, srv.URL)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Act(ctx, page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "link", Name: "Report"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Downloads) != 0 {
		t.Fatalf("downloads reported: %+v", res.Downloads)
	}
	waitfor.Receive(t, 10*time.Second, "the download's request", served)
	found := ""
	_ = filepath.WalkDir(browser.dir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "report") {
			found = p
		}
		return nil
	})
	if found != "" {
		t.Fatalf("the refused download was written: %s", found)
	}
	if _, err := s.QueryNodes(ctx, page.QueryRequest{Query: page.Query{Role: "link", Name: "Report"}}); err != nil {
		t.Fatalf("the page after the refused download: %v", err)
	}
}
