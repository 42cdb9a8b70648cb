package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Resume after a crash (the brief's acceptance 5, issue #23 items 3 and 4): resume_task restores a
// valid checkpoint and refuses one taken by another software or protocol version (exactly: a patch
// release differs), under another policy, too old, or of another task; handles of the document
// epoch the checkpoint was taken in stay stale in the resumed session; and an approval that was
// pending when the node died and expired since is never brought back.

// crashNode makes the test's node look dead to recovery and marks its open sessions lost (their
// browsers went with the node), then brings the node back.
func crashNode(t *testing.T, s *stack, wantLost int) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.db.Exec(ctx, `UPDATE runtime_node SET stopped_at = now() WHERE node_id = 'node_e2e'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.svc.RecoverLostSessions(ctx, time.Now().Add(-time.Minute)); err != nil || n != wantLost {
		t.Fatalf("RecoverLostSessions = %d, %v; want %d sessions", n, err, wantLost)
	}
	if _, err := s.db.Exec(ctx, `UPDATE runtime_node SET stopped_at = NULL WHERE node_id = 'node_e2e'`); err != nil {
		t.Fatal(err)
	}
}

func TestResumeChecksAreExact(t *testing.T) {
	t.Parallel()
	s, sh := newStack(t), newShop(t)
	taskID, sid := signIn(t, s, sh, "exact")
	logout := s.query(t, sid, map[string]any{"role": "button", "name": "Log out"})
	chk := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/checkpoint", "exact-chk", nil).str("checkpoint", "checkpoint_id")
	other, osid := signIn(t, s, sh, "exact-other")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+osid+"/checkpoint", "exact-other-chk", nil)
	crashNode(t, s, 2)

	ctx := context.Background()
	var digest string
	if err := s.db.QueryRow(ctx, `SELECT policy_digest FROM task_checkpoint WHERE checkpoint_id = $1`, chk).Scan(&digest); err != nil {
		t.Fatal(err)
	}
	restore := `UPDATE task_checkpoint SET software_version = '1.2.3', protocol_version = '1.0.0', policy_digest = $2,
		created_at = now() WHERE checkpoint_id = $1`
	for _, tc := range []struct {
		name, task, breakIt, code, detail string
	}{
		{name: "software", task: taskID, breakIt: `UPDATE task_checkpoint SET software_version = '1.2.4' WHERE checkpoint_id = $1`,
			code: "checkpoint_incompatible", detail: "runtime 1.2.4; this is 1.2.3"},
		{name: "protocol", task: taskID, breakIt: `UPDATE task_checkpoint SET protocol_version = '1.0.1' WHERE checkpoint_id = $1`,
			code: "checkpoint_incompatible", detail: "BAP 1.0.1; this is 1.0.0"},
		{name: "policy", task: taskID, breakIt: `UPDATE task_checkpoint SET policy_digest = repeat('0', 64) WHERE checkpoint_id = $1`,
			code: "checkpoint_incompatible", detail: "another policy"},
		{name: "too-old", task: taskID, breakIt: `UPDATE task_checkpoint SET created_at = now() - interval '25 hours' WHERE checkpoint_id = $1`,
			code: "checkpoint_stale"},
		{name: "cross-task", task: other, code: "checkpoint_foreign"},
	} {
		if tc.breakIt != "" {
			if _, err := s.db.Exec(ctx, tc.breakIt, chk); err != nil {
				t.Fatal(err)
			}
		}
		r := s.call(t, "POST", "/bap/v1/tasks/"+tc.task+"/resume", "exact-"+tc.name, map[string]any{"checkpoint_id": chk})
		if r.status != 409 || r.str("code") != tc.code || !strings.Contains(r.str("detail"), tc.detail) || r.str("receipt", "outcome") != "rejected" {
			t.Errorf("%s: %d %s, want 409 %s (%q)", tc.name, r.status, r.raw, tc.code, tc.detail)
		}
		if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+tc.task, "", nil).str("task", "state"); st != "checkpointed" {
			t.Errorf("%s: task %s after a refused resume, want checkpointed", tc.name, st)
		}
		if _, err := s.db.Exec(ctx, restore, chk, digest); err != nil {
			t.Fatal(err)
		}
	}

	// The valid checkpoint resumes; the document epoch it was taken in is gone for good.
	res := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/resume", "exact-resume", map[string]any{"checkpoint_id": chk})
	newSID := res.str("session", "session_id")
	if res.str("task", "state") != "running" || newSID == sid {
		t.Fatalf("resume: %s", res.raw)
	}
	// On the lost session it is refused with the session; in the resumed one it is stale (its
	// record says its session was lost, issue #23 item 1), never 404, and is recorded as a
	// rejected command.
	if r := s.call(t, "POST", "/bap/v1/browser-sessions/"+sid+"/act", "exact-stale-old", map[string]any{"action": "click", "node_id": logout}); r.status != 409 || r.str("code") != "browser_session_lost" {
		t.Fatalf("a handle of the checkpoint's epoch on the lost session: %d %s, want 409 browser_session_lost", r.status, r.raw)
	}
	r := s.call(t, "POST", "/bap/v1/browser-sessions/"+newSID+"/act", "exact-stale", map[string]any{"action": "click", "node_id": logout})
	if r.status != 409 || r.str("code") != "stale_node_handle" || r.str("reason") != "session_lost" || r.str("receipt", "outcome") != "rejected" {
		t.Fatalf("a handle of the checkpoint's epoch in the resumed session: %d %s, want 409 stale_node_handle (session_lost)", r.status, r.raw)
	}
	if got := s.pageText(t, newSID); !strings.Contains(got, "signed in: "+signedInAs) {
		t.Fatalf("the resumed session is not signed in (the stale handle clicked Log out?): %q", got)
	}
}

// The node dies while an approval is pending (its held click died with the browser); the approval
// expires; the task, left without sessions, waits in checkpointed; resume_task restores the
// checkpoint taken before the approval was requested and never brings the approval back: it stays
// expired (resolving it is 409 approval_not_pending), nothing is pending, no approval is requested
// again, and the held click never reaches the shop. No checkpoint can be taken while an approval
// is pending, so none ever holds one.
func TestResumeNeverRevivesAnApproval(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	clk := &clock{}
	s := newStack(t, clk.config())
	op := s.operator()
	taskID, sess := heldShopTask(t, s, sh, "revive", map[string]any{"ttl": "PT2M"})
	fillCheckout(t, s, sess, "revive-1")
	chk := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/checkpoint", "revive-chk", nil).str("checkpoint", "checkpoint_id")
	apr := s.must(t, 202, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "revive-click", placeOrder).str("approval", "approval_id")
	if r := s.call(t, "POST", "/bap/v1/browser-sessions/"+sess+"/checkpoint", "revive-chk-2", nil); r.status != 409 || r.str("code") != "invalid_transition" {
		t.Fatalf("checkpoint while an approval is pending: %d %s, want 409 invalid_transition", r.status, r.raw)
	}

	crashNode(t, s, 1)
	if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "waiting_for_approval" {
		t.Fatalf("task %s after the crash, want waiting_for_approval", st)
	}
	clk.advance(2*time.Minute + time.Second)
	if n, err := s.svc.ExpireApprovals(context.Background()); err != nil || n != 1 {
		t.Fatalf("ExpireApprovals = %d, %v; want 1", n, err)
	}
	if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "checkpointed" {
		t.Fatalf("task %s once its approval expired without sessions, want checkpointed", st)
	}
	before := len(s.events(t, taskID))

	res := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/resume", "revive-resume", map[string]any{"checkpoint_id": chk})
	if res.str("task", "state") != "running" {
		t.Fatalf("resume: %s", res.raw)
	}
	late := op.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "revive-approve", map[string]any{"decision": "approve"})
	if late.status != 409 || late.str("code") != "approval_not_pending" || !strings.Contains(late.str("detail"), "expired") {
		t.Fatalf("approving the expired approval after resume: %d %s, want 409 approval_not_pending (expired)", late.status, late.raw)
	}
	if p := op.must(t, 200, "GET", "/bap/v1/approvals", "", nil); len(p.body["approvals"].([]any)) != 0 {
		t.Fatalf("pending approvals after resume: %s", p.raw)
	}
	if l := op.must(t, 200, "GET", "/bap/v1/approvals?state=expired", "", nil); !strings.Contains(string(l.raw), apr) {
		t.Fatalf("approval %s is not listed expired after resume: %s", apr, l.raw)
	}
	if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "running" {
		t.Fatalf("task %s after resume, want running", st)
	}
	for _, e := range s.events(t, taskID)[before:] {
		if e["type"] == "approval.requested" {
			t.Fatalf("resume requested an approval again: %v", e)
		}
	}
	if sh.orders.Load() != 0 {
		t.Fatalf("the held click reached the shop: %d orders", sh.orders.Load())
	}
}
