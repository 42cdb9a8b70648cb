package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/store"
	"github.com/originweave/bap/server/internal/task"
)

func interrupted(rc *app.Receipt) (app.Response, error) {
	body, err := json.Marshal(map[string]any{"receipt": map[string]any{"receipt_id": rc.ID, "outcome": rc.Outcome}})
	return app.Response{Status: 200, Body: body}, err
}

// The effect of a two-phase command runs once however many requests carry its key: while it
// runs, the others are told it is in flight; afterwards they get the first response.
func TestTwoPhaseDispatchesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})
	call := b.call(t, "act", []string{"bs_x"}, map[string]any{"action": "click"}, "click-once")

	release := make(chan struct{})
	started := make(chan struct{})
	var dispatched atomic.Int64
	dispatch := func(context.Context) (any, error) {
		if dispatched.Add(1) == 1 {
			close(started)
		}
		<-release
		return nil, nil
	}
	first := make(chan app.Response, 1)
	go func() {
		resp, err := b.svc.RunTwoPhaseForTest(ctx, call, tk.ID, &recorder[*app.TaskResult]{}, true, dispatch, false)
		if err != nil {
			t.Error(err)
		}
		first <- resp
	}()
	<-started
	var wg sync.WaitGroup
	var inFlight atomic.Int64
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.svc.RunTwoPhaseForTest(ctx, call, tk.ID, &recorder[*app.TaskResult]{}, true, dispatch, false)
			if e := app.AsError(err); e != nil && e.Code == app.CodeIdempotencyInFlight && e.RetryAfter > 0 {
				inFlight.Add(1)
			} else {
				t.Errorf("while in flight: %v", err)
			}
		}()
	}
	wg.Wait()
	close(release)
	resp := <-first
	var replays sync.WaitGroup
	for i := 0; i < 50; i++ {
		replays.Add(1)
		go func() {
			defer replays.Done()
			r, err := b.svc.RunTwoPhaseForTest(ctx, call, tk.ID, &recorder[*app.TaskResult]{}, true, dispatch, false)
			if err != nil || !r.Replayed || string(r.Body) != string(resp.Body) {
				t.Errorf("after completion: %v %+v", err, r)
			}
		}()
	}
	replays.Wait()
	if dispatched.Load() != 1 || inFlight.Load() != 50 {
		t.Fatalf("dispatched %d times, %d in-flight answers", dispatched.Load(), inFlight.Load())
	}
	if got, _ := b.svc.GetTask(ctx, b.actor, tk.ID); got.State != task.Running {
		t.Fatalf("first command did not start the task: %s", got.State)
	}
}

// A node that dies between dispatch and receipt leaves its command to recovery, which never runs
// it again: a side-effecting command goes to reconciliation, a safe one to unknown_outcome.
func TestRecoveryClassifiesInterruptedCommands(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name          string
		sideEffecting bool
		outcome       task.Outcome
		state         task.State
	}{
		{"side-effecting", true, task.ReconciliationRequired, task.WaitingForExternalInput},
		{"safe", false, task.UnknownOutcome, task.Running},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *app.Config) { c.InterruptedResponse = interrupted })
			ctx := context.Background()
			tk := b.create(t, app.CreateTaskInput{})
			call := b.call(t, "act", []string{"bs_x"}, tt.name, "crash-key")
			var dispatched atomic.Int64
			dispatch := func(context.Context) (any, error) { dispatched.Add(1); return nil, nil }
			if _, err := b.svc.RunTwoPhaseForTest(ctx, call, tk.ID, &recorder[*app.TaskResult]{}, tt.sideEffecting, dispatch, true); err == nil {
				t.Fatal("phase 3 was meant to fail")
			}
			// Until the node is known dead, the key is in flight.
			if _, err := b.svc.RunTwoPhaseForTest(ctx, call, tk.ID, &recorder[*app.TaskResult]{}, tt.sideEffecting, dispatch, false); app.AsError(err) == nil ||
				app.AsError(err).Code != app.CodeIdempotencyInFlight {
				t.Fatalf("before recovery: %v", err)
			}
			if n, err := b.svc.RecoverInterrupted(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
				t.Fatalf("recovered %d commands of a live node (%v)", n, err)
			}
			if err := store.New(b.db).StopNode(ctx, "node_test"); err != nil {
				t.Fatal(err)
			}
			if n, err := b.svc.RecoverInterrupted(ctx, time.Now()); err != nil || n != 1 {
				t.Fatalf("recovered %d (%v), want 1", n, err)
			}
			resp, err := b.svc.RunTwoPhaseForTest(ctx, call, tk.ID, &recorder[*app.TaskResult]{}, tt.sideEffecting, dispatch, false)
			var body struct {
				Receipt struct{ Outcome task.Outcome } `json:"receipt"`
			}
			if err != nil || !resp.Replayed || resp.Status != 200 || json.Unmarshal(resp.Body, &body) != nil || body.Receipt.Outcome != tt.outcome {
				t.Fatalf("replay after recovery: %v %d %s", err, resp.Status, resp.Body)
			}
			if dispatched.Load() != 1 {
				t.Fatalf("dispatched %d times", dispatched.Load())
			}
			got, _ := b.svc.GetTask(ctx, b.actor, tk.ID)
			if got.State != tt.state {
				t.Fatalf("task %s, want %s", got.State, tt.state)
			}
			var open int
			if err := b.db.QueryRow(ctx, `SELECT count(*) FROM task_reconciliation_current WHERE task_id = $1 AND state = 'open'`, tk.ID).Scan(&open); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[tt.sideEffecting]; open != want {
				t.Fatalf("%d open reconciliations, want %d", open, want)
			}
			if !tt.sideEffecting {
				return
			}
			// An operator settles it; the task runs again; settling twice is refused.
			recs, err := b.svc.ListReconciliations(ctx, false)
			if err != nil || len(recs) != 1 || recs[0].TaskID != tk.ID || recs[0].Operation != "act" {
				t.Fatalf("list: %v %+v", err, recs)
			}
			rec, err := b.svc.ResolveReconciliation(ctx, "operator:test", recs[0].ID, "no_side_effect", "the order never reached the shop")
			if err != nil || rec.State != "resolved" || rec.Resolution != "no_side_effect" || rec.ResolvedBy != "operator:test" {
				t.Fatalf("resolve: %v %+v", err, rec)
			}
			if got, _ := b.svc.GetTask(ctx, b.actor, tk.ID); got.State != task.Running {
				t.Fatalf("after the reconciliation, task %s", got.State)
			}
			if _, err := b.svc.ResolveReconciliation(ctx, "operator:test", recs[0].ID, "applied", "again"); app.AsError(err) == nil ||
				app.AsError(err).Code != app.CodeInvalidTransition {
				t.Fatalf("second resolve: %v", err)
			}
			if _, err := b.svc.ResolveReconciliation(ctx, "operator:test", recs[0].ID, "maybe", "x"); app.AsError(err) == nil {
				t.Fatal("an unknown outcome was accepted")
			}
		})
	}
}

// A node whose heartbeat lapses while it runs a command (a stalled machine) is taken for dead:
// its own recovery leaves the command alone, as it is running it; another node's recovery
// classifies it. When the effect returns, the node answers what the key replays: one receipt,
// never a second one (once a 500 from a duplicate receipt).
func TestRecoveryDuringDispatch(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.InterruptedResponse = interrupted })
	ctx := context.Background()
	other, err := app.NewService(store.New(b.db), app.Config{NodeID: "node_other", InterruptedResponse: interrupted})
	if err != nil {
		t.Fatal(err)
	}
	tk := b.create(t, app.CreateTaskInput{})
	call := b.call(t, "act", []string{"bs_x"}, "stalled", "stalled-key")
	dispatch := func(context.Context) (any, error) {
		if err := store.New(b.db).StopNode(ctx, "node_test"); err != nil {
			return nil, err
		}
		if n, err := b.svc.RecoverInterrupted(ctx, time.Now()); err != nil || n != 0 {
			t.Errorf("the running node classified %d of its own live commands (%v)", n, err)
		}
		if n, err := other.RecoverInterrupted(ctx, time.Now()); err != nil || n != 1 {
			t.Errorf("another node classified %d (%v), want 1", n, err)
		}
		return nil, nil
	}
	resp, err := b.svc.RunTwoPhaseForTest(ctx, call, tk.ID, &recorder[*app.TaskResult]{}, true, dispatch, false)
	var body struct {
		Receipt struct{ Outcome task.Outcome } `json:"receipt"`
	}
	if err != nil || !resp.Replayed || resp.Status != 200 || json.Unmarshal(resp.Body, &body) != nil ||
		body.Receipt.Outcome != task.ReconciliationRequired {
		t.Fatalf("phase 3 after recovery: %v %d %s", err, resp.Status, resp.Body)
	}
	var receipts int
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM task_receipt r JOIN task_command c USING (command_id)
		WHERE c.task_id = $1 AND c.operation = 'act'`, tk.ID).Scan(&receipts); err != nil || receipts != 1 {
		t.Fatalf("%d receipts for the command (%v), want 1", receipts, err)
	}
}

// A side effect interrupted while its task waits for an approval (a request_approval came in while
// the command ran, then the node died) opens its reconciliation without a transition; resolving
// the last approval does not let the task run with the reconciliation open: it waits for the
// operator, and runs once the reconciliation is settled.
func TestApprovalResolvedWithAReconciliationOpen(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.InterruptedResponse = interrupted })
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})
	dispatch := func(context.Context) (any, error) { return nil, nil }
	if _, err := b.svc.RunTwoPhaseForTest(ctx, b.call(t, "act", []string{"bs_x"}, "pay"), tk.ID, &recorder[*app.TaskResult]{}, true, dispatch, true); err == nil {
		t.Fatal("phase 3 was meant to fail")
	}
	req := b.call(t, "request_approval", []string{tk.ID}, "why")
	req.Actor.Subject, req.ClientID = "agent:local", app.WorkloadLocalAgent // the operator (b.actor) resolves: separation of duties
	r := &recorder[*app.ApprovalResult]{}
	if _, err := b.svc.RequestApproval(ctx, req, tk.ID, "why", r); err != nil {
		t.Fatal(err)
	}
	apr := r.result.Approval
	if err := store.New(b.db).StopNode(ctx, "node_test"); err != nil {
		t.Fatal(err)
	}
	if n, err := b.svc.RecoverInterrupted(ctx, time.Now()); err != nil || n != 1 {
		t.Fatalf("recovered %d (%v), want 1", n, err)
	}
	state := func() task.State {
		got, err := b.svc.GetTask(ctx, b.actor, tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}
	if st := state(); st != task.WaitingForApproval {
		t.Fatalf("with the approval pending and the reconciliation open: %s", st)
	}
	if _, err := b.svc.ResolveApproval(ctx, b.call(t, "resolve_approval", []string{apr.ID}, "approve"), apr.ID, "approve", "", &recorder[*app.ApprovalResult]{}); err != nil {
		t.Fatal(err)
	}
	if st := state(); st != task.WaitingForExternalInput {
		t.Fatalf("after the last approval, with the reconciliation open: %s, want waiting_for_external_input", st)
	}
	recs, err := b.svc.ListReconciliations(ctx, false)
	if err != nil || len(recs) != 1 {
		t.Fatalf("open reconciliations: %v %+v", err, recs)
	}
	if _, err := b.svc.ResolveReconciliation(ctx, "operator:test", recs[0].ID, "no_side_effect", "nothing reached the site"); err != nil {
		t.Fatal(err)
	}
	if st := state(); st != task.Running {
		t.Fatalf("after the settlement: %s", st)
	}
	var triggers []string
	for _, e := range b.events(t, tk.ID) {
		if e.Type == "task.state_changed" {
			triggers = append(triggers, fmt.Sprint(e.Data["trigger"]))
		}
	}
	if want := "admit,start,await_approval,approval_resolved,await_external_input,external_input_resolved"; strings.Join(triggers, ",") != want {
		t.Fatalf("transitions %v, want %s", triggers, want)
	}
}
