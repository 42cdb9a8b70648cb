package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// Cancellation of in-flight browser work (CONTRACT "Task lifecycle": cancel_task stops in-flight
// browser I/O and records the exact outcome class of the interrupted command within a bounded
// time). See docs/adr/0009-cancellation-of-in-flight-commands.md.
//
// Every two-phase command of this node is registered, from inside its phase 1 transaction (while
// it holds the task's row lock) until its phase 3 transaction committed, with a dispatch context
// it can be stopped through. cancel_task is itself a two-phase command (not registered):
//
//  1. phase 1 records it; a task that cannot be cancelled is refused there (rejected receipt), and
//     a refused or replayed request stops nothing;
//  2. phase 2 marks the task as being cancelled, cancels the dispatch context of each of its
//     registered commands with errTaskCancelled (a command registered while the mark stands is
//     cancelled at once, so it never dispatches), and waits, at most Config.CancelDeadline, until
//     none is registered: each one's receipt, with the outcome class cancelProblem gives it, has
//     committed by then;
//  3. phase 3 cancels the task (pending approvals → cancelled); the mark is lifted after it.
//
// cancel_task holds no row lock while it waits, and a command holds the task's row lock only in
// its own phase 1 and phase 3 transactions, so neither waits on the other inside PostgreSQL. A
// command whose phase 1 commits after the cancellation finds the task cancelled and is rejected.

// errTaskCancelled is the cause with which cancel_task cancels a command's dispatch context.
var errTaskCancelled = errors.New("the task was cancelled")

// cancellableOps are the two-phase operations whose dispatch cancel_task stops. Others (closing a
// session) run to their end; cancel_task still waits for them, within its deadline.
var cancellableOps = map[string]bool{
	"navigate": true, "act": true, "resolve_approval": true, "create_browser_session": true, "capture_evidence": true,
}

// flights is the registry of this node's two-phase commands between phase 1 and phase 3.
type flights struct {
	mu    sync.Mutex
	tasks map[flightKey]*taskFlights
}

type flightKey struct{ tenant, taskID string }

type taskFlights struct {
	cmds       map[*flight]struct{}
	cancelling int           // cancel_task calls under way for the task
	changed    chan struct{} // closed and replaced whenever cmds shrinks
}

// flight is one registered command.
type flight struct {
	key         flightKey
	ctx         context.Context //nolint:containedctx // the dispatch context: the flight is the in-flight command, and cancel_task ends it
	cancel      context.CancelCauseFunc
	cancellable bool
}

func (f *flights) entry(k flightKey) *taskFlights {
	if f.tasks == nil {
		f.tasks = make(map[flightKey]*taskFlights)
	}
	tf := f.tasks[k]
	if tf == nil {
		tf = &taskFlights{cmds: make(map[*flight]struct{}), changed: make(chan struct{})}
		f.tasks[k] = tf
	}
	return tf
}

// begin registers a command of the task; its dispatch context is parent's values without its
// cancellation (a client that goes away does not stop an effect half-way), stopped only by
// cancel_task. A command registered while its task is being cancelled is cancelled at once.
func (f *flights) begin(parent context.Context, tenant, taskID string, cancellable bool) *flight {
	fl := &flight{key: flightKey{tenant, taskID}, cancellable: cancellable}
	fl.ctx, fl.cancel = context.WithCancelCause(context.WithoutCancel(parent))
	f.mu.Lock()
	defer f.mu.Unlock()
	tf := f.entry(fl.key)
	tf.cmds[fl] = struct{}{}
	if tf.cancelling > 0 && cancellable {
		fl.cancel(errTaskCancelled)
	}
	return fl
}

// end unregisters a command (after its receipt committed, or when it never got to dispatch).
func (f *flights) end(fl *flight) {
	if fl == nil {
		return
	}
	fl.cancel(nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	tf := f.tasks[fl.key]
	if tf == nil {
		return
	}
	if _, ok := tf.cmds[fl]; !ok {
		return
	}
	delete(tf.cmds, fl)
	close(tf.changed)
	tf.changed = make(chan struct{})
	if len(tf.cmds) == 0 && tf.cancelling == 0 {
		delete(f.tasks, fl.key)
	}
}

// stop cancels the task's registered commands and waits until none is left, ctx ends or the
// deadline passes; it returns how many were still registered then, and release, to be called
// once the task's cancellation committed (or failed).
func (f *flights) stop(ctx context.Context, tenant, taskID string, deadline time.Duration) (left int, release func()) {
	k := flightKey{tenant, taskID}
	f.mu.Lock()
	tf := f.entry(k)
	tf.cancelling++
	for fl := range tf.cmds {
		if fl.cancellable {
			fl.cancel(errTaskCancelled)
		}
	}
	release = func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		tf.cancelling--
		if len(tf.cmds) == 0 && tf.cancelling == 0 && f.tasks[k] == tf {
			delete(f.tasks, k)
		}
	}
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	for len(tf.cmds) > 0 {
		ch := tf.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			f.mu.Lock()
			left = len(tf.cmds)
			f.mu.Unlock()
			return left, release
		case <-ctx.Done():
			f.mu.Lock()
			left = len(tf.cmds)
			f.mu.Unlock()
			return left, release
		}
		f.mu.Lock()
	}
	f.mu.Unlock()
	return 0, release
}

// stopInFlight is phase 2 of cancel_task for a task of the caller's tenant.
func (s *Service) stopInFlight(ctx context.Context, tenant, taskID string) (release func()) {
	left, release := s.flights.stop(ctx, tenant, taskID, s.cfg.CancelDeadline)
	if left > 0 {
		s.cfg.Logger.Warn("cancel_task: in-flight commands did not finish within the cancel deadline; their receipts follow when they do",
			"task_id", taskID, "commands", left, "deadline", s.cfg.CancelDeadline)
	}
	return release
}

// cancelledError is the dispatch error of a command that cancel_task interrupted; err is what
// dispatch returned, nil when the command was stopped before it was dispatched.
type cancelledError struct{ err error }

func (e *cancelledError) Error() string {
	if e.err == nil {
		return "the task was cancelled before this command was dispatched"
	}
	return "the task was cancelled while this command ran: " + e.err.Error()
}

func (e *cancelledError) Unwrap() error { return e.err }

// cancelProblem classifies a command interrupted by cancel_task (ok=false for any other error):
//   - stopped before it was dispatched, or before it reached the page: no_side_effect;
//   - a navigation stopped before its document committed (the browser reported it aborted):
//     no_side_effect — the browsing context keeps its document;
//   - a navigation stopped after its document committed, or without the browser confirming it had
//     not: unknown_outcome (the page may have changed; the client observes before relying on it);
//   - an action stopped after its input may have reached the page: reconciliation_required.
//
// A failure the browser reports for its own reason (the policy, a lost session) keeps its class.
// The problem is 409 invalid_transition: the command could not complete because its task was
// cancelled; the receipt it carries says how far it got.
func cancelProblem(err error, sideEffecting bool) (*Error, task.Outcome, bool) {
	var ce *cancelledError
	if !errors.As(err, &ce) {
		return nil, "", false
	}
	problem := func(detail string) *Error {
		return &Error{Code: CodeInvalidTransition, Detail: "the task was cancelled: " + detail}
	}
	if ce.err == nil {
		return problem("this command was stopped before it was dispatched; nothing was done"), task.NoSideEffect, true
	}
	var se *page.StoppedError
	if errors.As(ce.err, &se) {
		switch {
		case !se.Started:
			return problem("this command was stopped before it reached the page; nothing was done"), task.NoSideEffect, true
		case !sideEffecting && !se.Committed:
			return problem("the navigation was stopped before its document committed; the page is unchanged"), task.NoSideEffect, true
		case !sideEffecting:
			return problem("the navigation was stopped after its document may have committed; the page may have changed"), task.UnknownOutcome, true
		default:
			return problem("the action was stopped after its input may have reached the page; an operator must reconcile it"), task.ReconciliationRequired, true
		}
	}
	if e, outcome := browserProblem(ce.err, sideEffecting); e != nil {
		return e, outcome, true
	}
	return problem("this command was interrupted; its outcome is not known"), task.ClassifyInterrupted(sideEffecting), true
}
