package app

import (
	"context"

	"github.com/originweave/bap/server/internal/task"
)

// RunTwoPhaseForTest exposes the two-phase command machinery to the external tests, with a
// dispatch function standing in for the browser.
func (s *Service) RunTwoPhaseForTest(ctx context.Context, call Call, taskID string, r Responder[*TaskResult], sideEffecting bool,
	dispatch func(ctx context.Context) (any, error), finishFails bool,
) (Response, error) {
	return runTwoPhase(ctx, s, call, taskID, r, twoPhase[struct{}, any, *TaskResult]{
		sideEffecting: sideEffecting,
		prepare: func(ctx context.Context, c *commandCtx) (struct{}, error) {
			if c.t.State == task.Admitted {
				if err := c.transition(ctx, c.t, task.Start, call.Operation); err != nil {
					return struct{}{}, err
				}
			}
			if c.t.State != task.Running {
				return struct{}{}, Errorf(CodeInvalidTransition, "task is %s", c.t.State)
			}
			return struct{}{}, nil
		},
		dispatch: func(ctx context.Context, _ struct{}) (any, error) { return dispatch(ctx) },
		finish: func(ctx context.Context, c *commandCtx, _ struct{}, out any, err error) (*TaskResult, task.Outcome, error) {
			if finishFails {
				return nil, "", context.DeadlineExceeded // not an *Error: phase 3 rolls back, as in a crash
			}
			if e, outcome := browserProblem(err, sideEffecting); e != nil {
				return nil, outcome, e // a browser error, or an interruption by cancel_task
			}
			if err != nil {
				return nil, task.Rejected, AsError(err)
			}
			rc, rerr := c.receipt(ctx, task.Applied, "", "")
			if rerr != nil {
				return nil, "", rerr
			}
			return &TaskResult{Task: c.t, Receipt: rc}, "", nil
		},
	})
}

// OnDeliveryWaitForTest calls f when a redelivery starts waiting for its first delivery's command.
func (s *Service) OnDeliveryWaitForTest(f func()) { s.deliveryWaits = f }
