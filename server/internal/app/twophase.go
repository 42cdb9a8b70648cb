package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/idempotency"
	"github.com/originweave/bap/server/internal/task"
)

// A two-phase command has an effect outside the database (the browser). Its key and command are
// recorded and committed before dispatch (phase 1); the effect runs with no transaction open
// (phase 2); its receipt, events and stored response commit afterwards (phase 3). A crash between
// phase 1 and phase 3 leaves an in-flight claim whose command has no receipt: recovery classifies
// it (unknown_outcome for a safe command, reconciliation_required for a side-effecting one) and
// the command is never run again.

// twoPhase describes one two-phase command: P is what phase 1 hands the effect (the plan), O what
// the effect hands phase 3, R the result phase 3 renders. All are typed, so no assertion recovers
// them.
type twoPhase[P, O, R any] struct {
	// sideEffecting commands go to reconciliation when interrupted; safe ones become unknown_outcome.
	sideEffecting bool
	// prepare runs in phase 1's transaction after the command is recorded: check the task, load
	// what dispatch needs. An *Error from prepare is recorded as a rejection.
	prepare func(ctx context.Context, c *commandCtx) (plan P, err error)
	// dispatch performs the effect, with no transaction open.
	dispatch func(ctx context.Context, plan P) (out O, err error)
	// finish runs in phase 3's transaction: record what happened (events, rows) and return the
	// result to render, or an *Error to record with outcome (the dispatch ran, so phase 3 always
	// records: any other error fails the commit).
	finish func(ctx context.Context, c *commandCtx, plan P, out O, dispatchErr error) (result R, outcome task.Outcome, err error)
	// unregistered commands are not in the registry cancel_task stops and waits for (cancel_task
	// itself).
	unregistered bool
}

// runTwoPhase executes a two-phase command for call. A redelivery of a forwarded command whose
// first delivery this process still runs waits for it and answers what it answered; one whose
// first delivery's node is dead has that command classified at once and answers the
// classification (inbox.go). (A function, not a method: Go methods take no type parameters.)
func runTwoPhase[P, O, R any](ctx context.Context, s *Service, call Call, taskID string, r Responder[R], op twoPhase[P, O, R]) (Response, error) {
	if resp, ok, err := s.replayAnswered(ctx, call); ok || err != nil { // a retry: one read (answered.go)
		return resp, err
	}
	var settled firstDeliverySettled
	for {
		resp, err := runTwoPhaseOnce(ctx, s, call, taskID, r, op)
		again, err := s.awaitFirstDelivery(ctx, err, &settled)
		if !again {
			s.noteAnswered(call, resp, err)
			return resp, err
		}
	}
}

// runTwoPhaseOnce is one run of runTwoPhase.
func runTwoPhaseOnce[P, O, R any](ctx context.Context, s *Service, call Call, taskID string, r Responder[R], op twoPhase[P, O, R]) (resp Response, err error) {
	ctx, sp := s.startCommand(ctx, call, taskID) // phase 1, the effect and phase 3 are its children
	var plan P
	var cmd *Command
	var fl *flight // registered for cancel_task from phase 1 until phase 3 committed (cancel.go)
	var taskDeadline *time.Time
	defer func() {
		s.flights.end(fl)
		if cmd != nil {
			s.endRun(cmd.ID)
		}
		endCommand(sp, cmd, resp, err)
	}()
	dispatched := false
	err = s.store.InTx(ctx, func(tx Tx) error {
		var zero P
		resp, plan, cmd, dispatched = Response{}, zero, nil, false
		s.flights.end(fl) // a retried transaction registers again
		fl = nil
		if cmd != nil {
			s.endRun(cmd.ID) // a retried transaction claims under a new command id
		}
		cmd = s.newCommand(call)
		// Marked before the claim can commit, unmarked once phase 3 has (or the claim rolled back).
		s.running.Store(cmd.ID, make(chan struct{}))
		done, replay, err := s.claim(ctx, tx, call, cmd)
		if err != nil || done {
			resp = replay
			return err
		}
		c, err := s.beginOnTask(ctx, tx, cmd, taskID, op.sideEffecting)
		if err != nil {
			return err
		}
		p, err := op.prepare(ctx, c)
		var e *Error
		if errors.As(err, &e) {
			refused, rerr := c.reject(ctx, e)
			if rerr != nil {
				return rerr
			}
			resp, err = r.Failure(refused.err, refused.receipt)
			if err != nil {
				return err
			}
			return tx.CompleteIdempotency(ctx, call.Actor.Tenant, call.IdempotencyKey, resp.Status, resp.Body)
		}
		if err != nil {
			return err
		}
		// Phase 1 writes the task row too (a first command starts an admitted task).
		if err := tx.UpdateTask(ctx, c.t); err != nil {
			return err
		}
		plan, dispatched = p, true
		taskDeadline = c.t.Deadline
		// Registered while the task's row is locked: a cancel_task that commits after this
		// transaction finds the command registered, one that committed before was seen above.
		if !op.unregistered {
			fl = s.flights.begin(ctx, cmd.Tenant, taskID, cancellableOps[call.Operation])
		}
		return nil
	})
	if err != nil || !dispatched {
		return resp, err
	}

	// Phase 2: the effect. A client that goes away does not cancel an effect half-way; the
	// command's own deadline (in plan) bounds it, and cancel_task stops it through fl.ctx.
	dctx := context.WithoutCancel(ctx) //nolint:contextcheck // inherited on purpose, without the client's cancellation (above)
	if fl != nil {
		dctx = fl.ctx
	}
	if taskDeadline != nil {
		// No command outlives its task: the task's deadline bounds it as well as its own timeout.
		var cancel context.CancelFunc
		dctx, cancel = context.WithDeadline(dctx, *taskDeadline)
		defer cancel()
	}
	var out O
	var dispatchErr error
	if errors.Is(context.Cause(dctx), errTaskCancelled) {
		dispatchErr = &cancelledError{} // stopped before dispatch
	} else {
		out, dispatchErr = op.dispatch(dctx, plan)
		if dispatchErr != nil && errors.Is(context.Cause(dctx), errTaskCancelled) {
			dispatchErr = &cancelledError{err: dispatchErr}
		}
	}

	// Phase 3.
	err = s.store.InTx(context.WithoutCancel(ctx), func(tx Tx) error {
		c := &commandCtx{s: s, tx: tx, cmd: cmd, now: s.cfg.Now()}
		// Locked first, as recovery locks it (then the task): a node that another node took for
		// dead, while this one still ran the command, finds its outcome classified already and
		// answers what the key replays rather than issuing a second receipt.
		if _, err := tx.LockCommand(ctx, cmd.Tenant, cmd.ID); errors.Is(err, ErrNotFound) {
			s.cfg.Logger.Warn("command classified by recovery while this node ran it", "command", cmd.ID, "operation", cmd.Operation)
			done, replay, err := s.claim(ctx, tx, call, cmd)
			if err == nil && !done {
				err = fmt.Errorf("command %s has a receipt but its key %q was free", cmd.ID, call.IdempotencyKey)
			}
			resp = replay
			return err
		} else if err != nil {
			return err
		}
		t, err := tx.LockTask(ctx, cmd.Tenant, taskID)
		if err != nil {
			return err
		}
		c.t = t
		result, outcome, err := op.finish(ctx, c, plan, out, dispatchErr)
		var e *Error
		switch {
		case errors.As(err, &e):
			code := e.Code
			if outcome != task.Rejected {
				code = "" // a receipt names a problem code only when it is rejected (task_receipt_check)
			}
			rc, rerr := c.receipt(ctx, outcome, code, e.Detail)
			if rerr != nil {
				return rerr
			}
			resp, err = r.Failure(e, rc)
		case err != nil:
			return err
		default:
			resp, err = r.Success(result)
		}
		if err != nil {
			return fmt.Errorf("rendering response: %w", err)
		}
		return tx.CompleteIdempotency(ctx, cmd.Tenant, call.IdempotencyKey, resp.Status, resp.Body)
	})
	return resp, err
}

// claim claims call's key for cmd. done=true means the request is answered already (a replay in
// resp) or refused (err).
func (s *Service) claim(ctx context.Context, tx Tx, call Call, cmd *Command) (done bool, resp Response, err error) {
	existing, claimed, err := tx.ClaimIdempotency(ctx, IdempotencyClaim{
		Tenant: call.Actor.Tenant, Key: call.IdempotencyKey, Operation: call.Operation,
		Fingerprint: call.Fingerprint, CommandID: cmd.ID, NodeID: s.cfg.NodeID,
		ExpiresAt: cmd.RecordedAt.Add(s.cfg.IdempotencyTTL),
	})
	if err != nil {
		return true, Response{}, fmt.Errorf("claiming idempotency key: %w", err)
	}
	redelivered := false
	if call.Delivery != nil {
		if redelivered, err = s.claimDelivery(ctx, tx, call, claimed); err != nil {
			return true, Response{}, err
		}
	}
	if claimed {
		return false, Response{}, nil
	}
	switch judge(existing, call) {
	case idempotency.Replay:
		return true, Response{Status: existing.Status, Body: existing.Body, Replayed: true}, nil
	case idempotency.InFlight:
		e := &Error{Code: CodeIdempotencyInFlight,
			Detail: "a request with this Idempotency-Key is still executing; retry later", RetryAfter: s.cfg.InFlightRetryAfter}
		if redelivered {
			return true, Response{}, &firstDeliveryRunning{claim: *existing, err: e} // awaited or classified (inbox.go)
		}
		return true, Response{}, e
	default:
		return true, Response{}, &Error{Code: CodeIdempotencyKeyReused,
			Detail: "this Idempotency-Key was used with another operation or body"}
	}
}

// judge is what call's key may do with its recorded claim ex (idempotency.Judge), comparing a
// record of a release before ADR 0015 with the request's unkeyed fingerprint (keys.go).
func judge(ex *IdempotencyClaim, call Call) idempotency.Verdict {
	fp := call.Fingerprint
	if ex.LegacyFingerprint {
		fp = call.LegacyFingerprint
	}
	return idempotency.Judge(ex.Operation, ex.Fingerprint, ex.Completed, call.Operation, fp)
}

// replayFirst answers a request whose Idempotency-Key already holds a completed first response
// for the same operation and body with that response, before anything else is checked. The
// checks a command makes before its claim read the present (the browser is up, the node handle
// still names an element of the page, the artifact or secret still exists), and a retry must
// get its first answer whatever became of them since: a retried act whose approval ran and
// whose page moved on answered 409 stale_node_handle instead of its first 202. Anything but a
// completed replay (no record, in flight, another body) goes on to the command, whose claim
// answers it. A forwarded delivery is recorded in the inbox as its claim would record it.
func (s *Service) replayFirst(ctx context.Context, call Call) (Response, bool, error) {
	if call.IdempotencyKey == "" {
		return Response{}, false, nil
	}
	ex, err := s.store.IdempotencyRecord(ctx, call.Actor.Tenant, call.IdempotencyKey)
	if errors.Is(err, ErrNotFound) {
		return Response{}, false, nil
	}
	if err != nil {
		return Response{}, false, err
	}
	if judge(ex, call) != idempotency.Replay {
		return Response{}, false, nil
	}
	if call.Delivery != nil {
		if err := s.store.InTx(ctx, func(tx Tx) error {
			_, err := s.claimDelivery(ctx, tx, call, false)
			return err
		}); err != nil {
			return Response{}, false, err
		}
	}
	return Response{Status: ex.Status, Body: ex.Body, Replayed: true}, true, nil
}

// RecoverInterrupted classifies the commands that nodes which stopped or stopped heartbeating
// (before staleBefore) left between dispatch and receipt: a safe command gets unknown_outcome (the
// client may retry it with a new key); a side-effecting one gets reconciliation_required, opens a
// task_reconciliation and moves its running task to waiting_for_external_input. Its key then
// replays `200 {"receipt": …}`. Nothing is ever dispatched again.
func (s *Service) RecoverInterrupted(ctx context.Context, staleBefore time.Time) (int, error) {
	claims, err := s.store.OrphanedClaims(ctx, staleBefore, 100)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, cl := range claims {
		if _, live := s.running.Load(cl.CommandID); live {
			continue // this process is running it and records its outcome itself
		}
		if err := s.recoverClaim(ctx, cl); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// recoverClaim classifies one orphaned claim's command (RecoverInterrupted; a redelivery whose
// first delivery's node is dead, inbox.go). Its command is locked first, as phase 3 locks it, so
// of recovery and a run that outlived its node's heartbeat exactly one records the receipt; a
// command that has one already (classified meanwhile) is left as it is.
func (s *Service) recoverClaim(ctx context.Context, cl IdempotencyClaim) error {
	err := s.store.InTx(ctx, func(tx Tx) error {
		cmd, err := tx.LockCommand(ctx, cl.Tenant, cl.CommandID)
		if errors.Is(err, ErrNotFound) {
			// The claim's command never committed, so nothing ran: forget the claim (a claim
			// completed meanwhile is not in flight, and stays).
			return tx.DeleteIdempotency(ctx, cl.Tenant, cl.Key)
		}
		if err != nil {
			return err
		}
		t, err := tx.LockTask(ctx, cl.Tenant, cmd.TaskID)
		if err != nil {
			return err
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{ID: cmd.ID, Tenant: cmd.Tenant, TaskID: cmd.TaskID,
			Operation: cmd.Operation, Actor: systemActor}, t: t, now: s.cfg.Now()}
		outcome := task.ClassifyInterrupted(cmd.SideEffecting)
		detail := "the node running this command stopped before its outcome was recorded"
		if cmd.SideEffecting {
			if err := c.openReconciliation(ctx, cmd.ID, cmd.Operation, "interrupted"); err != nil {
				return err
			}
		}
		rc, err := c.receipt(ctx, outcome, "", detail)
		if err != nil {
			return err
		}
		if s.cfg.InterruptedResponse == nil {
			return errors.New("app: Config.InterruptedResponse is not set")
		}
		resp, err := s.cfg.InterruptedResponse(rc)
		if err != nil {
			return err
		}
		return tx.CompleteIdempotency(ctx, cl.Tenant, cl.Key, resp.Status, resp.Body)
	})
	if err != nil {
		return fmt.Errorf("recovering command %s: %w", cl.CommandID, err)
	}
	return nil
}
