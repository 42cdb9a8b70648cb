package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/page"
)

// chromiumVersion is the version the shared browser reports ("131.0.6778.85" of
// "Chrome/131.0.6778.85").
func chromiumVersion(t *testing.T) string {
	t.Helper()
	product, _ := shared.Version()
	i := strings.LastIndexByte(product, '/')
	if i < 0 || i == len(product)-1 {
		t.Fatalf("browser product %q has no version", product)
	}
	return product[i+1:]
}

// create_browser_session {engine} (issue #19 item 3): the default and an explicit chromium open
// a session that reports its engine and the browser's real version, in its response and its
// browser_session.opened event; an engine of the spec the node does not run answers 503 naming
// it, and a name the spec does not list 400 — neither recorded as a command.
func TestCreateBrowserSessionChoosesItsEngine(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	version := chromiumVersion(t)
	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "engines-task", map[string]any{
		"goal": "open sessions on engines", "policy": map[string]any{"allowed_origins": []string{"http://127.0.0.1:*"}},
	}).str("task", "task_id")
	sessions := "/bap/v1/tasks/" + taskID + "/browser-sessions"
	cases := []struct {
		name   string
		body   map[string]any
		status int
		code   string // of a refusal
		detail string // a refusal's detail contains it
	}{
		{name: "default", body: map[string]any{}, status: 201},
		{name: "chromium", body: map[string]any{"engine": "chromium"}, status: 201},
		{name: "firefox", body: map[string]any{"engine": "firefox"}, status: 503, code: "browser_unavailable", detail: "firefox"},
		{name: "unknown", body: map[string]any{"engine": "webkit"}, status: 400, code: "invalid_request"},
		{name: "empty", body: map[string]any{"engine": ""}, status: 400, code: "invalid_request"},
	}
	opened := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := s.must(t, tc.status, "POST", sessions, "engine-"+tc.name, tc.body)
			if tc.status != 201 {
				if r.str("code") != tc.code || !strings.Contains(r.str("detail"), tc.detail) {
					t.Fatalf("refusal %s, want %s naming %q", r.raw, tc.code, tc.detail)
				}
				var n int
				if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`,
					"engine-"+tc.name).Scan(&n); err != nil || n != 0 {
					t.Fatalf("the refusal was recorded under its key (%d rows, %v)", n, err)
				}
				return
			}
			if r.str("session", "engine") != "chromium" || r.str("session", "engine_version") != version {
				t.Fatalf("session %s, want engine chromium at version %s", r.raw, version)
			}
			sid := r.str("session", "session_id")
			opened[sid] = true
			var engine, engineVersion string
			if err := s.db.QueryRow(context.Background(), `SELECT engine, engine_version FROM browser_session WHERE session_id = $1`, sid).
				Scan(&engine, &engineVersion); err != nil || engine != "chromium" || engineVersion != version {
				t.Fatalf("browser_session row: %q %q %v", engine, engineVersion, err)
			}
		})
	}
	evs := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	seen := 0
	for _, e := range evs.body["events"].([]any) {
		ev := e.(map[string]any)
		if ev["type"] != "browser_session.opened" {
			continue
		}
		data := ev["data"].(map[string]any)
		if !opened[data["session_id"].(string)] || data["engine"] != "chromium" || data["engine_version"] != version {
			t.Fatalf("browser_session.opened data %v, want engine chromium at %s", data, version)
		}
		seen++
	}
	if seen != 2 {
		t.Fatalf("%d browser_session.opened events, want 2: %s", seen, evs.raw)
	}
}

// A checkpoint records its session's engine and restores only into it (issue #19 item 3): its
// recorded engine forged to firefox, restoring it into chromium answers 409
// checkpoint_incompatible (recorded: the receipt is rejected), and restoring it without engine
// asks for firefox, which this node does not run (503 naming it).
func TestCheckpointRestoresOnlyIntoItsEngine(t *testing.T) {
	t.Parallel()
	s, sh := newStack(t), newShop(t)
	taskID, sid := openShop(t, s, sh, "cp-engine")
	cp := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/checkpoint", "cp-engine-chk", map[string]any{})
	chk := cp.str("checkpoint", "checkpoint_id")
	if cp.str("checkpoint", "engine") != "chromium" {
		t.Fatalf("checkpoint %s, want engine chromium", cp.raw)
	}
	sessions := "/bap/v1/tasks/" + taskID + "/browser-sessions"
	// Forge the engine the checkpoint was taken on.
	if _, err := s.db.Exec(context.Background(), `UPDATE browser_session SET engine = 'firefox' WHERE session_id = $1`, sid); err != nil {
		t.Fatal(err)
	}
	r := s.must(t, 409, "POST", sessions, "cp-engine-into-chromium", map[string]any{"from_checkpoint": chk, "engine": "chromium"})
	if r.str("code") != "checkpoint_incompatible" || !strings.Contains(r.str("detail"), "firefox") {
		t.Fatalf("restoring a firefox checkpoint into chromium: %s", r.raw)
	}
	var outcome string
	if err := s.db.QueryRow(context.Background(), `SELECT r.outcome FROM task_receipt r JOIN task_command c ON c.command_id = r.command_id
		JOIN idempotency_record k ON k.command_id = c.command_id WHERE k.idempotency_key = 'cp-engine-into-chromium'`).Scan(&outcome); err != nil || outcome != "rejected" {
		t.Fatalf("the refused restore's receipt: %q %v, want rejected", outcome, err)
	}
	r = s.must(t, 503, "POST", sessions, "cp-engine-default", map[string]any{"from_checkpoint": chk})
	if r.str("code") != "browser_unavailable" || !strings.Contains(r.str("detail"), "firefox") {
		t.Fatalf("restoring a firefox checkpoint on a chromium node: %s", r.raw)
	}
	// Back on its real engine, the same checkpoint restores.
	if _, err := s.db.Exec(context.Background(), `UPDATE browser_session SET engine = 'chromium' WHERE session_id = $1`, sid); err != nil {
		t.Fatal(err)
	}
	r = s.must(t, 201, "POST", sessions, "cp-engine-ok", map[string]any{"from_checkpoint": chk, "engine": "chromium"})
	if r.str("session", "engine") != "chromium" || r.str("session", "from_checkpoint") != chk {
		t.Fatalf("restored session %s", r.raw)
	}
}

// An operation the session's engine cannot do answers 501 engine_capability_unsupported, before
// it is recorded (issue #19 items 2 and 3): a Chromium whose registry entry is narrowed to no
// capability refuses dom_snapshot evidence, upload_file and the live view, still takes the
// screenshot, and a task whose policy holds form submissions cannot open a session on it.
func TestOperationsAnEngineLacksAnswer501(t *testing.T) {
	t.Parallel()
	bare := daemon.ChromiumAdapter()
	bare.Capabilities = nil
	s := newStack(t, func(c *app.Config) {
		c.Browser = daemon.NewEngines(daemon.RunningEngine{Adapter: bare, Browser: daemon.BrowserPort{Browser: shared}})
	})
	sh := newShop(t)
	_, sid := openShop(t, s, sh, "bare")
	base := "/bap/v1/browser-sessions/" + sid
	shot := s.must(t, 200, "POST", base+"/evidence", "bare-shot", map[string]any{"kinds": []string{"screenshot"}})
	artID := shot.body["artifacts"].([]any)[0].(map[string]any)["artifact_id"].(string)
	s.must(t, 200, "POST", base+"/navigate", "bare-upload-page", map[string]any{"url": sh.srv.URL + "/upload"})
	refusals := []struct {
		name, path string
		body       map[string]any
		capability string
	}{
		{"dom_snapshot", base + "/evidence", map[string]any{"kinds": []string{"screenshot", "dom_snapshot"}}, "mhtml_evidence"},
		{"upload_file", base + "/act", map[string]any{"action": "upload_file", "query": map[string]any{"label": "Document"}, "artifact_id": artID}, "file_upload"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			r := s.must(t, 501, "POST", tc.path, "bare-"+tc.name, tc.body)
			if r.str("code") != "engine_capability_unsupported" || !strings.Contains(r.str("detail"), tc.capability) {
				t.Fatalf("%s on an engine without %s: %s", tc.name, tc.capability, r.raw)
			}
			var n int
			if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`,
				"bare-"+tc.name).Scan(&n); err != nil || n != 0 {
				t.Fatalf("the refusal was recorded under its key (%d rows, %v)", n, err)
			}
		})
	}
	t.Run("live_view", func(t *testing.T) {
		err := s.svc.WatchSession(context.Background(), app.Actor{Tenant: "local", Subject: "operator:local"}, sid,
			func(page.LiveFrame) error { return errors.New("no frame may be sent") })
		var e *app.Error
		if !errors.As(err, &e) || e.Code != app.CodeEngineCapabilityUnsupported || !strings.Contains(e.Detail, "live_view") {
			t.Fatalf("live view on an engine without live_view: %v", err)
		}
	})
	t.Run("request_holds", func(t *testing.T) {
		taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "bare-holds-task", map[string]any{
			"goal": "submit a form under approval", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL},
				"approval_rules": []any{map[string]any{"effect": "form_submission"}}},
		}).str("task", "task_id")
		r := s.must(t, 501, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "bare-holds", map[string]any{})
		if r.str("code") != "engine_capability_unsupported" || !strings.Contains(r.str("detail"), "request_holds") {
			t.Fatalf("a form_submission task on an engine without request holds: %s", r.raw)
		}
	})
	info := s.must(t, 200, "GET", "/bap/v1", "", nil)
	engines, _ := info.body["engines"].([]any)
	if len(engines) != 1 {
		t.Fatalf("GET /bap/v1 engines: %s", info.raw)
	}
	e := engines[0].(map[string]any)
	if e["engine"] != "chromium" || e["adapter_id"] != "cdp" || e["default"] != true || e["available"] != true ||
		e["version"] != chromiumVersion(t) || len(e["capabilities"].([]any)) != 0 {
		t.Fatalf("GET /bap/v1 engine %v, want the narrowed chromium with its version", e)
	}
}
