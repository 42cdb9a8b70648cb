package firefox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/waitfor"
)

// The CDP adapter's hold tests (browser/hold_test.go) on Firefox, against the same checkout page.

// shopFiles is the CDP adapter's test site: the same pages on both engines.
const shopFiles = "../browser/testdata"

// heldSite serves the test site and records, per checkout page (the ?id= of its Referer), what
// reached /held-order.
type heldSite struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string][]string
}

func newHeldSite(t *testing.T) *heldSite {
	t.Helper()
	hs := &heldSite{got: map[string][]string{}}
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServer(http.Dir(shopFiles)))
	mux.HandleFunc("POST /held-order", func(w http.ResponseWriter, r *http.Request) {
		id := ""
		if ref := r.Referer(); ref != "" {
			if i := strings.Index(ref, "id="); i >= 0 {
				id, _, _ = strings.Cut(ref[i+3:], "&")
				id, _, _ = strings.Cut(id, "#")
			}
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if q := r.URL.RawQuery; q != "" {
			body = append([]byte(q+" "), body...) // what the site saw of the URL's query, too
		}
		hs.mu.Lock()
		hs.got[id] = append(hs.got[id], string(body))
		hs.mu.Unlock()
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			http.Redirect(w, r, "/thanks.html?order=held", http.StatusSeeOther)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	hs.srv = httptest.NewServer(mux)
	t.Cleanup(hs.srv.Close)
	return hs
}

func (hs *heldSite) orders(id string) []string {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return append([]string(nil), hs.got[id]...)
}

// holdSession opens a BAP session under a form_submission rule on the site.
func holdSession(t *testing.T, ctx context.Context, ev *events, origin string) *Session {
	t.Helper()
	return openOn(t, ctx, testDriver(t, ctx), ev, holdPolicy(t, origin))
}

// holdPolicy allows origin under a form_submission rule.
func holdPolicy(t *testing.T, origin string) *policy.Policy {
	t.Helper()
	pol, err := policy.ParsePolicy([]string{origin}, []policy.ApprovalRule{{Effect: policy.EffectFormSubmission}})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// testDriver is a driver over the package's browser, with a BiDi session of its own.
func testDriver(t *testing.T, ctx context.Context) *Driver {
	t.Helper()
	d, err := newDriver(ctx, Config{}, slog.New(slog.DiscardHandler), browser, engine(t, ctx))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// openOn opens a BAP session on d governed by pol.
func openOn(t *testing.T, ctx context.Context, d *Driver, ev *events, pol *policy.Policy) *Session {
	t.Helper()
	s, err := d.OpenSession(ctx, ids.New(ids.BrowserSession), pol, ev.add)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.WithoutCancel(ctx)) })
	return s
}

// checkout opens hostile/checkout.html under a form_submission rule; orders returns what the
// site received from it.
func checkout(t *testing.T, ctx context.Context, ev *events, hash string) (*Session, func() []string) {
	t.Helper()
	hs := newHeldSite(t)
	s := holdSession(t, ctx, ev, hs.srv.URL)
	id := ids.New(ids.BrowserSession)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: hs.srv.URL + "/hostile/checkout.html?id=" + id + hash}); err != nil {
		t.Fatal(err)
	}
	return s, func() []string { return hs.orders(id) }
}

// waitText waits until the tab's visible text contains want.
func waitText(t *testing.T, ctx context.Context, s *Session, want string) {
	t.Helper()
	waitfor.Until(t, 10*time.Second, "the page to say "+want, func() (bool, string) {
		var r struct {
			V string `json:"v"`
		}
		if err := s.Agent(ctx, &r, "visibleText", 0); err != nil {
			return false, err.Error()
		}
		return strings.Contains(r.V, want), r.V
	})
}

// waitRefused waits for the request.blocked event of a refused side effect and returns it.
func waitRefused(t *testing.T, ev *events) page.Event {
	t.Helper()
	var blocked page.Event
	waitfor.True(t, 10*time.Second, "a request.blocked event for the unapproved POST", func() bool {
		for _, e := range ev.all() {
			if e.Type == page.EventRequestBlocked && e.Data["reason"] == "unapproved_side_effect" {
				blocked = e
				return true
			}
		}
		return false
	})
	return blocked
}

func click(t *testing.T, ctx context.Context, s *Session, name string, approved bool) *page.ActResult {
	t.Helper()
	res, err := s.Act(ctx, page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "button", Name: name}, Approved: approved})
	if err != nil {
		t.Fatalf("click %s: %v", name, err)
	}
	return res
}

// Under a form_submission rule, what a checkout sends is held inside the browser, whatever sent
// it: form.submit() from a plain button, fetch POST from a div, sendBeacon. Nothing reaches the
// site until Release, which sends exactly that request once; Deny means never. No BiDi request id
// is in what the session answers.
func TestNonSafeRequestsAreHeld(t *testing.T) {
	for _, tt := range []struct {
		name, button string
		release      bool
		wantBody     string
		after        string // page text after the release or denial
	}{
		{"form.submit() approved", "Place order", true, "card=4242424242424242", "Thank you"},
		{"fetch POST approved", "Pay with fetch", true, `{"card":"4242"}`, "paid: ok"},
		{"fetch POST denied", "Pay with fetch", false, "", "payment failed"},
		{"form.submit() denied", "Place order", false, "", "Place order"},
		{"sendBeacon approved", "Send beacon", true, "beacon=1", "beacon queued"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ev := &events{}
			s, orders := checkout(t, ctx, ev, "")
			res := click(t, ctx, s, tt.button, false)
			// A beacon that reaches interception after the act returned is refused (as on
			// Chromium); on a loaded machine that attempt must end refused with nothing at the
			// site, and the next page's beacon is tried.
			for attempt := 1; res.Held == nil && tt.button == "Send beacon" && attempt < 3; attempt++ {
				waitRefused(t, ev)
				if got := orders(); len(got) != 0 {
					t.Fatalf("a late beacon reached the site: %q", got)
				}
				t.Logf("attempt %d: the beacon reached interception after the act returned and was refused", attempt)
				ev = &events{}
				s, orders = checkout(t, ctx, ev, "")
				res = click(t, ctx, s, tt.button, false)
			}
			if res.Held == nil {
				t.Fatalf("nothing held: %+v", res)
			}
			h := res.Held
			if h.Method != "POST" || !strings.HasSuffix(h.URL, "/held-order") || !h.BodyKnown || !strings.HasPrefix(h.ID, "hold_") {
				t.Errorf("held %+v", h)
			}
			if got := orders(); len(got) != 0 {
				t.Fatalf("the site received %q while the request was held", got)
			}
			// The page stays usable while it waits.
			octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := s.Observe(octx, page.ObserveRequest{})
			ocancel()
			if err != nil {
				t.Fatalf("observe while held: %v", err)
			}
			var answered []any
			if tt.release {
				if string(h.Body) != tt.wantBody {
					t.Errorf("held body %q, want %q", h.Body, tt.wantBody)
				}
				rel, err := s.Release(ctx, h.ID)
				if err != nil {
					t.Fatalf("release: %v", err)
				}
				answered = append(answered, rel)
				want := tt.wantBody
				if tt.button == "Place order" {
					want = "cart=7 " + want // the form's action has a query: sent to exactly that URL
					if !rel.Navigated {
						t.Errorf("the released submission did not navigate: %+v", rel)
					}
				}
				if got := orders(); len(got) != 1 || got[0] != want {
					t.Fatalf("after release the site received %q, want exactly %q once", got, want)
				}
			} else if err := s.Deny(ctx, h.ID); err != nil {
				t.Fatalf("deny: %v", err)
			}
			waitText(t, ctx, s, tt.after)
			if _, err := s.Release(ctx, h.ID); !errors.Is(err, page.ErrNoSuchHold) {
				t.Errorf("a second release: %v, want ErrNoSuchHold", err)
			}
			if got, want := len(orders()), map[bool]int{true: 1, false: 0}[tt.release]; got != want {
				t.Errorf("the site received %d orders, want %d", got, want)
			}
			all, _ := json.Marshal(append(answered, res))
			if m := rawBiDi.Find(all); m != nil {
				t.Fatalf("a raw BiDi id reached a client: %q in %s", m, all)
			}
		})
	}
}

// A page cannot get a non-safe request past the rule by sending it on its own (at load) or after
// the act returned: it is refused and reported, never sent.
func TestNonSafeRequestsOutsideAnActAreRefused(t *testing.T) {
	for _, tt := range []struct{ name, hash, button string }{
		{"at load", "#on-load", ""},
		{"after the act returned", "", "Pay later"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ev := &events{}
			s, orders := checkout(t, ctx, ev, tt.hash)
			if tt.button != "" {
				if res := click(t, ctx, s, tt.button, false); res.Held != nil {
					t.Fatalf("held at once: %+v", res.Held)
				}
			}
			blocked := waitRefused(t, ev)
			if blocked.Data["method"] != "POST" || !strings.HasSuffix(blocked.URL, "/held-order") || blocked.ContextID != s.DefaultContext() {
				t.Errorf("event %+v", blocked)
			}
			waitText(t, ctx, s, "payment failed")
			if got := orders(); len(got) != 0 {
				t.Fatalf("the site received %q", got)
			}
		})
	}
}

// An act a person approved before it ran (an any_action hold) sends its requests: it is not held
// a second time.
func TestApprovedActIsNotHeldAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, orders := checkout(t, ctx, &events{}, "")
	if res := click(t, ctx, s, "Pay with fetch", true); res.Held != nil {
		t.Fatalf("held: %+v", res.Held)
	}
	waitText(t, ctx, s, "paid: ok")
	if got := orders(); len(got) != 1 {
		t.Fatalf("the site received %q, want one order", got)
	}
}

// A page asks for approval of a harmless request and sends the real one once it is answered,
// while the release settles: only the approved request goes out.
func TestReleaseSendsOnlyTheApprovedRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ev := &events{}
	s, orders := checkout(t, ctx, ev, "")
	res := click(t, ctx, s, "Donate", false)
	if res.Held == nil || string(res.Held.Body) != "donate=1" {
		t.Fatalf("held %+v", res.Held)
	}
	if _, err := s.Release(ctx, res.Held.ID); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, s, "transfer refused")
	if got := orders(); len(got) != 1 || got[0] != "donate=1" {
		t.Fatalf("the site received %q, want only the approved donate=1", got)
	}
	waitRefused(t, ev)
}

// What Firefox sends outside the tab's intercept: a dedicated worker's POST is the tab's (refused
// outside an act), and a service worker, whose requests no intercept sees, cannot be registered.
func TestWorkersCannotSendPastTheRule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var got []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!doctype html><title>Workers</title><p id="w">worker?</p><p id="sw">sw?</p><script>
const w = new Worker('/worker.js'); w.onmessage = e => document.getElementById('w').textContent = 'worker ' + e.data;
if (!navigator.serviceWorker) document.getElementById('sw').textContent = 'sw unavailable';
else navigator.serviceWorker.register('/sw.js').then(() => document.getElementById('sw').textContent = 'sw registered',
  () => document.getElementById('sw').textContent = 'sw unavailable');
</script>`)
	})
	mux.HandleFunc("GET /worker.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = io.WriteString(w, `fetch('/post', {method: 'POST', body: 'worker=1'}).then(() => postMessage('sent'), () => postMessage('refused'))`)
	})
	mux.HandleFunc("GET /sw.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = io.WriteString(w, `self.addEventListener('install', e => e.waitUntil(fetch('/post', {method: 'POST', body: 'sw=1'})))`)
	})
	mux.HandleFunc("POST /post", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s := holdSession(t, ctx, &events{}, srv.URL)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	waitText(t, ctx, s, "worker refused")
	waitText(t, ctx, s, "sw unavailable")
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Fatalf("the site received %q", got)
	}
}

// A popup the page opens is in the session's user context: what it sends on its own (after the act
// returned) is refused as the tab's would be; and a session without the rule, beside it, is not intercepted at all.
func TestPopupsCannotSendPastTheRule(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var got []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!doctype html><title>Opener</title><button onclick="window.open('/pop')">Open</button>`)
	})
	mux.HandleFunc("GET /pop", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!doctype html><title>Popup</title><script>setTimeout(() => fetch('/post', {method: 'POST', body: 'popup=1'}), 1500)</script>`)
	})
	mux.HandleFunc("POST /post", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	sent := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
	ev := &events{}
	d := testDriver(t, ctx)
	s := openOn(t, ctx, d, ev, holdPolicy(t, srv.URL))
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	if res := click(t, ctx, s, "Open", false); res.Held != nil {
		t.Fatalf("held: %+v", res.Held) // the popup's POST is its own, after the act returned
	}
	waitRefused(t, ev)
	if got := sent(); len(got) != 0 {
		t.Fatalf("the site received %q from the popup", got)
	}
	// Without the rule, the same popup's POST goes out (nothing intercepts that session).
	plain := openOn(t, ctx, d, &events{}, allowing(t, srv.URL))
	if _, err := plain.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Act(ctx, page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "button", Name: "Open"}}); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, 10*time.Second, "the popup's POST of the session without the rule", func() bool { return len(sent()) == 1 })
}

// A held request the page gives up on while it waits (its fetch times out) is reported when it
// is approved: Release fails with page.ErrHoldAbandoned and sends nothing, then or ever.
func TestHeldRequestAbandonedByThePage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, orders := checkout(t, ctx, &events{}, "")
	res := click(t, ctx, s, "Pay impatiently", false)
	if res.Held == nil {
		t.Fatalf("nothing held: %+v", res)
	}
	waitText(t, ctx, s, "gave up: TimeoutError")
	if _, err := s.Release(ctx, res.Held.ID); !errors.Is(err, page.ErrHoldAbandoned) {
		t.Fatalf("release after the page gave up: %v, want page.ErrHoldAbandoned", err)
	}
	if _, err := s.Release(ctx, res.Held.ID); !errors.Is(err, page.ErrNoSuchHold) {
		t.Errorf("a second release: %v, want page.ErrNoSuchHold", err)
	}
	if got := orders(); len(got) != 0 {
		t.Fatalf("the site received %q from an abandoned hold", got)
	}
}
