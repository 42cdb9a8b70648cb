package firefox

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// hostilePage tries to reach or fool a page agent: a fake __bap, a replaced JSON.stringify and
// getAttribute, and a cookie to tell sessions apart.
const hostilePage = `<!doctype html><title>checkout</title>
<script>
window.__bap = { snapshot: () => ({ n: [{ r: "button", n: "evil" }] }) };
JSON.stringify = () => '"evil"';
Element.prototype.getAttribute = () => "evil";
</script>
<main><h1>Checkout</h1><button aria-label="Pay now">$</button><a href="/terms">Terms</a></main>`

// snapNode is the part of the agent's snapshot record the test reads.
type snapNode struct {
	R string     `json:"r"`
	N string     `json:"n"`
	C []snapNode `json:"c"`
}

func flatten(ns []snapNode, out map[string]string) {
	for _, n := range ns {
		if n.R != "" {
			out[n.R+":"+n.N] = n.R
		}
		flatten(n.C, out)
	}
}

// engine opens an Engine on the package's browser with the CDP adapter's page agent, closed
// when the test ends.
func engine(t *testing.T, ctx context.Context) *Engine {
	t.Helper()
	e, err := Open(ctx, browser, pagekit.AgentJS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	return e
}

// engineSession opens a BAP session on e, closed when the test ends.
func engineSession(t *testing.T, ctx context.Context, e *Engine) *Session {
	t.Helper()
	s, err := e.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.WithoutCancel(ctx)); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestAgentSnapshotInSandbox runs the CDP adapter's page agent, unchanged, in Firefox's
// sandboxed realm: it snapshots a hostile page correctly (the page's fake __bap, JSON.stringify
// and getAttribute do not reach it) and the page cannot see the agent.
func TestAgentSnapshotInSandbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := servePage(t, hostilePage)
	e := engine(t, ctx)
	if !strings.HasPrefix(e.Version(), "firefox ") {
		t.Fatalf("Version = %q, want firefox and its version", e.Version())
	}
	s := engineSession(t, ctx, e)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}

	var snap struct {
		T string     `json:"t"`
		N []snapNode `json:"n"`
	}
	if err := s.Agent(ctx, &snap, "snapshot", map[string]any{"mode": "interactive", "max": 100}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	flatten(snap.N, got)
	for _, want := range []string{"button:Pay now", "link:Terms", "heading:Checkout"} {
		if _, ok := got[want]; !ok {
			t.Errorf("the snapshot lacks %s: %v", want, got)
		}
	}
	for k := range got {
		if strings.Contains(k, "evil") {
			t.Errorf("the page reached the agent: %s", k)
		}
	}
	if snap.T != "checkout" {
		t.Errorf("snapshot title = %q, want checkout", snap.T)
	}

	// The page's own realm sees its fake, not the agent.
	res, err := e.c.ScriptEvaluate(ctx, bidi.ScriptEvaluateParameters{
		Expression: `typeof window.__bap.fn + ":" + typeof window.__bap.reg`,
		Target:     bidi.ScriptTarget{Context: s.top},
	})
	if err != nil {
		t.Fatal(err)
	}
	var seen string
	if res.Result == nil || json.Unmarshal(res.Result.Value, &seen) != nil || seen != "undefined:undefined" {
		t.Fatalf("the page sees the agent: %+v", res.Result)
	}

	// A new document has no agent until the next call installs it again.
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/again"}); err != nil {
		t.Fatal(err)
	}
	var title struct {
		T string `json:"t"`
	}
	if err := s.Agent(ctx, &title, "snapshot", map[string]any{"mode": "interactive", "max": 10}); err != nil || title.T != "checkout" {
		t.Fatalf("snapshot after navigation = %+v, %v", title, err)
	}

	if err := s.Agent(ctx, nil, "snapshot); alert(1"); err == nil {
		t.Fatal("an agent function name with code in it was run")
	}
}

// TestAgentShowsOnlyRenderedElementsInFirefox runs the page agent's interactive snapshot over the
// browser package's page of hidden and shown controls in Firefox: it shows exactly the controls
// it shows in Chromium (TestObserveShowsOnlyRenderedElements; the list is
// testdata/visibility.interactive.txt there), since the agent asks Firefox's checkVisibility only
// of the elements it may show.
func TestAgentShowsOnlyRenderedElementsInFirefox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	html, err := os.ReadFile("../browser/testdata/visibility.html")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../browser/testdata/visibility.interactive.txt")
	if err != nil {
		t.Fatal(err)
	}
	srv := servePage(t, string(html))
	s := engineSession(t, ctx, engine(t, ctx))
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	var snap struct {
		N []snapNode `json:"n"`
	}
	if err := s.Agent(ctx, &snap, "snapshot", map[string]any{"mode": "interactive", "max": 100}); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var walk func([]snapNode)
	walk = func(ns []snapNode) {
		for _, n := range ns {
			got.WriteString(n.R + " " + n.N + "\n")
			walk(n.C)
		}
	}
	walk(snap.N)
	if got.String() != string(want) {
		t.Errorf("the snapshot shows\n%swant\n%s", got.String(), want)
	}
}

// TestSessionsAreUserContexts checks that two BAP sessions are two user contexts: a cookie one
// sets on an origin is not sent by the other, and a closed session refuses work.
func TestSessionsAreUserContexts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, cookies := cookieServer(t, &http.Cookie{Name: "sid", Value: "a", Path: "/"})
	e := engine(t, ctx)
	a, err := e.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.uc == b.uc {
		t.Fatalf("two sessions share user context %s", a.uc)
	}
	if _, err := a.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/set"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		s    *Session
		want string
	}{
		{"the session that set it", a, "sid=a"},
		{"another session", b, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/read"}); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-cookies:
				if got != tt.want {
					t.Fatalf("Cookie = %q, want %q", got, tt.want)
				}
			case <-ctx.Done():
				t.Fatal("no request")
			}
		})
	}
	for _, s := range []*Session{a, b} {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := a.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/read"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Navigate after Close = %v, want ErrClosed", err)
	}
	// The user context is gone from the browser too.
	ucs, err := e.c.BrowserGetUserContexts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ucs.UserContexts {
		if u.UserContext == a.uc || u.UserContext == b.uc {
			t.Fatalf("user context %s outlived its session", u.UserContext)
		}
	}
}

// cookieServer serves /set, which sets cookies, and /read, whose Cookie header it sends on the
// returned channel; the favicon and other paths get the same empty page.
func cookieServer(t *testing.T, cookies ...*http.Cookie) (*httptest.Server, <-chan string) {
	t.Helper()
	reads := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/set":
			for _, c := range cookies {
				http.SetCookie(w, c)
			}
		case "/read":
			reads <- r.Header.Get("Cookie")
		default: // the favicon
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!doctype html><title>c</title>"))
	}))
	t.Cleanup(srv.Close)
	return srv, reads
}

// A session opened while another one's tab is being discarded gets its tab: Firefox answers the
// tab's creation "no such frame" then, and NewSession tries again (a clean-clone conformance run
// answered create_browser_session 500 twice so).
func TestNewSessionWhileAnotherCloses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := engine(t, ctx)
	keep, err := e.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = keep.Close(context.WithoutCancel(ctx)) }()
	srv, _ := cookieServer(t, &http.Cookie{Name: "sid", Value: "a", Path: "/"})
	for i := range 20 {
		s, err := e.NewSession(ctx)
		if err != nil {
			t.Fatalf("round %d: opening: %v", i, err)
		}
		if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/set"}); err != nil {
			t.Fatalf("round %d: navigating: %v", i, err)
		}
		if i%2 == 1 { // closed before the next opens, as a client does between two tasks
			if err := s.Close(ctx); err != nil {
				t.Fatalf("round %d: closing: %v", i, err)
			}
			next, err := e.NewSession(ctx)
			if err != nil {
				t.Fatalf("round %d: opening a session right after another closed: %v", i, err)
			}
			if err := next.Close(ctx); err != nil {
				t.Fatalf("round %d: closing the next: %v", i, err)
			}
			continue
		}
		closed := make(chan error, 1)
		go func() { closed <- s.Close(context.WithoutCancel(ctx)) }()
		next, err := e.NewSession(ctx)
		if err != nil {
			t.Fatalf("round %d: opening a session while another closes: %v", i, err)
		}
		if err := <-closed; err != nil {
			t.Fatalf("round %d: closing: %v", i, err)
		}
		if err := next.Close(ctx); err != nil {
			t.Fatalf("round %d: closing the next: %v", i, err)
		}
	}
}
