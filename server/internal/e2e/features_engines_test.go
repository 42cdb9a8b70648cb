package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/waitfor"
)

// The browser features of issue #19 item 4 on each engine of a node running both, through the
// HTTP API: shadow DOM, dialogs and the origin policy here; iframes and popups in
// frames_popups_engines_test.go, uploads and downloads in files_test.go, approvals in
// e2e_test.go and heldrequest_test.go, checkpoints in checkpoint_test.go.
var bothEngineNames = []string{"chromium", "firefox"}

// servePages serves the browser package's fixture pages (shadow.html, dialogs.html, thanks.html).
func servePages(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.FileServer(http.Dir("../browser/testdata")))
	t.Cleanup(srv.Close)
	return srv
}

// openOn opens a task allowed on origins and a session on engine; it returns the session's path.
func openOn(t *testing.T, s *stack, key, engine string, origins ...string) (taskID, base string) {
	t.Helper()
	taskID = s.must(t, 201, "POST", "/bap/v1/tasks", key+"task", map[string]any{
		"goal": "use the page", "policy": map[string]any{"allowed_origins": origins},
	}).str("task", "task_id")
	r := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", key+"session", map[string]any{"engine": engine})
	if r.str("session", "engine") != engine {
		t.Fatalf("session %s, want engine %s", r.raw, engine)
	}
	return taskID, "/bap/v1/browser-sessions/" + r.str("session", "session_id")
}

// An open shadow root is part of the page on each engine: its field is found by its label,
// filled by handle and its button clicked by query; slotted content is observed; a closed shadow
// root is never read.
func TestShadowDOMOnEachEngine(t *testing.T) {
	t.Parallel()
	s, pages := newStack(t, bothEngines(t)), servePages(t)
	for _, engine := range bothEngineNames {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			k := "shadow-" + engine + "-"
			_, base := openOn(t, s, k, engine, pages.URL)
			s.must(t, 200, "POST", base+"/navigate", k+"nav", map[string]any{"url": pages.URL + "/shadow.html"})
			in := s.must(t, 200, "POST", base+"/query-nodes", "", map[string]any{"query": map[string]any{"label": "Shadow search"}})
			nodes, _ := in.body["nodes"].([]any)
			if len(nodes) != 1 {
				t.Fatalf("the shadow root's field by its label: %s", in.raw)
			}
			s.must(t, 200, "POST", base+"/act", k+"fill", map[string]any{"action": "fill", "node_id": nodes[0].(map[string]any)["node_id"], "value": "teapot"})
			s.must(t, 200, "POST", base+"/act", k+"click", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Shadow go"}})
			x := s.must(t, 200, "POST", base+"/extract", "", map[string]any{"kind": "text"})
			if got, _ := x.body["data"].(string); !strings.Contains(got, "searched teapot") {
				t.Fatalf("the shadow root's button did not run: %q", got)
			}
			obs := s.must(t, 200, "POST", base+"/observe", "", map[string]any{"mode": "full"})
			assertNoBiDiIDs(t, obs.raw)
			if !bytes.Contains(obs.raw, []byte("Slotted hint text")) || bytes.Contains(obs.raw, []byte("Closed secret")) {
				t.Fatalf("full observe: slotted content missing or a closed shadow root read: %s", obs.raw)
			}
		})
	}
}

// A dialog an act opens is dismissed on each engine and reported, in the act's dialogs and a
// dialog.handled event; the page sees the dismissal (a confirm's false, a prompt's null).
func TestDialogsOnEachEngine(t *testing.T) {
	t.Parallel()
	s, pages := newStack(t, bothEngines(t)), servePages(t)
	for _, engine := range bothEngineNames {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			k := "dialogs-" + engine + "-"
			taskID, base := openOn(t, s, k, engine, pages.URL)
			s.must(t, 200, "POST", base+"/navigate", k+"nav", map[string]any{"url": pages.URL + "/dialogs.html"})
			cases := []struct {
				button, typ, message, out string
			}{
				{"Alert", "alert", "Hello alert", "after alert"},
				{"Confirm", "confirm", "Really?", "cancelled"},
				{"Prompt", "prompt", "Your name?", "no answer"},
			}
			for _, tc := range cases {
				r := s.must(t, 200, "POST", base+"/act", k+tc.button, map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": tc.button}})
				assertNoBiDiIDs(t, r.raw)
				ds, _ := r.body["dialogs"].([]any)
				if len(ds) != 1 {
					t.Fatalf("%s: dialogs %s", tc.button, r.raw)
				}
				d := ds[0].(map[string]any)
				if d["type"] != tc.typ || d["message"] != tc.message || d["accepted"] != false {
					t.Fatalf("%s: dialog %v, want a dismissed %s %q", tc.button, d, tc.typ, tc.message)
				}
				x := s.must(t, 200, "POST", base+"/extract", "", map[string]any{"kind": "text"})
				if got, _ := x.body["data"].(string); !strings.Contains(got, tc.out) {
					t.Fatalf("%s: the page reads %q, want %q", tc.button, got, tc.out)
				}
			}
			// A session's events enter the history after the act that caused them answered
			// (RunBrowserEvents writes them in order, apart from the command): wait for them.
			waitfor.Until(t, 30*time.Second, "a dialog.handled event of each dismissed dialog", func() (bool, string) {
				evs := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
				handled := map[string]bool{}
				for _, e := range evs.body["events"].([]any) {
					ev := e.(map[string]any)
					if ev["type"] == "dialog.handled" {
						d := ev["data"].(map[string]any)
						handled[fmt.Sprint(d["dialog_type"])] = d["accepted"] == false
					}
				}
				for _, tc := range cases {
					if !handled[tc.typ] {
						return false, fmt.Sprintf("no dialog.handled event of a dismissed %s: %s", tc.typ, evs.raw)
					}
				}
				return true, ""
			})
		})
	}
}

// The task's origin policy holds on each engine: a navigation elsewhere is refused before it
// loads (403 origin_not_allowed, a recorded command whose key replays it, the URL's query not
// echoed), and neither a page's own request elsewhere (an image, which its load waits for) nor a
// redirect elsewhere reaches the other origin.
func TestOriginPolicyOnEachEngine(t *testing.T) {
	t.Parallel()
	s := newStack(t, bothEngines(t))
	for _, engine := range bothEngineNames {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			var elsewhere atomic.Int64
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				elsewhere.Add(1)
				fmt.Fprint(w, "elsewhere")
			}))
			t.Cleanup(other.Close)
			site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/redirect" {
					http.Redirect(w, r, other.URL+"/landing?token=secret", http.StatusFound)
					return
				}
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				fmt.Fprintf(w, `<!doctype html><title>Home</title><p>home</p><img alt="pixel" src="%s/pixel.png?token=secret">`, other.URL)
			}))
			t.Cleanup(site.Close)
			k := "origin-" + engine + "-"
			taskID, base := openOn(t, s, k, engine, site.URL)
			s.must(t, 200, "POST", base+"/navigate", k+"home", map[string]any{"url": site.URL + "/"})
			off := map[string]any{"url": other.URL + "/checkout?secret=1"}
			r := s.call(t, "POST", base+"/navigate", k+"off", off)
			if r.status != 403 || r.str("code") != "origin_not_allowed" || strings.Contains(string(r.raw), "secret=1") {
				t.Fatalf("off-origin navigation: %d %s", r.status, r.raw)
			}
			if again := s.call(t, "POST", base+"/navigate", k+"off", off); again.status != 403 || !bytes.Equal(again.raw, r.raw) {
				t.Fatalf("replay of the refusal: %d %s", again.status, again.raw)
			}
			redirect := s.call(t, "POST", base+"/navigate", k+"redirect", map[string]any{"url": site.URL + "/redirect"})
			if redirect.status != 403 || redirect.str("code") != "origin_not_allowed" || strings.Contains(string(redirect.raw), "token=secret") {
				t.Fatalf("a redirect elsewhere: %d %s", redirect.status, redirect.raw)
			}
			assertNoBiDiIDs(t, redirect.raw)
			// The image's refusal is in the history (the proxy's report), its query not in it.
			waitfor.Until(t, 30*time.Second, "request.blocked of the image", func() (bool, string) {
				evs := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
				if bytes.Contains(evs.raw, []byte("token=secret")) {
					t.Fatalf("the history carries the refused URL's query: %s", evs.raw)
				}
				for _, e := range evs.body["events"].([]any) {
					ev := e.(map[string]any)
					if d, _ := ev["data"].(map[string]any); ev["type"] == "request.blocked" && strings.Contains(fmt.Sprint(d["url"]), "/pixel.png") {
						return true, ""
					}
				}
				return false, string(evs.raw)
			})
			if n := elsewhere.Load(); n != 0 {
				t.Fatalf("the other origin received %d requests", n)
			}
			// The session still works on its own origin.
			s.must(t, 200, "POST", base+"/navigate", k+"home-again", map[string]any{"url": site.URL + "/"})
		})
	}
}
