package e2e

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
	"github.com/originweave/bap/server/internal/waitfor"
	"github.com/originweave/bap/server/internal/worker"
)

// Delegated mode (ADR 0011): a task created with a plan is run by the workers in the background,
// step by step, as BAP commands of the actor worker:<node>, and closed by its postcondition.

// startWorkers runs s's plan workers until the test ends, with short backoffs.
func (s *stack) startWorkers(t *testing.T) *worker.Workers {
	t.Helper()
	w := worker.New(s.svc, s.orch, worker.Config{Workers: 2, LeaseTTL: 10 * time.Second, Poll: 100 * time.Millisecond,
		BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, Logger: testLogger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// awaitState polls get_task until the task is in one of states (generous: a loaded machine).
func (s *stack) awaitState(t *testing.T, taskID string, states ...string) reply {
	t.Helper()
	var r reply
	if waitfor.Holds(t, 120*time.Second, func() bool {
		r = s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil)
		return slices.Contains(states, r.str("task", "state"))
	}) {
		return r
	}
	evs := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	t.Fatalf("task %s is %s after 120 s, want %v; history: %s", taskID, r.str("task", "state"), states, evs.raw)
	return r
}

// history reads a task's whole history and checks it is gap-free (seq 1, 2, 3, …, each once).
func (s *stack) history(t *testing.T, taskID string) []map[string]any {
	t.Helper()
	r := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	var body struct {
		Events []map[string]any `json:"events"`
	}
	if err := json.Unmarshal(r.raw, &body); err != nil {
		t.Fatal(err)
	}
	for i, e := range body.Events {
		if seq, _ := e["seq"].(float64); int(seq) != i+1 {
			t.Fatalf("event %d has seq %v: %s", i, e["seq"], r.raw)
		}
	}
	return body.Events
}

func ofType(evs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, e := range evs {
		if e["type"] == typ {
			out = append(out, e)
		}
	}
	return out
}

func data(e map[string]any) map[string]any { d, _ := e["data"].(map[string]any); return d }

// A plan places an order on the shop: every step runs once, in order, with progress events; each
// side effect is followed by a checkpoint; the task closes succeeded (verified) by its
// postcondition, and what the read steps returned is kept as artifacts.
func TestDelegatedPlanRunsToSucceeded(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	w := s.startWorkers(t)
	plan := []map[string]any{
		{"op": "navigate", "args": map[string]any{"url": sh.srv.URL + "/checkout"}},
		{"op": "observe", "args": map[string]any{}},
		{"op": "act", "args": map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Ada Lovelace"}},
		{"op": "act", "args": map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "ada@example.com"}},
		{"op": "act", "args": map[string]any{"action": "check", "query": map[string]any{"role": "checkbox"}}},
		{"op": "act", "args": map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}}},
		{"op": "extract", "args": map[string]any{"kind": "text"}},
		{"op": "capture_evidence", "args": map[string]any{"kinds": []string{"screenshot"}}},
	}
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "plan-ok", map[string]any{
		"goal": "place an order in the background", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you for your order 1"}}},
		"plan":          plan,
	})
	taskID := r.str("task", "task_id")
	if r.body["task"].(map[string]any)["delegated"] != true {
		t.Fatalf("create_task: %s", r.raw)
	}
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" || done.str("task", "verification") != "verified" {
		t.Fatalf("task: %s", done.raw)
	}
	if n := sh.orders.Load(); n != 1 {
		t.Fatalf("%d orders placed, want 1", n)
	}

	evs := s.history(t, taskID)
	started, finished := ofType(evs, "plan.step_started"), ofType(evs, "plan.step_finished")
	if len(started) != len(plan) || len(finished) != len(plan) {
		t.Fatalf("%d step_started and %d step_finished events for %d steps", len(started), len(finished), len(plan))
	}
	var extracted string
	for i, e := range finished {
		d := data(e)
		if d["index"] != float64(i) || d["op"] != plan[i]["op"] || d["succeeded"] != true || d["attempt"] != float64(1) {
			t.Fatalf("step_finished %d: %v", i, d)
		}
		if a, _ := e["actor"].(map[string]any); a["kind"] != "worker" || a["id"] != "node_e2e" {
			t.Fatalf("step_finished %d actor: %v", i, e["actor"])
		}
		switch plan[i]["op"] {
		case "act", "navigate", "capture_evidence":
			if d["receipt_id"] == nil {
				t.Fatalf("step %d has no receipt: %v", i, d)
			}
		}
		if plan[i]["op"] == "extract" {
			extracted, _ = d["artifact_id"].(string)
		}
	}
	if cps := ofType(evs, "checkpoint.created"); len(cps) != 4 {
		t.Fatalf("%d checkpoints, want one after each of the 4 acts", len(cps))
	}
	// Steps ran in order: each started after the previous one finished.
	last := 0.0
	for _, e := range evs {
		if e["type"] == "plan.step_started" {
			if data(e)["index"].(float64) < last {
				t.Fatalf("steps out of order: %v", e)
			}
			last = data(e)["index"].(float64)
		}
	}
	status, _, text := s.getRaw(t, "/bap/v1/artifacts/"+extracted)
	if status != 200 || !strings.Contains(string(text), "Thank you for your order 1") {
		t.Fatalf("the extract step's artifact: %d %s", status, text)
	}
	// Filled values are protected: never in the history.
	raw, _ := json.Marshal(evs)
	if strings.Contains(string(raw), "Ada Lovelace") {
		t.Fatal("the history holds a filled value")
	}
	var leaseDone bool
	var doneSteps int
	if err := s.db.QueryRow(context.Background(), `SELECT finished_at IS NOT NULL AND owner_node IS NULL,
		(SELECT count(*) FROM plan_step_progress p WHERE p.task_id = l.task_id AND p.state = 'done' AND p.attempts = 1)
		FROM task_lease l WHERE task_id = $1`, taskID).Scan(&leaseDone, &doneSteps); err != nil {
		t.Fatal(err)
	}
	if !leaseDone || doneSteps != len(plan) {
		t.Fatalf("lease finished %v, %d steps done once", leaseDone, doneSteps)
	}
	if st := w.Stats(); st.PlansClosed < 1 || st.Claims < 1 {
		t.Fatalf("worker stats: %+v", st)
	}
}

// A step that never succeeds (a button that is not there) is tried max_attempts times with a
// backoff, then the plan is dead-lettered with its evidence and the task fails.
func TestDelegatedStepDeadLettersAfterItsAttempts(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	s.startWorkers(t)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "plan-dl", map[string]any{
		"goal": "click a button that is not there", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"plan": []map[string]any{
			{"op": "navigate", "args": map[string]any{"url": sh.srv.URL + "/checkout"}},
			{"op": "act", "max_attempts": 3, "args": map[string]any{"action": "click", "timeout_ms": 300,
				"query": map[string]any{"role": "button", "name": "Cancel my subscription", "exact": true}}},
			{"op": "extract", "args": map[string]any{"kind": "text"}},
		},
	})
	taskID := r.str("task", "task_id")
	s.awaitState(t, taskID, "failed")

	evs := s.history(t, taskID)
	var fails []map[string]any
	for _, e := range ofType(evs, "plan.step_finished") {
		if d := data(e); d["index"] == float64(1) {
			fails = append(fails, d)
		}
	}
	if len(fails) != 3 {
		t.Fatalf("%d finished attempts of step 1, want 3: %v", len(fails), fails)
	}
	for i, d := range fails {
		if d["succeeded"] != false || d["attempt"] != float64(i+1) || (d["dead_lettered"] == true) != (i == 2) || d["problem_code"] == nil {
			t.Fatalf("attempt %d: %v", i+1, d)
		}
	}
	if len(ofType(evs, "plan.step_started")) != 4 { // navigate + 3 attempts; extract never starts
		t.Fatalf("step_started events: %v", ofType(evs, "plan.step_started"))
	}
	changes := ofType(evs, "task.state_changed")
	if d := data(changes[len(changes)-1]); d["to"] != "failed" || d["trigger"] != "dead_letter" {
		t.Fatalf("last state change: %v", d)
	}

	var attempts, step int
	var reason, code, artifact string
	var evidence []byte
	if err := s.db.QueryRow(context.Background(), `SELECT attempts, step_index, reason, problem_code, coalesce(artifact_id, ''), evidence
		FROM dead_letter_record WHERE task_id = $1`, taskID).Scan(&attempts, &step, &reason, &code, &artifact, &evidence); err != nil {
		t.Fatal(err)
	}
	if attempts != 3 || step != 1 || reason != "attempts_exhausted" || (code != "action_timeout" && code != "not_found") {
		t.Fatalf("dead letter: attempts %d, step %d, reason %s, code %s", attempts, step, reason, code)
	}
	var ev map[string]any
	_ = json.Unmarshal(evidence, &ev)
	if h, _ := ev["history"].([]any); len(h) != 3 || ev["problem"] == nil {
		t.Fatalf("dead letter evidence: %s", evidence)
	}
	// The evidence includes a screenshot of the page the step failed on, a verifiable artifact.
	if artifact == "" {
		t.Fatalf("dead letter without a screenshot: %s", evidence)
	}
	status, hdr, png := s.getRaw(t, "/bap/v1/artifacts/"+artifact)
	if status != 200 || hdr.Get("Content-Type") != "image/png" || len(png) < 100 {
		t.Fatalf("dead letter screenshot: %d %v %d bytes", status, hdr, len(png))
	}
	var progress int
	if err := s.db.QueryRow(context.Background(), `SELECT attempts FROM plan_step_progress WHERE task_id = $1 AND step_index = 1 AND state = 'failed'`,
		taskID).Scan(&progress); err != nil || progress != 3 {
		t.Fatalf("step progress: %d, %v", progress, err)
	}
}

// An error retrying cannot cure (a navigation outside the allowed origins) fails the plan at once:
// one attempt, none consumed, a dead letter, nothing loaded.
func TestDelegatedPolicyViolationFailsAtOnce(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	other := newShop(t)
	s := newStack(t)
	s.startWorkers(t)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "plan-403", map[string]any{
		"goal": "wander off", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"plan": []map[string]any{
			{"op": "navigate", "max_attempts": 5, "args": map[string]any{"url": other.srv.URL + "/checkout"}},
		},
	})
	taskID := r.str("task", "task_id")
	s.awaitState(t, taskID, "failed")
	evs := s.history(t, taskID)
	fin := ofType(evs, "plan.step_finished")
	if len(fin) != 1 || len(ofType(evs, "plan.step_started")) != 1 {
		t.Fatalf("step events: %v", fin)
	}
	if d := data(fin[0]); d["problem_code"] != "origin_not_allowed" || d["dead_lettered"] != true || d["attempt"] != float64(1) {
		t.Fatalf("step_finished: %v", d)
	}
	var attempts int
	var reason, code string
	if err := s.db.QueryRow(context.Background(), `SELECT d.attempts, d.reason, d.problem_code FROM dead_letter_record d WHERE d.task_id = $1`,
		taskID).Scan(&attempts, &reason, &code); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || reason != "not_retryable" || code != "origin_not_allowed" {
		t.Fatalf("dead letter: attempts %d, reason %s, code %s", attempts, reason, code)
	}
	var progress int
	if err := s.db.QueryRow(context.Background(), `SELECT attempts FROM plan_step_progress WHERE task_id = $1 AND step_index = 0`,
		taskID).Scan(&progress); err != nil || progress != 0 {
		t.Fatalf("attempts consumed: %d, %v", progress, err)
	}
	if other.hits.Load() != 0 {
		t.Fatalf("the disallowed origin was reached %d times", other.hits.Load())
	}
	// The refused navigation is a recorded command with a rejected receipt.
	if !strings.Contains(func() string { b, _ := json.Marshal(evs); return string(b) }(), `"outcome":"rejected"`) {
		t.Fatal("no rejected receipt in the history")
	}
	// Its origin-policy decision names who decided (the node's worker, as actor and workload), the
	// session the plan opened and the origin it reached for (issue #23 item 6).
	var sessionID string
	if err := s.db.QueryRow(context.Background(), `SELECT session_id FROM browser_session WHERE task_id = $1`, taskID).Scan(&sessionID); err != nil {
		t.Fatalf("the plan's session: %v", err)
	}
	decisions, err := s.svc.ListDecisions(context.Background(), app.DecisionFilter{Tenant: "local", TaskID: taskID})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range decisions {
		if d.Point == app.PointOriginPolicy && d.Outcome == app.AuthRefused {
			found = true
			if !strings.HasPrefix(d.Actor, "worker:") || d.Workload != app.WorkloadWorker || d.TaskID != taskID ||
				d.SessionID != sessionID || d.TargetOrigin != other.srv.URL || d.Operation != "navigate" {
				t.Errorf("the worker's refused navigation: actor %q, workload %q, task %q, session %q, target origin %q, operation %q; want worker:…, %q, %q, %q, %q, navigate",
					d.Actor, d.Workload, d.TaskID, d.SessionID, d.TargetOrigin, d.Operation, app.WorkloadWorker, taskID, sessionID, other.srv.URL)
			}
		}
	}
	if !found {
		t.Fatalf("no refused origin-policy decision among %+v", decisions)
	}
}

// An act held by an approval rule makes the plan wait in waiting_for_approval with its lease given
// back; approving it runs the action once and the plan carries on to succeeded.
func TestDelegatedPlanWaitsForApproval(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	s.startWorkers(t)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "plan-apr", map[string]any{
		"goal": "order, with a person's approval",
		"policy": map[string]any{"allowed_origins": []string{sh.srv.URL},
			"approval_rules": []map[string]any{{"effect": "form_submission"}}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you"}}},
		"plan": []map[string]any{
			{"op": "navigate", "args": map[string]any{"url": sh.srv.URL + "/checkout"}},
			{"op": "act", "args": map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Grace"}},
			{"op": "act", "args": map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "g@example.com"}},
			{"op": "act", "args": map[string]any{"action": "check", "query": map[string]any{"role": "checkbox"}}},
			{"op": "act", "args": map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}}},
			{"op": "extract", "args": map[string]any{"kind": "text"}},
		},
	})
	taskID := r.str("task", "task_id")
	s.awaitState(t, taskID, "waiting_for_approval")
	if sh.orders.Load() != 0 {
		t.Fatal("the held click ran before its approval")
	}
	var approvalID string
	for _, e := range ofType(s.history(t, taskID), "approval.requested") {
		approvalID, _ = data(e)["approval_id"].(string)
	}
	var owner *string
	if err := s.db.QueryRow(context.Background(), `SELECT owner_node FROM task_lease WHERE task_id = $1`, taskID).Scan(&owner); err != nil || owner != nil {
		t.Fatalf("the lease of a waiting task is held by %v (%v)", owner, err)
	}
	s.operator().must(t, 200, "POST", "/bap/v1/approvals/"+approvalID+"/resolve", "plan-apr-ok", map[string]any{"decision": "approve"})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" || sh.orders.Load() != 1 {
		t.Fatalf("after approval: %s, %d orders", done.raw, sh.orders.Load())
	}
	fin := ofType(s.history(t, taskID), "plan.step_finished")
	if len(fin) != 6 {
		t.Fatalf("%d steps finished, want 6", len(fin))
	}
}

// A node without a browser cannot run a plan, and retrying cannot cure that: the plan fails at
// once (browser_unavailable), consuming no attempt.
func TestDelegatedPlanWithoutABrowserFailsAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: "node_nobrowser", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	svc, err := app.NewService(store.New(db), app.Config{NodeID: "node_nobrowser", InterruptedResponse: api.InterruptedResponse,
		SoftwareVersion: "1.2.3", ProtocolVersion: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Options{Service: svc, Authenticator: api.Local{}, Registry: prometheus.NewRegistry(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s := &stack{srv: srv, db: db, svc: svc, opClient: serveSocket(t, h)}
	s.startWorkers(t)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "plan-nobrowser", map[string]any{
		"goal": "needs a browser", "policy": map[string]any{"allowed_origins": []string{"https://shop.example.com"}},
		"plan": []map[string]any{{"op": "navigate", "args": map[string]any{"url": "https://shop.example.com/"}}},
	})
	taskID := r.str("task", "task_id")
	s.awaitState(t, taskID, "failed")
	var attempts int
	var reason, code string
	if err := db.QueryRow(ctx, `SELECT attempts, reason, problem_code FROM dead_letter_record WHERE task_id = $1`, taskID).
		Scan(&attempts, &reason, &code); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || reason != "not_retryable" || code != "browser_unavailable" {
		t.Fatalf("dead letter: attempts %d, reason %s, code %s", attempts, reason, code)
	}
	changes := ofType(s.history(t, taskID), "task.state_changed")
	if d := data(changes[len(changes)-1]); d["from"] != "running" || d["to"] != "failed" || d["trigger"] != "dead_letter" {
		t.Fatalf("last state change: %v", d)
	}
}

// A worker whose lease was taken over records and dispatches nothing more: its next command is
// refused inside its own first transaction, so no key is claimed and no command recorded.
func TestStalledWorkerCommandIsFencedOut(t *testing.T) {
	sh := newShop(t)
	s := newStack(t)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "fence-task", map[string]any{
		"goal": "fenced", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"plan": []any{map[string]any{"op": "observe", "args": map[string]any{}}},
	})
	taskID := r.str("task", "task_id")
	ctx := context.Background()
	// node_e2e held the lease at epoch 1; another node took it over at epoch 2.
	if _, err := s.db.Exec(ctx, `INSERT INTO runtime_node (node_id, advertise_url, software_version) VALUES ('node_other', '', 'test')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(ctx, `UPDATE task_lease SET owner_node = 'node_other', lease_epoch = 2, claims = 2, expiries = 1,
		expires_at = now() + interval '1 minute' WHERE task_id = $1`, taskID); err != nil {
		t.Fatal(err)
	}
	var before int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM task_command WHERE task_id = $1`, taskID).Scan(&before); err != nil {
		t.Fatal(err)
	}
	fp, err := s.svc.Fingerprints().Fingerprint("create_browser_session", []string{taskID}, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	call := app.Call{Actor: app.Actor{Tenant: "local", Subject: "worker:node_e2e"}, Operation: "create_browser_session",
		IdempotencyKey: "fenced-open", Fingerprint: fp, Lease: &app.LeaseFence{NodeID: "node_e2e", Epoch: 1}}
	if _, err := s.svc.CreateBrowserSession(ctx, call, taskID, app.SessionRequest{}, plainResponder[*app.SessionResult]{}); err == nil || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("a fenced-out worker's command: %v, want the lease lost", err)
	}
	var after, keys int
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM task_command WHERE task_id = $1`, taskID).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM idempotency_record WHERE idempotency_key = 'fenced-open'`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if after != before || keys != 0 {
		t.Fatalf("the fenced-out command left %d commands (before %d) and %d keys", after, before, keys)
	}
}

// plainResponder renders results of R as bare JSON (the test reads only errors and rows).
type plainResponder[R any] struct{}

func (plainResponder[R]) Success(result R) (app.Response, error) {
	b, err := json.Marshal(result)
	return app.Response{Status: 200, Body: b}, err
}

func (plainResponder[R]) Failure(e *app.Error, _ *app.Receipt) (app.Response, error) {
	return app.Response{Status: 409, Body: []byte(`{"code":"` + string(e.Code) + `"}`)}, nil
}
