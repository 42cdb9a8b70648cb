package app

import (
	"context"

	"github.com/originweave/bap/server/internal/task"
)

// RunTwoPhaseForTest exposes the two-phase command machinery to the external tests, with a
// dispatch function standing in for the browser.
func (s *Service) RunTwoPhaseForTest(ctx context.Context, call Call, taskID string, r Responder, sideEffecting bool,
	dispatch func(ctx context.Context) (any, error), finishFails bool,
) (Response, error) {
	return s.runTwoPhase(ctx, call, taskID, r, twoPhase{
		sideEffecting: sideEffecting,
		prepare: func(ctx context.Context, c *commandCtx) (any, error) {
			if c.t.State == task.Admitted {
				if err := c.transition(ctx, c.t, task.Start, call.Operation); err != nil {
					return nil, err
				}
			}
			if c.t.State != task.Running {
				return nil, Errorf(CodeInvalidTransition, "task is %s", c.t.State)
			}
			return nil, nil
		},
		dispatch: func(ctx context.Context, _ any) (any, error) { return dispatch(ctx) },
		finish: func(ctx context.Context, c *commandCtx, _, out any, err error) (any, task.Outcome, error) {
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
