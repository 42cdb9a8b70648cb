package app_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
)

// A key whose first answer is recorded gets that answer before anything of the present is
// checked: here the browser is gone (the service has none), which a first request meets as 503
// browser_unavailable, and a retry must still get its first answer. A key recorded with another
// body, or still in flight, gets no replay from this shortcut (its command's claim answers it).
func TestReplayComesBeforeThePresent(t *testing.T) {
	ctx := context.Background()
	b := setup(t)
	const session = "bs_replay0001"
	ops := []struct {
		op   string
		run  func(app.Call) (app.Response, error)
		body any
	}{
		{"act", func(c app.Call) (app.Response, error) {
			return b.svc.Act(ctx, c, session, page.ActRequest{Action: "click", NodeID: "nd_gone"}, "", 0, &recorder[*app.ActOutcome]{})
		}, map[string]any{"action": "click", "node_id": "nd_gone"}},
		{"navigate", func(c app.Call) (app.Response, error) {
			return b.svc.Navigate(ctx, c, session, page.NavigateRequest{URL: "https://example.com/"}, 0, &recorder[*app.NavigateResult]{})
		}, map[string]any{"url": "https://example.com/"}},
		{"capture_evidence", func(c app.Call) (app.Response, error) {
			return b.svc.CaptureEvidence(ctx, c, session, app.EvidenceRequest{}, &recorder[*app.EvidenceResult]{})
		}, map[string]any{}},
		{"checkpoint_browser_session", func(c app.Call) (app.Response, error) {
			return b.svc.CheckpointBrowserSession(ctx, c, session, &recorder[*app.CheckpointResult]{})
		}, map[string]any{}},
		{"create_browser_session", func(c app.Call) (app.Response, error) {
			return b.svc.CreateBrowserSession(ctx, c, "tsk_replay0001", app.SessionRequest{}, &recorder[*app.SessionResult]{})
		}, map[string]any{}},
		{"hand_back_task", func(c app.Call) (app.Response, error) {
			return b.svc.HandBackTask(ctx, c, "tsk_replay0001", &recorder[*app.HandoffResult]{})
		}, map[string]any{}},
		{"replay_task", func(c app.Call) (app.Response, error) { // reads the task and its archive first
			return b.svc.ReplayTask(ctx, c, "tsk_replay0001", app.ReplayArchive, &recorder[*app.TaskResult]{})
		}, map[string]any{}},
	}
	record := func(t *testing.T, c app.Call, completed bool) {
		t.Helper()
		state, status, body, done := "in_flight", any(nil), any(nil), any(nil)
		if completed {
			state, status, body, done = "completed", 202, []byte(`{"first":"answer"}`), time.Now()
		}
		if _, err := b.db.Exec(ctx, `INSERT INTO idempotency_record (tenant_id, idempotency_key, operation, request_hash,
			request_hash_scheme, state, command_id, node_id, response_status, response_body, completed_at, expires_at)
			VALUES ($1, $2, $3, $4, 'hmac-sha256', $5, 'cmd_replay0001', 'node_test', $6, $7, $8, now() + interval '1 day')`,
			c.Actor.Tenant, c.IdempotencyKey, c.Operation, c.Fingerprint[:], state, status, body, done); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range ops {
		t.Run(tc.op, func(t *testing.T) {
			target := []string{session}
			if tc.op == "hand_back_task" || tc.op == "create_browser_session" || tc.op == "replay_task" {
				target = []string{"tsk_replay0001"}
			}
			// Completed with this body: the first answer, as a replay.
			first := b.call(t, tc.op, target, tc.body)
			record(t, first, true)
			resp, err := tc.run(first)
			if err != nil || !resp.Replayed || resp.Status != 202 || string(resp.Body) != `{"first":"answer"}` {
				t.Fatalf("retry of a completed key: %+v, %v; want the first answer replayed", resp, err)
			}
			// Completed with another body, and in flight: no replay here; the command runs and
			// meets the missing browser.
			other := b.call(t, tc.op, target, map[string]any{"other": true}, first.IdempotencyKey)
			inFlight := b.call(t, tc.op, target, tc.body)
			record(t, inFlight, false)
			for name, c := range map[string]app.Call{"another body": other, "in flight": inFlight} {
				resp, err := tc.run(c)
				var e *app.Error
				if tc.op == "replay_task" { // its present is the task it names, which does not exist
					if resp.Replayed || !errors.Is(err, app.ErrNotFound) {
						t.Errorf("%s: %+v, %v; want no replay and not found", name, resp, err)
					}
					continue
				}
				if resp.Replayed || !errors.As(err, &e) || e.Code != app.CodeBrowserUnavailable {
					t.Errorf("%s: %+v, %v; want no replay and browser_unavailable", name, resp, err)
				}
			}
		})
	}
}
