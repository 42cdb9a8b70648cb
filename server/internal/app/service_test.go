package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
	"github.com/originweave/bap/server/internal/task"
)

// bundle is what most tests need: a service over a fresh database, a fixed clock and an actor.
type bundle struct {
	svc   *app.Service
	store *store.Store
	db    *pgxpool.Pool
	actor app.Actor
	now   *atomic.Pointer[time.Time]
	keys  atomic.Int64
}

func setup(t *testing.T, mutate ...func(*app.Config)) *bundle {
	t.Helper()
	return setupStore(t, store.Options{}, mutate...)
}

// setupStore is setup with the service's store made with opts.
func setupStore(t *testing.T, opts store.Options, mutate ...func(*app.Config)) *bundle {
	t.Helper()
	db := pgtest.NewDB(t)
	b := &bundle{db: db, actor: app.Actor{Tenant: "local", Subject: "operator:local"}, now: &atomic.Pointer[time.Time]{}}
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	b.now.Store(&start)
	cfg := app.Config{NodeID: "node_test", Now: func() time.Time { return *b.now.Load() }}
	for _, m := range mutate {
		m(&cfg)
	}
	if err := store.New(db).RegisterNode(context.Background(), app.NodeInfo{ID: "node_test", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	b.store = store.New(db, opts)
	svc, err := app.NewService(b.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.svc = svc
	return b
}

func (b *bundle) advance(d time.Duration) {
	n := b.now.Load().Add(d)
	b.now.Store(&n)
}

// call makes a Call with a fresh key (or the given one) for op and body.
func (b *bundle) call(t *testing.T, op string, target []string, body any, key ...string) app.Call {
	t.Helper()
	raw, _ := json.Marshal(body)
	fp, err := b.svc.Fingerprints().Fingerprint(op, target, raw)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("key-%d", b.keys.Add(1))
	if len(key) > 0 {
		k = key[0]
	}
	// The operator on the local socket, named by its workload as the local transport names it.
	return app.Call{Actor: b.actor, ClientID: app.WorkloadLocalSocket, Operation: op, IdempotencyKey: k, Fingerprint: fp}
}

// recorder is a Responder of R that keeps the Go result and encodes a small JSON summary.
type recorder[R any] struct {
	result  R
	problem *app.Error
	receipt *app.Receipt
}

func (r *recorder[R]) Success(result R) (app.Response, error) {
	r.result = result
	body, err := json.Marshal(map[string]any{"ok": fmt.Sprintf("%T", result)})
	return app.Response{Status: 200, Body: body}, err
}

func (r *recorder[R]) Failure(e *app.Error, rc *app.Receipt) (app.Response, error) {
	r.problem, r.receipt = e, rc
	body, err := json.Marshal(map[string]any{"code": e.Code, "receipt": rc.ID})
	return app.Response{Status: 409, Body: body}, err
}

func (b *bundle) create(t *testing.T, in app.CreateTaskInput) *app.Task {
	t.Helper()
	if in.Goal == "" {
		in.Goal = "test goal"
	}
	if in.Policy.AllowedOrigins == nil {
		in.Policy.AllowedOrigins = []string{"https://example.com"}
	}
	r := &recorder[*app.TaskResult]{}
	if _, err := b.svc.CreateTask(context.Background(), b.call(t, "create_task", nil, in.Goal), in, r); err != nil {
		t.Fatalf("create_task: %v", err)
	}
	return r.result.Task
}

func (b *bundle) events(t *testing.T, taskID string) []app.Event {
	t.Helper()
	evs, next, err := b.svc.ListTaskEvents(context.Background(), b.actor, taskID, 0, 1000)
	if err != nil || next != nil {
		t.Fatalf("listing events: %v (next %v)", err, next)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: history must be 1, 2, 3, …", i, e.Seq)
		}
	}
	return evs
}

func types(evs []app.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func TestCreateTaskAdmitsAndRecordsHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tk := b.create(t, app.CreateTaskInput{Policy: app.PolicySpec{
		AllowedOrigins: []string{"https://*.example.com", "http://127.0.0.1:*"},
		ApprovalRules:  []app.ApprovalRuleSpec{{Effect: "form_submission", Origins: []string{"https://pay.example.com"}}, {Effect: "any_action"}},
	}})
	if tk.State != task.Admitted {
		t.Fatalf("state %s, want admitted", tk.State)
	}
	got, err := b.svc.GetTask(context.Background(), b.actor, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Policy.AllowedOrigins) != 2 || len(got.Policy.ApprovalRules) != 2 || got.Policy.ApprovalRules[0].Origins[0] != "https://pay.example.com" {
		t.Fatalf("policy not stored faithfully: %+v", got.Policy)
	}
	want := []string{"task.created", "command.recorded", "task.state_changed", "receipt.issued"}
	if g := types(b.events(t, tk.ID)); fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", g, want)
	}
}

func TestCreateTaskRejectsBadInputBeforeRecording(t *testing.T) {
	t.Parallel()
	b := setup(t)
	past := b.now.Load().Add(-time.Minute)
	tests := []struct {
		name string
		in   app.CreateTaskInput
	}{
		{"bad origin", app.CreateTaskInput{Goal: "g", Policy: app.PolicySpec{AllowedOrigins: []string{"ftp://x"}}}},
		{"bad regex", app.CreateTaskInput{Goal: "g", Policy: app.PolicySpec{AllowedOrigins: []string{}},
			Postcondition: json.RawMessage(`{"all":[{"url_matches":"("}]}`)}},
		{"past deadline", app.CreateTaskInput{Goal: "g", Policy: app.PolicySpec{AllowedOrigins: []string{}}, Deadline: &past}},
	}
	for _, tt := range tests {
		key := fmt.Sprintf("bad-%d", len(tt.name))
		_, err := b.svc.CreateTask(context.Background(), b.call(t, "create_task", nil, tt.name, key), tt.in, &recorder[*app.TaskResult]{})
		if e := app.AsError(err); e == nil || e.Code != app.CodeInvalidRequest {
			t.Errorf("%s: got %v, want invalid_request", tt.name, err)
		}
		var n int
		if err := b.db.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_record WHERE idempotency_key = $1`, key).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: refused request was recorded under its key (%d, %v)", tt.name, n, err)
		}
	}
}

func TestIdempotencyReplayReuseAndConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	in := app.CreateTaskInput{Goal: "once", Policy: app.PolicySpec{AllowedOrigins: []string{}}}
	call := b.call(t, "create_task", nil, in.Goal, "the-key")

	const n = 100
	var wg sync.WaitGroup
	var created, replayed, inFlight, other atomic.Int64
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := b.svc.CreateTask(ctx, call, in, &recorder[*app.TaskResult]{})
			switch e := app.AsError(err); {
			case err == nil && resp.Replayed:
				replayed.Add(1)
			case err == nil:
				created.Add(1)
			case e != nil && e.Code == app.CodeIdempotencyInFlight:
				inFlight.Add(1)
			default:
				other.Add(1)
				t.Errorf("unexpected: %v", err)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 1 || replayed.Load()+inFlight.Load() != n-1 || other.Load() != 0 {
		t.Fatalf("created %d, replayed %d, in flight %d, other %d", created.Load(), replayed.Load(), inFlight.Load(), other.Load())
	}
	var tasks int
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM agent_task WHERE goal = 'once'`).Scan(&tasks); err != nil || tasks != 1 {
		t.Fatalf("%d tasks (%v), want exactly 1", tasks, err)
	}

	// Same key, another body → reused.
	other2 := b.call(t, "create_task", nil, "another goal", "the-key")
	_, err := b.svc.CreateTask(ctx, other2, app.CreateTaskInput{Goal: "another goal", Policy: app.PolicySpec{AllowedOrigins: []string{}}}, &recorder[*app.TaskResult]{})
	if e := app.AsError(err); e == nil || e.Code != app.CodeIdempotencyKeyReused {
		t.Fatalf("got %v, want idempotency_key_reused", err)
	}
	// Same key, same body, another operation → reused.
	tk := b.create(t, app.CreateTaskInput{})
	cancelCall := b.call(t, "cancel_task", []string{tk.ID}, map[string]any{}, "the-key")
	_, err = b.svc.CancelTask(ctx, cancelCall, tk.ID, "", &recorder[*app.TaskResult]{})
	if e := app.AsError(err); e == nil || e.Code != app.CodeIdempotencyKeyReused {
		t.Fatalf("got %v, want idempotency_key_reused for another operation", err)
	}
	// The first response is replayed byte for byte.
	first, err := b.svc.CreateTask(ctx, call, in, &recorder[*app.TaskResult]{})
	if err != nil || !first.Replayed {
		t.Fatalf("replay: %v %+v", err, first)
	}
}

func TestIdempotencyRecordsArePurgedAfterRetention(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.IdempotencyTTL = time.Hour })
	ctx := context.Background()
	b.create(t, app.CreateTaskInput{})
	if n, err := b.svc.PurgeIdempotency(ctx); err != nil || n != 0 {
		t.Fatalf("purged %d before expiry (%v)", n, err)
	}
	b.advance(2 * time.Hour)
	if n, err := b.svc.PurgeIdempotency(ctx); err != nil || n != 1 {
		t.Fatalf("purged %d after expiry (%v), want 1", n, err)
	}
}

func TestCancelAndRejectedReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})
	r := &recorder[*app.TaskResult]{}
	if _, err := b.svc.CancelTask(ctx, b.call(t, "cancel_task", []string{tk.ID}, nil), tk.ID, "done", r); err != nil {
		t.Fatal(err)
	}
	if s := r.result.Task.State; s != task.Cancelled {
		t.Fatalf("state %s, want cancelled", s)
	}
	// Cancelling again is a command refused by the task's state: recorded, rejected, replayable.
	again := b.call(t, "cancel_task", []string{tk.ID}, nil)
	r2 := &recorder[*app.TaskResult]{}
	resp, err := b.svc.CancelTask(ctx, again, tk.ID, "", r2)
	if err != nil || r2.problem == nil || r2.problem.Code != app.CodeInvalidTransition || r2.receipt.Outcome != task.Rejected {
		t.Fatalf("second cancel: %v %+v", err, r2)
	}
	replay, err := b.svc.CancelTask(ctx, again, tk.ID, "", &recorder[*app.TaskResult]{})
	if err != nil || !replay.Replayed || string(replay.Body) != string(resp.Body) || replay.Status != resp.Status {
		t.Fatalf("rejected command must replay its problem: %v %+v vs %+v", err, replay, resp)
	}
	// Unknown tasks are not commands.
	_, err = b.svc.CancelTask(ctx, b.call(t, "cancel_task", []string{"tsk_nope"}, nil), "tsk_nope", "", &recorder[*app.TaskResult]{})
	if e := app.AsError(err); e == nil || e.Code != app.CodeNotFound {
		t.Fatalf("got %v, want not_found", err)
	}
}

func TestCloseTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	plain := b.create(t, app.CreateTaskInput{})
	r := &recorder[*app.CloseResult]{}
	if _, err := b.svc.CloseTask(ctx, b.call(t, "close_task", []string{plain.ID}, nil), plain.ID, r); err != nil {
		t.Fatal(err)
	}
	res := r.result
	if res.Task.State != task.Succeeded || res.Task.Verification != "unverified" || !res.Postcondition.Satisfied || res.Task.EndedAt == nil {
		t.Fatalf("no postcondition: %+v", res)
	}
	withPC := b.create(t, app.CreateTaskInput{Postcondition: json.RawMessage(`{"all":[{"text_present":"Thanks"},{"url_matches":"/done$"}]}`)})
	r = &recorder[*app.CloseResult]{}
	if _, err := b.svc.CloseTask(ctx, b.call(t, "close_task", []string{withPC.ID}, nil), withPC.ID, r); err != nil {
		t.Fatal(err)
	}
	res = r.result
	if res.Task.State != task.Failed || res.Task.Verification != "unmet" || res.Postcondition.Satisfied || len(res.Postcondition.Unmet) != 2 {
		t.Fatalf("unverifiable postcondition must fail listing its clauses: %+v", res)
	}
}

func TestApprovals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})
	request := func() *app.Approval {
		r := &recorder[*app.ApprovalResult]{}
		call := b.call(t, "request_approval", []string{tk.ID}, "why")
		call.Actor.Subject, call.ClientID = "agent:local", app.WorkloadLocalAgent // the operator (b.actor) resolves: separation of duties
		if _, err := b.svc.RequestApproval(ctx, call, tk.ID, "why", r); err != nil {
			t.Fatal(err)
		}
		return r.result.Approval
	}
	a1, a2 := request(), request()
	if a1.ExpiresAt.Sub(a1.RequestedAt) != 15*time.Minute || a1.RequestedBy != "agent:local" {
		t.Fatalf("a request_approval expires 15 minutes after it was asked: %+v", a1)
	}
	got, _ := b.svc.GetTask(ctx, b.actor, tk.ID)
	if got.State != task.WaitingForApproval {
		t.Fatalf("state %s, want waiting_for_approval", got.State)
	}
	resolve := func(id, decision string) *recorder[*app.ApprovalResult] {
		r := &recorder[*app.ApprovalResult]{}
		if _, err := b.svc.ResolveApproval(ctx, b.call(t, "resolve_approval", []string{id}, decision), id, decision, "", r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := resolve(a1.ID, "approve"); r.result.Approval.State != task.ApprovalApproved ||
		r.result.Approval.Decision.DecidedBy != "operator:local" {
		t.Fatalf("approve: %+v", r.result)
	}
	if got, _ := b.svc.GetTask(ctx, b.actor, tk.ID); got.State != task.WaitingForApproval {
		t.Fatalf("one approval still pending, state %s", got.State)
	}
	resolve(a2.ID, "deny")
	if got, _ := b.svc.GetTask(ctx, b.actor, tk.ID); got.State != task.Running {
		t.Fatalf("after the last approval, state %s, want running", got.State)
	}
	if r := resolve(a1.ID, "deny"); r.problem == nil || r.problem.Code != app.CodeApprovalNotPending {
		t.Fatalf("resolving twice: %+v", r)
	}
	// Cancelling a waiting task closes its pending approvals.
	a3 := request()
	if _, err := b.svc.CancelTask(ctx, b.call(t, "cancel_task", []string{tk.ID}, nil), tk.ID, "", &recorder[*app.TaskResult]{}); err != nil {
		t.Fatal(err)
	}
	if r := resolve(a3.ID, "approve"); r.problem == nil || r.problem.Code != app.CodeApprovalNotPending {
		t.Fatalf("approval of a cancelled task must not be pending: %+v", r)
	}
	_, err := b.svc.ResolveApproval(ctx, b.call(t, "resolve_approval", []string{"apr_x"}, "x"), "apr_x", "approve", "", &recorder[*app.ApprovalResult]{})
	if !errors.Is(err, app.ErrNotFound) && (app.AsError(err) == nil || app.AsError(err).Code != app.CodeNotFound) {
		t.Fatalf("unknown approval: %v", err)
	}
}

// An approval expires at its expires_at: the sweep (what the upkeep calls) closes it as expired,
// once, with an approval.resolved event by the runtime, and the task runs again; an expired
// approval is never revived, and one due but not yet swept is expired by the resolve that finds it.
func TestApprovalExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})
	request := func() *app.Approval {
		r := &recorder[*app.ApprovalResult]{}
		call := b.call(t, "request_approval", []string{tk.ID}, "why")
		call.Actor.Subject, call.ClientID = "agent:local", app.WorkloadLocalAgent
		if _, err := b.svc.RequestApproval(ctx, call, tk.ID, "why", r); err != nil {
			t.Fatal(err)
		}
		return r.result.Approval
	}
	resolve := func(id string) *recorder[*app.ApprovalResult] {
		r := &recorder[*app.ApprovalResult]{}
		if _, err := b.svc.ResolveApproval(ctx, b.call(t, "resolve_approval", []string{id}, "approve"), id, "approve", "", r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := request()
	b.advance(15*time.Minute - time.Second)
	if n, err := b.svc.ExpireApprovals(ctx); err != nil || n != 0 {
		t.Fatalf("sweep before expires_at: %d, %v", n, err)
	}
	b.advance(time.Second)
	if n, err := b.svc.ExpireApprovals(ctx); err != nil || n != 1 {
		t.Fatalf("sweep at expires_at: %d, %v", n, err)
	}
	if n, err := b.svc.ExpireApprovals(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep: %d, %v", n, err)
	}
	if got, _ := b.svc.GetTask(ctx, b.actor, tk.ID); got.State != task.Running {
		t.Fatalf("task %s after its approval expired, want running", got.State)
	}
	if r := resolve(a.ID); r.problem == nil || r.problem.Code != app.CodeApprovalNotPending {
		t.Fatalf("resolving an expired approval: %+v", r)
	}
	// Due but not swept: the resolve expires it and refuses.
	a2 := request()
	b.advance(time.Hour)
	if r := resolve(a2.ID); r.problem == nil || r.problem.Code != app.CodeApprovalNotPending {
		t.Fatalf("resolving a due approval: %+v", r)
	}
	got, err := b.svc.ListApprovals(ctx, b.actor, "expired", 10)
	if err != nil || len(got) != 2 || got[0].State != task.ApprovalExpired || got[0].Decision != nil {
		t.Fatalf("expired approvals: %+v, %v", got, err)
	}
	evs, _, err := b.svc.ListTaskEvents(ctx, b.actor, tk.ID, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	expired := 0
	for _, e := range evs {
		if e.Type == "approval.resolved" && e.Data["state"] == "expired" && e.Actor == "system:runtime" {
			expired++
		}
	}
	if expired != 2 {
		t.Fatalf("%d approval.resolved events with state expired, want 2", expired)
	}
}

func TestDeadlineExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deadline := b.now.Load().Add(time.Minute)
	tk := b.create(t, app.CreateTaskInput{Deadline: &deadline})
	other := b.create(t, app.CreateTaskInput{})
	if n, err := b.svc.ExpireDue(ctx); err != nil || n != 0 {
		t.Fatalf("expired %d early (%v)", n, err)
	}
	b.advance(2 * time.Minute)
	if n, err := b.svc.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("expired %d (%v), want 1", n, err)
	}
	if got, _ := b.svc.GetTask(ctx, b.actor, tk.ID); got.State != task.Expired || got.EndedAt == nil {
		t.Fatalf("state %s, want expired", got.State)
	}
	if got, _ := b.svc.GetTask(ctx, b.actor, other.ID); got.State != task.Admitted {
		t.Fatalf("task without deadline: %s", got.State)
	}
	// A reader of a due task sees it expired even before the sweeper runs.
	d2 := b.now.Load().Add(time.Second)
	t2 := b.create(t, app.CreateTaskInput{Deadline: &d2})
	b.advance(time.Minute)
	if got, _ := b.svc.GetTask(ctx, b.actor, t2.ID); got.State != task.Expired {
		t.Fatalf("read past deadline: %s, want expired", got.State)
	}
}

func TestQuotaAdmitsWhenCapacityFrees(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.MaxActiveTasksPerTenant = 1 })
	ctx := context.Background()
	first := b.create(t, app.CreateTaskInput{})
	second := b.create(t, app.CreateTaskInput{})
	if first.State != task.Admitted || second.State != task.Created {
		t.Fatalf("states %s, %s; want admitted, created", first.State, second.State)
	}
	if _, err := b.svc.CancelTask(ctx, b.call(t, "cancel_task", []string{first.ID}, nil), first.ID, "", &recorder[*app.TaskResult]{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.svc.GetTask(ctx, b.actor, second.ID); got.State != task.Admitted {
		t.Fatalf("waiting task not admitted when capacity freed: %s", got.State)
	}
}

func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('acme')`); err != nil {
		t.Fatal(err)
	}
	tk := b.create(t, app.CreateTaskInput{})
	stranger := app.Actor{Tenant: "acme", Subject: "client:x"}
	if _, err := b.svc.GetTask(ctx, stranger, tk.ID); !errors.Is(err, app.ErrNotFound) {
		t.Fatalf("another tenant's task: %v, want not found", err)
	}
	if _, _, err := b.svc.ListTaskEvents(ctx, stranger, tk.ID, 0, 10); !errors.Is(err, app.ErrNotFound) {
		t.Fatalf("another tenant's events: %v, want not found", err)
	}
	call := b.call(t, "cancel_task", []string{tk.ID}, nil)
	call.Actor = stranger
	if _, err := b.svc.CancelTask(ctx, call, tk.ID, "", &recorder[*app.TaskResult]{}); !errors.Is(err, app.ErrNotFound) {
		t.Fatalf("cancel of another tenant's task: %v, want not found", err)
	}
}

func TestListTaskEventsPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})
	for i := 0; i < 3; i++ {
		if _, err := b.svc.RequestApproval(ctx, b.call(t, "request_approval", []string{tk.ID}, i), tk.ID, "r", &recorder[*app.ApprovalResult]{}); err != nil {
			t.Fatal(err)
		}
	}
	all := b.events(t, tk.ID)
	var seen []int64
	after := int64(0)
	for {
		page, next, err := b.svc.ListTaskEvents(ctx, b.actor, tk.ID, after, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			seen = append(seen, e.Seq)
		}
		if next == nil {
			break
		}
		after = *next
	}
	if len(seen) != len(all) || seen[len(seen)-1] != int64(len(all)) {
		t.Fatalf("paged %v, want 1..%d", seen, len(all))
	}
}
