package browser

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/waitfor"
)

// heldLog is what one checkout page (by the id in its URL) sent to /held-order.
type heldLog struct {
	mu     sync.Mutex
	bodies []string
}

func (l *heldLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bodies...)
}

// heldOrder records an order under the id of the page that sent it (its Referer).
func (f *fixtures) heldOrder(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	ref, _ := url.Parse(r.Referer())
	id := ""
	if ref != nil {
		id = ref.Query().Get("id")
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if q := r.URL.RawQuery; q != "" {
		body = append([]byte(q+" "), body...) // what the site saw of the URL's query, too
	}
	v, _ := f.heldOrders.LoadOrStore(id, &heldLog{})
	l := v.(*heldLog)
	l.mu.Lock()
	l.bodies = append(l.bodies, string(body))
	l.mu.Unlock()
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		http.Redirect(w, r, "/thanks.html?order=held", http.StatusSeeOther)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// checkout opens hostile/checkout.html under a form_submission rule; orders returns what the
// site received from it.
func checkout(t *testing.T, hash string) (b *bundle, orders func() []string) {
	t.Helper()
	pol, err := policy.ParsePolicy([]string{fx.A, fx.B, fx.Site}, []policy.ApprovalRule{{Effect: policy.EffectFormSubmission}})
	if err != nil {
		t.Fatal(err)
	}
	b = setupWith(t, pol)
	id := ids.New(ids.BrowserSession)
	if _, err := b.s.Navigate(tctx(t), NavigateRequest{URL: fx.A + "/hostile/checkout.html?id=" + id + hash, WaitUntil: WaitLoad}); err != nil {
		t.Fatal(err)
	}
	return b, func() []string {
		if v, ok := fx.heldOrders.Load(id); ok {
			return v.(*heldLog).all()
		}
		return nil
	}
}

// Under a form_submission rule, what a checkout sends is held inside the browser, whatever sent
// it: form.submit() from a plain button, fetch POST from a div, XMLHttpRequest POST, sendBeacon.
// Nothing reaches the site until Release, which sends exactly that request once; Deny means never.
func TestNonSafeRequestsAreHeld(t *testing.T) {
	t.Parallel()
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
		{"XMLHttpRequest POST approved", "Pay with XHR", true, "card=4242&via=xhr", "paid by XHR: ok"},
		{"XMLHttpRequest POST denied", "Pay with XHR", false, "", "XHR payment failed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, orders := checkout(t, "")
			res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: tt.button}})
			// The browser reports a beacon late (it leaves through its keepalive loader); one that
			// reaches interception after the act returned is refused, as any request sent after
			// the act (hold.go), so on a loaded machine a beacon's act may return with nothing
			// held. That attempt must then end refused and reported, with nothing at the site, and
			// the next page's beacon is tried.
			for attempt := 1; res.Held == nil && tt.button == "Send beacon" && attempt < 3; attempt++ {
				b.ev.wait(t, func(e Event) bool {
					return e.Type == EventRequestBlocked && e.Data["reason"] == "unapproved_side_effect"
				})
				if got := orders(); len(got) != 0 {
					t.Fatalf("a late beacon reached the site: %q", got)
				}
				t.Logf("attempt %d: the beacon reached interception after the act returned and was refused", attempt)
				b, orders = checkout(t, "")
				res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: tt.button}})
			}
			if res.Held == nil {
				t.Fatalf("nothing held: %+v", res)
			}
			h := res.Held
			if h.Method != "POST" || !strings.HasSuffix(h.URL, "/held-order") || !h.BodyKnown {
				t.Errorf("held %+v", h)
			}
			if got := orders(); len(got) != 0 {
				t.Fatalf("the site received %q while the request was held", got)
			}
			// The page stays usable while it waits (a held navigation once froze it: the browser
			// holds back every command to a frame whose navigation is pending).
			octx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := b.s.Observe(octx, ObserveRequest{})
			cancel()
			if err != nil {
				t.Fatalf("observe while held: %v", err)
			}
			if tt.release {
				if string(h.Body) != tt.wantBody {
					t.Errorf("held body %q, want %q", h.Body, tt.wantBody)
				}
				if _, err := b.s.Release(tctx(t), h.ID); err != nil {
					t.Fatalf("release: %v", err)
				}
				want := tt.wantBody
				if tt.button == "Place order" {
					want = "cart=7 " + want // the form's action has a query: sent to exactly that URL
				}
				if got := orders(); len(got) != 1 || got[0] != want {
					t.Fatalf("after release the site received %q, want exactly %q once", got, want)
				}
			} else if err := b.s.Deny(tctx(t), h.ID); err != nil {
				t.Fatalf("deny: %v", err)
			}
			b.waitText(tt.after)
			if _, err := b.s.Release(tctx(t), h.ID); !errors.Is(err, ErrNoSuchHold) {
				t.Errorf("a second release: %v, want ErrNoSuchHold", err)
			}
			if got, want := len(orders()), map[bool]int{true: 1, false: 0}[tt.release]; got != want {
				t.Errorf("the site received %d orders, want %d", got, want)
			}
		})
	}
}

// A page cannot get a non-safe request past the rule by sending it on its own (at load) or after
// the act returned: it is refused and reported, never sent.
func TestNonSafeRequestsOutsideAnActAreRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, hash, button string }{
		{"at load", "#on-load", ""},
		{"after the act returned", "", "Pay later"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, orders := checkout(t, tt.hash)
			if tt.button != "" {
				if res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: tt.button}}); res.Held != nil {
					t.Fatalf("held at once: %+v", res.Held)
				}
			}
			ev := b.ev.wait(t, func(e Event) bool {
				return e.Type == EventRequestBlocked && e.Data["reason"] == "unapproved_side_effect"
			})
			if ev.Data["method"] != "POST" || !strings.HasSuffix(ev.URL, "/held-order") {
				t.Errorf("event %+v", ev)
			}
			b.waitText("payment failed")
			if got := orders(); len(got) != 0 {
				t.Fatalf("the site received %q", got)
			}
		})
	}
}

// An act a person approved before it ran (an any_action hold) sends its requests: it is not held
// a second time.
func TestApprovedActIsNotHeldAgain(t *testing.T) {
	t.Parallel()
	b, orders := checkout(t, "")
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Pay with fetch"}, Approved: true})
	if res.Held != nil {
		t.Fatalf("held: %+v", res.Held)
	}
	b.waitText("paid: ok")
	if got := orders(); len(got) != 1 {
		t.Fatalf("the site received %q, want one order", got)
	}
}

// A page asks for approval of a harmless request and sends the real one once it is answered,
// while the release settles: only the approved request goes out.
func TestReleaseSendsOnlyTheApprovedRequest(t *testing.T) {
	t.Parallel()
	b, orders := checkout(t, "")
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Donate"}})
	if res.Held == nil || string(res.Held.Body) != "donate=1" {
		t.Fatalf("held %+v", res.Held)
	}
	if _, err := b.s.Release(tctx(t), res.Held.ID); err != nil {
		t.Fatal(err)
	}
	b.waitText("transfer refused")
	if got := orders(); len(got) != 1 || got[0] != "donate=1" {
		t.Fatalf("the site received %q, want only the approved donate=1", got)
	}
	b.ev.wait(t, func(e Event) bool {
		return e.Type == EventRequestBlocked && e.Data["reason"] == "unapproved_side_effect"
	})
}

// A held request the page gives up on while it waits (its fetch times out) is reported when it
// is approved: Release fails with ErrHoldAbandoned and sends nothing, then or ever.
func TestHeldRequestAbandonedByThePage(t *testing.T) {
	t.Parallel()
	b, orders := checkout(t, "")
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Pay impatiently"}})
	if res.Held == nil {
		t.Fatalf("nothing held: %+v", res)
	}
	b.waitText("gave up: TimeoutError")
	// The page's give-up reaches the browser process a moment after the page says so; a release
	// in between sends the request after all (the browser still had it), and then waits for an
	// answer the page no longer reads. Release once the browser has dropped it: a paused request
	// that is gone answers Invalid InterceptionId.
	b.s.mu.Lock()
	h := b.s.hold
	b.s.mu.Unlock()
	if h == nil {
		t.Fatal("the hold went away before its release")
	}
	waitfor.True(t, 10*time.Second, "the browser to drop the request the page gave up", func() bool {
		_, err := call(tctx(t), h.tc.sess, fetch.GetResponseBody, fetch.GetResponseBodyParams{RequestID: h.rid})
		return err != nil && strings.Contains(err.Error(), "Invalid InterceptionId")
	})
	if _, err := b.s.Release(tctx(t), res.Held.ID); !errors.Is(err, ErrHoldAbandoned) {
		t.Fatalf("release after the page gave up: %v, want ErrHoldAbandoned", err)
	}
	if _, err := b.s.Release(tctx(t), res.Held.ID); !errors.Is(err, ErrNoSuchHold) {
		t.Errorf("a second release: %v, want ErrNoSuchHold", err)
	}
	if got := orders(); len(got) != 0 {
		t.Fatalf("the site received %q from an abandoned hold", got)
	}
}
