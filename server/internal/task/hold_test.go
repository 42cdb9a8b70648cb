package task_test

import (
	"errors"
	"testing"

	"github.com/originweave/bap/server/internal/task"
)

// An approval's hold moves only a running task; a task handed off to a person, or already waiting
// for approval, keeps its state; every other state (and a reconciliation's wait) refuses it.
func TestHoldEveryState(t *testing.T) {
	t.Parallel()
	type want struct {
		to         task.State
		transition bool
	}
	allowed := map[[2]any]want{
		{task.Running, false}:                {task.WaitingForApproval, true},
		{task.Running, true}:                 {task.WaitingForApproval, true},
		{task.WaitingForApproval, false}:     {task.WaitingForApproval, false},
		{task.WaitingForApproval, true}:      {task.WaitingForApproval, false},
		{task.WaitingForExternalInput, true}: {task.WaitingForExternalInput, false},
	}
	for _, from := range append(task.AllStates(), "bogus") {
		for _, handedOff := range []bool{false, true} {
			to, transition, err := task.Hold(from, handedOff)
			w, ok := allowed[[2]any{from, handedOff}]
			if !ok {
				if !errors.Is(err, task.ErrInvalidTransition) || to != "" || transition {
					t.Errorf("Hold(%s, handed off %v) = %q, %v, %v; want a refused transition", from, handedOff, to, transition, err)
				}
				continue
			}
			if err != nil || to != w.to || transition != w.transition {
				t.Errorf("Hold(%s, handed off %v) = %q, %v, %v; want %q, %v", from, handedOff, to, transition, err, w.to, w.transition)
			}
			if transition {
				// A hold that moves the task is exactly the lifecycle's await_approval.
				if next, err := task.Next(from, task.AwaitApproval); err != nil || next != to {
					t.Errorf("Hold(%s) moves to %s but Next(await_approval) = %s, %v", from, to, next, err)
				}
			}
		}
	}
}
