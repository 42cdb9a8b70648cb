package e2e

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/firefox"
)

// The package's Firefox, started by the first test that needs it and stopped by TestMain.
var (
	firefoxOnce sync.Once
	firefoxDrv  *firefox.Driver
	firefoxErr  error
)

func sharedFirefox(t *testing.T) *firefox.Driver {
	t.Helper()
	firefoxOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// Its warnings and errors (Firefox going away, and why) go to the test binary's output,
		// which go test shows when the package fails.
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		firefoxDrv, firefoxErr = firefox.Start(ctx, firefox.Config{Binary: os.Getenv("BAP_FIREFOX"), MaxSessions: 16, Logger: log})
	})
	if firefoxErr != nil {
		t.Fatalf("starting Firefox: %v", firefoxErr)
	}
	return firefoxDrv
}

func closeSharedFirefox() {
	if firefoxDrv != nil {
		_ = firefoxDrv.Close()
	}
}

// bothEngines is a node running chromium (the default) and firefox, as `--engines
// chromium,firefox` starts it.
func bothEngines(t *testing.T) func(*app.Config) {
	ff := sharedFirefox(t)
	return func(c *app.Config) {
		c.Browser = daemon.NewEngines(
			daemon.RunningEngine{Adapter: daemon.ChromiumAdapter(), Browser: daemon.BrowserPort{Browser: shared}},
			daemon.RunningEngine{Adapter: daemon.FirefoxAdapter(), Browser: daemon.FirefoxPort{Driver: ff}})
	}
}

// bidiID matches the raw ids Firefox's WebDriver BiDi hands out: browsing context, user context
// and realm ids are UUIDs, shared references f.<hex>.d.<hex>.e.<n>, and the protocol's own id
// fields by name.
var bidiID = regexp.MustCompile(`(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\bf\.[0-9A-F]+\.d\.[0-9A-F]+\.e\.\d+\b|"(sharedId|realm|userContext|browsingContext|navigation|request|handle|internalId)":`)

func assertNoBiDiIDs(t *testing.T, raw []byte) {
	t.Helper()
	if m := bidiID.Find(raw); m != nil {
		t.Fatalf("a client-visible response carries a BiDi-shaped id %q: %s", m, raw)
	}
}

// The README's quick start on each engine of a node running both (issue #19): create a task,
// create_browser_session {engine}, navigate, observe, fill by handle and by query, check, click
// (the order is placed), a handle of the previous document answers 409 stale_node_handle,
// capture_evidence takes a screenshot, close_task succeeds verified with evidence — and no
// response carries a raw CDP or BiDi id. GET /bap/v1 lists both engines and both adapters.
func TestQuickStartOnEachEngine(t *testing.T) {
	t.Parallel()
	s := newStack(t, bothEngines(t))
	info := s.must(t, 200, "GET", "/bap/v1", "", nil)
	assertNoBiDiIDs(t, info.raw)
	engines, _ := info.body["engines"].([]any)
	if len(engines) != 2 || engines[0].(map[string]any)["engine"] != "chromium" || engines[1].(map[string]any)["engine"] != "firefox" ||
		engines[1].(map[string]any)["adapter_id"] != "bidi" || engines[1].(map[string]any)["available"] != true ||
		engines[1].(map[string]any)["version"] == "" {
		t.Fatalf("GET /bap/v1 engines: %s", info.raw)
	}
	cases := []struct {
		engine   string
		evidence []string // close_task's evidence kinds
	}{
		{"chromium", []string{"screenshot", "dom_snapshot"}},
		{"firefox", []string{"screenshot"}},
	}
	for _, tc := range cases {
		t.Run(tc.engine, func(t *testing.T) {
			t.Parallel()
			sh := newShop(t)
			k := "qs-" + tc.engine + "-"
			must := func(want int, method, path, key string, body any) reply {
				t.Helper()
				r := s.must(t, want, method, path, key, body)
				assertNoBiDiIDs(t, r.raw)
				return r
			}
			taskID := must(201, "POST", "/bap/v1/tasks", k+"task", map[string]any{
				"goal": "place an order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
				"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you"}}},
			}).str("task", "task_id")
			r := must(201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", k+"session", map[string]any{"engine": tc.engine})
			if r.str("session", "engine") != tc.engine || r.str("session", "engine_version") == "" {
				t.Fatalf("session %s, want engine %s with its version", r.raw, tc.engine)
			}
			base := "/bap/v1/browser-sessions/" + r.str("session", "session_id")
			nav := must(200, "POST", base+"/navigate", k+"nav", map[string]any{"url": sh.srv.URL + "/checkout"})
			obs := must(200, "POST", base+"/observe", "", map[string]any{})
			if !strings.Contains(string(obs.raw), "Place order") || obs.str("epoch_id") != nav.str("epoch_id") {
				t.Fatalf("observe lacks the page or its epoch (%s): %s", nav.str("epoch_id"), obs.raw)
			}
			q := must(200, "POST", base+"/query-nodes", "", map[string]any{"query": map[string]any{"label": "Full name"}})
			name, _ := q.body["nodes"].([]any)[0].(map[string]any)["node_id"].(string)
			must(200, "POST", base+"/act", k+"fill-name", map[string]any{"action": "fill", "node_id": name, "value": "Ada Lovelace"})
			must(200, "POST", base+"/act", k+"fill-email", map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "ada@example.com"})
			must(200, "POST", base+"/act", k+"select", map[string]any{"action": "select_option", "query": map[string]any{"label": "Country"}, "values": []string{"France"}})
			must(200, "POST", base+"/act", k+"terms", map[string]any{"action": "check", "query": map[string]any{"role": "checkbox", "name": "terms"}})
			click := must(200, "POST", base+"/act", k+"place", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}})
			if click.body["navigated"] != true || sh.orders.Load() != 1 || click.str("epoch_id") == nav.str("epoch_id") {
				t.Fatalf("click did not place the order in a new document (orders %d): %s", sh.orders.Load(), click.raw)
			}
			if b := sh.buyer.Load(); b == nil || *b != "Ada Lovelace" {
				t.Fatalf("the order's buyer is %v, want the typed name", b)
			}
			stale := s.call(t, "POST", base+"/act", k+"stale", map[string]any{"action": "click", "node_id": name})
			assertNoBiDiIDs(t, stale.raw)
			if stale.status != 409 || stale.str("code") != "stale_node_handle" {
				t.Fatalf("a handle of the previous document: %d %s, want 409 stale_node_handle", stale.status, stale.raw)
			}
			shot := must(200, "POST", base+"/evidence", k+"shot", map[string]any{"kinds": []string{"screenshot"}})
			if arts, _ := shot.body["artifacts"].([]any); len(arts) != 1 {
				t.Fatalf("capture_evidence: %s", shot.raw)
			}
			closed := must(200, "POST", "/bap/v1/tasks/"+taskID+"/close", k+"close", map[string]any{})
			if closed.str("task", "state") != "succeeded" || closed.str("task", "verification") != "verified" {
				t.Fatalf("close_task: %s", closed.raw)
			}
			var kinds []string
			for _, e := range closed.body["evidence"].([]any) {
				kinds = append(kinds, e.(map[string]any)["kind"].(string))
			}
			if strings.Join(kinds, ",") != strings.Join(tc.evidence, ",") {
				t.Fatalf("close_task evidence %v, want %v: %s", kinds, tc.evidence, closed.raw)
			}
			evs := must(200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
			if strings.Contains(string(evs.raw), "Ada Lovelace") {
				t.Fatalf("history holds filled values: %s", evs.raw)
			}
		})
	}
}

// openFirefoxSession finds a session open in the package's Firefox, if it started.
func openFirefoxSession(sessionID string) (*firefox.Session, bool) {
	if firefoxDrv == nil {
		return nil, false
	}
	return firefoxDrv.Session(sessionID)
}
