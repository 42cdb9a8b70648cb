package task_test

import (
	"testing"

	"github.com/originweave/bap/server/internal/task"
)

// What a task waits for outside itself (a person's handoff, open reconciliations) moves only a
// running task into waiting_for_external_input and only a waiting one, with nothing left to wait
// for, back to running; every state and every combination of waits is in the table, and each move
// is exactly the lifecycle's transition for its trigger.
func TestAfterWaitsEveryState(t *testing.T) {
	t.Parallel()
	waits := []task.Waits{
		{},
		{HandedOff: true},
		{Reconciliations: 1},
		{Reconciliations: 2},
		{HandedOff: true, Reconciliations: 1},
	}
	type want struct {
		to      task.State
		trigger task.Trigger
	}
	// Every pair not listed keeps its state with no transition.
	moves := map[task.State]map[bool]want{
		task.Running:                 {true: {task.WaitingForExternalInput, task.AwaitExternalInput}},
		task.WaitingForExternalInput: {false: {task.Running, task.ExternalInputResolved}},
	}
	for _, from := range append(task.AllStates(), "bogus") {
		for _, w := range waits {
			to, trigger, transition := task.AfterWaits(from, w)
			exp, moved := moves[from][w.Any()]
			if !moved {
				exp = want{from, ""}
			}
			if to != exp.to || trigger != exp.trigger || transition != moved {
				t.Errorf("AfterWaits(%s, %+v) = %s, %q, %v; want %s, %q, %v", from, w, to, trigger, transition, exp.to, exp.trigger, moved)
			}
			if transition {
				if next, err := task.Next(from, trigger); err != nil || next != to {
					t.Errorf("AfterWaits(%s, %+v) moves to %s but Next(%s) = %s, %v", from, w, to, trigger, next, err)
				}
			}
		}
	}
}

// The story of a person's interrupted act during a handoff, step by step: the reconciliation it
// opens keeps the task handed off; the task runs again only once the handoff is returned and the
// reconciliation settled, in either order.
func TestAfterWaitsHandoffWithReconciliation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		steps []task.Waits // what the task waits for after each step
		want  []task.State
	}{
		{"hand back first", []task.Waits{
			{HandedOff: true},                     // take over
			{HandedOff: true, Reconciliations: 1}, // the person's act is interrupted
			{Reconciliations: 1},                  // hand back
			{},                                    // the operator settles it
		}, []task.State{task.WaitingForExternalInput, task.WaitingForExternalInput, task.WaitingForExternalInput, task.Running}},
		{"settle first", []task.Waits{
			{HandedOff: true},
			{HandedOff: true, Reconciliations: 1},
			{HandedOff: true}, // the person settles it during the handoff
			{},                // hand back
		}, []task.State{task.WaitingForExternalInput, task.WaitingForExternalInput, task.WaitingForExternalInput, task.Running}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := task.Running
			for i, w := range tt.steps {
				st, _, _ = task.AfterWaits(st, w)
				if st != tt.want[i] {
					t.Fatalf("step %d (%+v): %s, want %s", i, w, st, tt.want[i])
				}
			}
		})
	}
}
