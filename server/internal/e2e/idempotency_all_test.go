package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/waitfor"
)

// Every mutating operation, 100 times with one key (the brief's acceptance 3, issue #23 item 8):
// each of the 12 mutating operations of CONTRACT is sent 100 times at once with one
// Idempotency-Key. Each request is answered with the first response (same status, same bytes,
// Idempotent-Replayed on all but the one that ran it) or 409 idempotency_in_flight while the first
// still runs; the command is recorded once, and its effect happens once. The operations added since
// (handoff, secrets) are held to the same below.

// sameKeyAnswer is one of the concurrent answers.
type sameKeyAnswer struct {
	status   int
	raw      []byte
	replayed bool
}

// sendSameKey sends one request with key as s's caller; a transport error is status 0.
func (s *stack) sendSameKey(method, path, key string, body any) sameKeyAnswer {
	b, _ := json.Marshal(body)
	client, base := s.endpoint()
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, bytes.NewReader(b))
	if err != nil {
		return sameKeyAnswer{raw: []byte(err.Error())}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return sameKeyAnswer{raw: []byte(err.Error())}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return sameKeyAnswer{status: resp.StatusCode, raw: raw, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}

// hundredTimes sends the request 100 times concurrently with one key, then once more after all
// answered (the key has settled), and checks every answer against that last one. It returns it.
func (s *stack) hundredTimes(t *testing.T, wantStatus int, path, key string, body any) reply {
	t.Helper()
	answers := make([]sameKeyAnswer, 100)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = s.sendSameKey("POST", path, key, body)
		}()
	}
	wg.Wait()
	var final sameKeyAnswer
	// Every sender has its answer; only the first command's own finish is awaited.
	waitfor.Holds(t, 30*time.Second, func() bool {
		final = s.sendSameKey("POST", path, key, body)
		return final.status != 409 || !bytes.Contains(final.raw, []byte(`"idempotency_in_flight"`))
	})
	if final.status != wantStatus || !final.replayed {
		t.Fatalf("%s: the settled answer is %d (replayed %v) %s, want a replayed %d", path, final.status, final.replayed, final.raw, wantStatus)
	}
	ran := 0
	for _, a := range answers {
		switch {
		case a.status == 409 && bytes.Contains(a.raw, []byte(`"idempotency_in_flight"`)):
		case a.status != final.status || !bytes.Equal(a.raw, final.raw):
			t.Fatalf("%s: an answer differs from the first response: %d %s\nwant %d %s", path, a.status, a.raw, final.status, final.raw)
		case !a.replayed:
			ran++
		}
	}
	if ran > 1 {
		t.Fatalf("%s: %d answers were not replays; the command ran more than once", path, ran)
	}
	r := reply{status: final.status, raw: final.raw}
	_ = json.Unmarshal(final.raw, &r.body)
	return r
}

func TestEveryMutatingOperationHundredTimesOneKey(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	op := s.operator()
	ctx := context.Background()
	count := func(sql string, args ...any) int {
		t.Helper()
		var n int
		if err := s.db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	commands := func(taskID, operation string) int {
		t.Helper()
		return count(`SELECT count(*) FROM task_command WHERE task_id = $1 AND operation = $2`, taskID, operation)
	}
	policy := map[string]any{"allowed_origins": []string{sh.srv.URL}}

	// create_task: one task.
	task := s.hundredTimes(t, 201, "/bap/v1/tasks", "all-create-task", map[string]any{"goal": "once, however often asked", "policy": policy})
	taskID := task.str("task", "task_id")
	if n := count(`SELECT count(*) FROM agent_task WHERE goal = 'once, however often asked'`); n != 1 {
		t.Fatalf("create_task: %d tasks", n)
	}
	// create_browser_session: one session.
	sess := s.hundredTimes(t, 201, "/bap/v1/tasks/"+taskID+"/browser-sessions", "all-create-session", map[string]any{}).str("session", "session_id")
	base := "/bap/v1/browser-sessions/" + sess
	// navigate: one navigation of the shop's checkout.
	before := sh.hits.Load()
	s.hundredTimes(t, 200, base+"/navigate", "all-navigate", map[string]any{"url": sh.srv.URL + "/checkout"})
	if got := count(`SELECT count(*) FROM agent_task_event WHERE task_id = $1 AND event_type = 'navigation.committed'`, taskID); got != 1 || sh.hits.Load()-before < 1 {
		t.Fatalf("navigate: %d committed navigations, %d shop hits", got, sh.hits.Load()-before)
	}
	fillCheckout(t, s, sess, "all")
	// act: one order.
	s.hundredTimes(t, 200, base+"/act", "all-act", placeOrder)
	if sh.orders.Load() != 1 {
		t.Fatalf("act: %d orders", sh.orders.Load())
	}
	// capture_evidence: one screenshot.
	s.hundredTimes(t, 200, base+"/evidence", "all-evidence", map[string]any{"kinds": []string{"screenshot"}})
	if n := count(`SELECT count(*) FROM artifact_reference WHERE task_id = $1 AND kind = 'screenshot'`, taskID); n != 1 {
		t.Fatalf("capture_evidence: %d screenshots", n)
	}
	// checkpoint_browser_session: one checkpoint.
	chk := s.hundredTimes(t, 200, base+"/checkpoint", "all-checkpoint", map[string]any{}).str("checkpoint", "checkpoint_id")
	if n := count(`SELECT count(*) FROM task_checkpoint WHERE task_id = $1`, taskID); n != 1 {
		t.Fatalf("checkpoint_browser_session: %d checkpoints", n)
	}
	// request_approval: one approval; resolve_approval (the operator): one decision.
	apr := s.hundredTimes(t, 201, "/bap/v1/tasks/"+taskID+"/approvals", "all-request-approval", map[string]any{"reason": "once"}).str("approval", "approval_id")
	op.hundredTimes(t, 200, "/bap/v1/approvals/"+apr+"/resolve", "all-resolve", map[string]any{"decision": "approve"})
	if a, d := count(`SELECT count(*) FROM approval_request WHERE task_id = $1`, taskID), count(`SELECT count(*) FROM approval_decision WHERE approval_id = $1`, apr); a != 1 || d != 1 {
		t.Fatalf("request_approval/resolve_approval: %d approvals, %d decisions", a, d)
	}
	// close_browser_session: closed once.
	s.hundredTimes(t, 200, base+"/close", "all-close-session", map[string]any{})
	if n := count(`SELECT count(*) FROM agent_task_event WHERE task_id = $1 AND event_type = 'browser_session.closed'`, taskID); n != 1 {
		t.Fatalf("close_browser_session: %d closed events", n)
	}
	// resume_task: one restored session (the task's next session is lost with its node first).
	s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "all-second-session", map[string]any{})
	crashNode(t, s, 1)
	s.hundredTimes(t, 200, "/bap/v1/tasks/"+taskID+"/resume", "all-resume", map[string]any{"checkpoint_id": chk})
	if n := count(`SELECT count(*) FROM browser_session WHERE task_id = $1 AND from_checkpoint_id = $2`, taskID, chk); n != 1 {
		t.Fatalf("resume_task: %d restored sessions", n)
	}
	// close_task: closed once, its evidence stored once.
	closed := s.hundredTimes(t, 200, "/bap/v1/tasks/"+taskID+"/close", "all-close-task", map[string]any{})
	evidence, _ := closed.body["evidence"].([]any)
	if n := count(`SELECT count(*) FROM artifact_reference a JOIN task_command c ON c.command_id = a.command_id
		WHERE c.task_id = $1 AND c.operation = 'close_task' AND a.kind <> 'result_manifest'`, taskID); n != len(evidence) {
		t.Fatalf("close_task: %d evidence artifacts stored, %d in its answer", n, len(evidence))
	}
	// and its result (with its manifest) recorded once (ADR 0019).
	if n := count(`SELECT count(*) FROM task_result r JOIN artifact_reference a ON a.artifact_id = r.manifest_artifact_id
		WHERE r.task_id = $1`, taskID); n != 1 {
		t.Fatalf("close_task: %d results recorded", n)
	}
	// cancel_task, on a second task: cancelled once.
	other := s.must(t, 201, "POST", "/bap/v1/tasks", "all-other", map[string]any{"goal": "cancel me", "policy": policy}).str("task", "task_id")
	s.hundredTimes(t, 200, "/bap/v1/tasks/"+other+"/cancel", "all-cancel", map[string]any{})

	for _, c := range []struct {
		task, operation string
		want            int
	}{
		{taskID, "create_browser_session", 2}, // the hundred, and the session lost before resume
		{taskID, "navigate", 1}, {taskID, "capture_evidence", 1}, {taskID, "checkpoint_browser_session", 1},
		{taskID, "request_approval", 1}, {taskID, "resolve_approval", 1}, {taskID, "close_browser_session", 1},
		{taskID, "resume_task", 1}, {taskID, "close_task", 1}, {other, "cancel_task", 1},
	} {
		if n := commands(c.task, c.operation); n != c.want {
			t.Errorf("%s: %d commands recorded, want %d", c.operation, n, c.want)
		}
	}
	for _, state := range []struct{ task, to string }{{taskID, "succeeded"}, {other, "cancelled"}} {
		if n := count(`SELECT count(*) FROM agent_task_event WHERE task_id = $1 AND event_type = 'task.state_changed' AND data->>'to' = $2`, state.task, state.to); n != 1 {
			t.Errorf("task %s: %d transitions to %s, want 1", state.task, n, state.to)
		}
	}
}

// The operations added since the brief's twelve, 100 times with one key each: the operator's
// take_over_task opens one handoff, hand_back_task returns it once (issue #23 item 8).
func TestHandoffOperationsHundredTimesOneKey(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	op := s.operator()
	ctx := context.Background()
	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "all-ho-task", map[string]any{
		"goal": "hand it over once", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}}}).str("task", "task_id")
	sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "all-ho-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/navigate", "all-ho-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	op.hundredTimes(t, 200, "/bap/v1/tasks/"+taskID+"/take_over", "all-take-over", map[string]any{"session_id": sess, "lease_seconds": 600})
	op.hundredTimes(t, 200, "/bap/v1/tasks/"+taskID+"/hand_back", "all-hand-back", map[string]any{})
	var handoffs, returned, commands int
	if err := s.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'returned') FROM task_handoff WHERE task_id = $1`, taskID).
		Scan(&handoffs, &returned); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM task_command WHERE task_id = $1 AND operation IN ('take_over_task', 'hand_back_task')`, taskID).
		Scan(&commands); err != nil {
		t.Fatal(err)
	}
	if handoffs != 1 || returned != 1 || commands != 2 {
		t.Fatalf("%d handoffs (%d returned), %d take_over/hand_back commands; want one handoff, returned once, 2 commands", handoffs, returned, commands)
	}
}

// The operator's secrets commands, 100 times with one key each: one secret, rotated once (version
// 2), deleted once (issue #23 item 8). Their value is in no answer.
func TestSecretOperationsHundredTimesOneKey(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	op := s.operator()
	ctx := context.Background()
	const value, rotated = "canary-first-value-7f3a", "canary-rotated-value-91c2"
	created := op.hundredTimes(t, 201, "/bap/v1/secrets", "all-secret-create", map[string]any{
		"name": "shop-login", "origins": []string{"https://shop.example.com"}, "value": value})
	id := created.str("secret", "secret_id")
	rot := op.hundredTimes(t, 200, "/bap/v1/secrets/"+id+"/rotate", "all-secret-rotate", map[string]any{"value": rotated})
	del := op.hundredTimes(t, 200, "/bap/v1/secrets/"+id+"/delete", "all-secret-delete", map[string]any{})
	var secrets, version int
	var deleted bool
	if err := s.db.QueryRow(ctx, `SELECT count(*), max(version), bool_and(deleted_at IS NOT NULL) FROM tenant_secret WHERE name = 'shop-login'`).
		Scan(&secrets, &version, &deleted); err != nil {
		t.Fatal(err)
	}
	if secrets != 1 || version != 2 || !deleted {
		t.Fatalf("%d secrets, version %d, deleted %v; want one, rotated once (2), deleted", secrets, version, deleted)
	}
	for _, r := range []reply{created, rot, del} {
		if bytes.Contains(r.raw, []byte("canary-")) {
			t.Fatalf("a secret's value in an answer: %s", r.raw)
		}
	}
}
