package spectest_test

import (
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/spectest"
)

// TestCheckIsStrict: the check refuses an undeclared field, a missing required one, a status the
// spec does not list and a media type it does not list; it admits the interrupted replay the
// contract gives (only the receipt, classified by recovery) because the operation's 200 schema
// does (oneOf with InterruptedCommandResponse), and nothing that merely looks like it.
func TestCheckIsStrict(t *testing.T) {
	t.Parallel()
	r, err := spectest.New(apigen.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	const receipt = `{"receipt_id":"rcp_01m8xar99h4zzrqc1h6rxbqq2c","command_id":"cmd_01m8xar7f332mma4zgnha7bq29",` +
		`"task_id":"tsk_01m8xar2wc9c4tz7tt8cy4fvxj","operation":"act","outcome":"%s","issued_at":"2026-12-03T06:51:29Z"}`
	rc := func(outcome string) string { return strings.Replace(receipt, "%s", outcome, 1) }
	act := "/bap/v1/browser-sessions/bs_01m8xar46dbd2std3bbz86f75z/act"
	cases := []struct {
		name, method, path, ctype, body string
		status                          int
		wantErr                         string // "" when the answer is admitted
	}{
		{"act result", "POST", act, "application/json", `{"receipt":` + rc("applied") + `,"epoch_id":"ep_1","navigated":false}`, 200, ""},
		{"undeclared field", "POST", act, "application/json", `{"receipt":` + rc("applied") + `,"epoch_id":"ep_1","navigated":false,"cdp_target":"X"}`, 200, "cdp_target"},
		{"missing field", "POST", act, "application/json", `{"receipt":` + rc("applied") + `,"navigated":false}`, 200, "epoch_id"},
		{"interrupted replay", "POST", act, "application/json", `{"receipt":` + rc("reconciliation_required") + `}`, 200, ""},
		{"receipt only but applied", "POST", act, "application/json", `{"receipt":` + rc("applied") + `}`, 200, "epoch_id"},
		{"interrupted replay of a safe command", "POST", act, "application/json", `{"receipt":` + rc("unknown_outcome") + `}`, 200, ""},
		{"interrupted replay with another field", "POST", act, "application/json", `{"receipt":` + rc("unknown_outcome") + `,"epoch_id":"ep_1"}`, 200, "navigated"},
		{"interrupted replay of cancel_task", "POST", "/bap/v1/tasks/tsk_x/cancel", "application/json", `{"receipt":` + rc("unknown_outcome") + `}`, 200, ""},
		{"interrupted replay of close_task", "POST", "/bap/v1/tasks/tsk_x/close", "application/json", `{"receipt":` + rc("unknown_outcome") + `}`, 200, "task"},
		{"unlisted status", "POST", act, "application/json", `{}`, 418, "418"},
		{"problem", "GET", "/bap/v1/tasks/tsk_x", "application/problem+json", `{"type":"about:blank","title":"Not found","status":404,"code":"not_found","detail":"no such task"}`, 404, ""},
		{"not JSON at all", "GET", "/bap/v1/tasks/tsk_x", "application/json", `{`, 200, "not JSON"},
		{"artifact bytes", "GET", "/bap/v1/artifacts/art_x", "application/json", `{"anything":1}`, 200, ""},
		{"outside the spec", "POST", "/mcp", "application/json", `{"jsonrpc":"2.0"}`, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := r.Check(c.method, c.path, c.status, c.ctype, []byte(c.body))
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.wantErr != "" && err == nil:
				t.Fatal("admitted")
			case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
				t.Fatalf("error %q does not name %q", err, c.wantErr)
			}
		})
	}
}
