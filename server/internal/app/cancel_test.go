package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// cancel_task stops a command whose dispatch honours its context and waits for its receipt; a
// dispatch that ignores cancellation holds cancel_task up only until the cancel deadline; a
// command recorded while the cancellation is under way is never dispatched.
func TestCancelTaskStopsInFlightCommands(t *testing.T) {
	t.Parallel()
	const deadline = 700 * time.Millisecond
	b := setup(t, func(c *app.Config) { c.CancelDeadline = deadline })
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})

	// A navigation that stops when told to, before anything reached the page.
	polite := make(chan struct{})
	navDone := make(chan *recorder[*app.TaskResult], 1)
	go func() {
		r := &recorder[*app.TaskResult]{}
		_, err := b.svc.RunTwoPhaseForTest(ctx, b.call(t, "navigate", []string{"bs_x"}, "polite"), tk.ID, r, false,
			func(ctx context.Context) (any, error) {
				close(polite)
				<-ctx.Done()
				return nil, &page.StoppedError{Started: true}
			}, false)
		if err != nil {
			t.Error(err)
		}
		navDone <- r
	}()
	// An action stuck in a browser that does not answer: it notices the cancellation but goes on.
	stuck := make(chan struct{})
	sawCancel := make(chan struct{})
	release := make(chan struct{})
	actDone := make(chan *recorder[*app.TaskResult], 1)
	go func() {
		<-polite
		r := &recorder[*app.TaskResult]{}
		_, err := b.svc.RunTwoPhaseForTest(ctx, b.call(t, "act", []string{"bs_x"}, "stuck"), tk.ID, r, true,
			func(ctx context.Context) (any, error) {
				close(stuck)
				<-ctx.Done()
				close(sawCancel)
				<-release
				return nil, context.Cause(ctx)
			}, false)
		if err != nil {
			t.Error(err)
		}
		actDone <- r
	}()
	<-stuck

	cancelDone := make(chan time.Duration, 1)
	cancelRec := &recorder[*app.TaskResult]{}
	begin := time.Now()
	go func() {
		if _, err := b.svc.CancelTask(ctx, b.call(t, "cancel_task", []string{tk.ID}, "cancel"), tk.ID, "", cancelRec); err != nil {
			t.Error(err)
		}
		cancelDone <- time.Since(begin)
	}()
	<-sawCancel // the cancellation is under way

	// Recorded now, this command is never dispatched.
	late := &recorder[*app.TaskResult]{}
	if _, err := b.svc.RunTwoPhaseForTest(ctx, b.call(t, "navigate", []string{"bs_x"}, "late"), tk.ID, late, false,
		func(ctx context.Context) (any, error) {
			t.Error("a command recorded during cancel_task was dispatched")
			return nil, nil
		}, false); err != nil {
		t.Fatal(err)
	}
	if late.receipt == nil || late.receipt.Outcome != task.NoSideEffect || late.problem.Code != app.CodeInvalidTransition {
		t.Fatalf("late command: %+v %+v", late.problem, late.receipt)
	}

	nav := <-navDone
	if nav.receipt == nil || nav.receipt.Outcome != task.NoSideEffect {
		t.Fatalf("navigation stopped before commit: %+v %+v", nav.problem, nav.receipt)
	}
	took := <-cancelDone
	if took < deadline || took > deadline+5*time.Second {
		t.Fatalf("cancel_task took %s with a command ignoring it; want about the deadline %s", took, deadline)
	}
	if cancelRec.result == nil || cancelRec.result.Task.State != task.Cancelled {
		t.Fatalf("cancel_task: %+v %+v", cancelRec.result, cancelRec.problem)
	}
	// The stuck action ends later; its receipt is still recorded, never as applied.
	close(release)
	act := <-actDone
	if act.receipt == nil || act.receipt.Outcome != task.ReconciliationRequired {
		t.Fatalf("stuck action: %+v %+v", act.problem, act.receipt)
	}
	got, err := b.svc.GetTask(ctx, b.actor, tk.ID)
	if err != nil || got.State != task.Cancelled {
		t.Fatalf("task after the stuck action ended: %v %v", got, err)
	}
}
