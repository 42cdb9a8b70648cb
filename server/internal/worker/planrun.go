package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// planRun is one worker's run of one claimed task.
type planRun struct {
	w   *Workers
	s   Service
	log *slog.Logger
	// The run is the lease's lifetime: ctx ends when the lease is lost or the drain times out
	// (Workers.run's heartbeat), stopping when the node shuts down. Every step of the run works
	// under them, so they live with the run instead of being threaded through each method.
	ctx      context.Context //nolint:containedctx // the run's lifetime, see above
	stopping context.Context //nolint:containedctx // ends when the node shuts down
	claim    *app.LeaseClaim
	actor    app.Actor

	t         *app.Task
	progress  []app.StepProgress
	sessionID string
	opens     int              // sessions opened in this run (their keys)
	history   []map[string]any // failed attempts of this run, for a dead letter's evidence
	// holdReason, when set, holds the next act for a person's approval whatever the approval
	// rules say (the autonomous loop's safety role asked for it).
	holdReason string
}

// stepResult is what became of one attempt at a step (or of settling one a previous run left).
type stepResult struct {
	done       bool
	receiptID  string
	commandID  string
	artifactID string
	held       string // approval id: the step's act waits for an approval
	rerun      bool   // nothing happened: run the step (again) as a new attempt
	wait       bool   // give the lease back and come back after delay
	delay      time.Duration
	problem    *app.Error
	deadReason string // dead-letter at once with this reason (and problem)
	err        error  // not a BAP problem (database, lease lost)
}

// run returns whether to give the lease back, and after what delay the task is runnable again.
func (r *planRun) run() (bool, time.Duration) {
	if err := r.load(); err != nil {
		return r.internal(err)
	}
	if r.t.State.Terminal() {
		return false, 0 // its lease finished with it
	}
	switch r.t.State {
	case task.Admitted, task.Running, task.Checkpointed:
	default:
		return true, 0 // waiting for approval or external input: not runnable until it runs again
	}
	if r.t.Mode == app.ModeAutonomous {
		return r.runAutonomous() // a goal-driven task: the planner proposes its steps (autonomous.go)
	}
	n := len(r.t.Plan)
	i := r.firstNotDone()
	if i < n {
		var res *stepResult
		switch r.progress[i].State {
		case app.StepInFlight:
			res = r.settleInFlight(i)
		case app.StepHeld:
			res = r.settleHeld(i)
		}
		if res != nil && !res.rerun {
			next, release, delay := r.handle(i, res, false)
			if !next {
				return release, delay
			}
			i = r.firstNotDone()
		}
	}
	fresh := false
	if !r.sessionLive() {
		from, err := r.openSession(i)
		if err != nil {
			return r.fail(i, err)
		}
		i, fresh = from, true
	}
	for i < n {
		if r.stopping.Err() != nil {
			return true, 0 // the node is shutting down: someone else carries on
		}
		p := r.progress[i]
		op := r.t.Plan[i].Op
		rerun := false
		if p.State == app.StepDone {
			if sideEffectingOp(op) || !fresh {
				i++ // a side effect never runs twice; a live session needs no rebuilding
				continue
			}
			rerun = true
		}
		res := r.attempt(i, rerun)
		next, release, delay := r.handle(i, res, rerun)
		if !next {
			return release, delay
		}
		if res.done {
			if r.t.ReplayOf != "" && !rerun { // a replay compares each step with the recorded one (ADR 0035)
				cmp, err := r.s.CompareReplayStep(r.ctx, r.claim, r.actor.Subject, i, res.commandID)
				if err != nil {
					return r.internal(err)
				}
				if cmp.Diverged {
					return r.close() // the verdict is recorded: nothing after a divergence is compared
				}
			}
			i++
			continue
		}
		if !r.sessionLive() { // the session was lost: restore one and rebuild the page
			from, err := r.openSession(r.firstNotDone())
			if err != nil {
				return r.fail(i, err)
			}
			i, fresh = from, true
		}
	}
	return r.close()
}

// load reads the task and its progress.
func (r *planRun) load() error {
	t, err := r.s.LeasedTask(r.ctx, r.claim)
	if err != nil {
		return err
	}
	rows, err := r.s.PlanProgress(r.ctx, r.claim)
	if err != nil {
		return err
	}
	r.t = t
	r.progress = make([]app.StepProgress, len(t.Plan))
	for i := range r.progress {
		r.progress[i] = app.StepProgress{Index: i, State: app.StepPending}
	}
	for _, p := range rows {
		if p.Index >= 0 && p.Index < len(r.progress) {
			r.progress[p.Index] = p
		}
	}
	return nil
}

func (r *planRun) firstNotDone() int {
	for i, p := range r.progress {
		if p.State != app.StepDone {
			return i
		}
	}
	return len(r.progress)
}

func (r *planRun) maxAttempts(i int) int {
	if m := r.t.Plan[i].MaxAttempts; m > 0 {
		return m
	}
	return r.w.cfg.DefaultMaxAttempts
}

// internal handles an error that is not a BAP problem: the lease goes back to the queue (its
// attempts untouched) unless it was lost.
func (r *planRun) internal(err error) (bool, time.Duration) {
	if errors.Is(err, app.ErrLeaseLost) || errors.Is(context.Cause(r.ctx), app.ErrLeaseLost) {
		return false, 0
	}
	if errors.Is(err, app.ErrTaskEnded) {
		return false, 0
	}
	if r.ctx.Err() == nil {
		r.log.Error("delegated task run failed; retrying later", "task_id", r.claim.TaskID, "err", err)
	}
	return true, 2 * time.Second
}

// fail handles a problem outside a step (opening a session): fatal ones dead-letter the plan.
func (r *planRun) fail(i int, err error) (bool, time.Duration) {
	e := app.AsError(err)
	if e == nil {
		return r.internal(err)
	}
	if i >= len(r.t.Plan) {
		i = len(r.t.Plan) - 1
	}
	next, release, delay := r.handle(i, &stepResult{problem: e}, false)
	if next {
		return true, 0 // an attempt was consumed: go again (a fresh claim opens the session again)
	}
	return release, delay
}

// call is the Call of a worker's command.
func (r *planRun) call(op, key string, target []string, body []byte) (app.Call, error) {
	fp, err := r.s.Fingerprints().Fingerprint(op, target, body)
	if err != nil {
		return app.Call{}, err
	}
	return app.Call{Actor: r.actor, ClientID: app.WorkloadWorker, Operation: op, IdempotencyKey: key, Fingerprint: fp,
		Lease: &app.LeaseFence{NodeID: r.s.NodeID(), Epoch: r.claim.Epoch}}, nil
}

// command runs one of the worker's commands and reads its outcome, from the responder or, for a
// replayed key, from the stored reply.
func (r *planRun) command(op, key string, target []string, body []byte,
	run func(call app.Call, rsp *app.PlanResponder) (app.Response, error),
) (*app.PlanResponder, *app.StoredReply, error) {
	call, err := r.call(op, key, target, body)
	if err != nil {
		return nil, nil, err
	}
	rsp := &app.PlanResponder{}
	resp, err := run(call, rsp)
	if err != nil {
		return rsp, nil, err
	}
	if resp.Replayed {
		st, err := app.ParseStoredReply(resp.Body)
		if err != nil {
			return rsp, nil, err
		}
		if st.Code != "" {
			rsp.Problem = &app.Error{Code: st.Code, Detail: st.Detail}
		}
		return rsp, st, nil
	}
	return rsp, nil, nil
}

// sessionLive tells whether the plan's session is open on this node.
func (r *planRun) sessionLive() bool { return r.s.SessionLive(r.ctx, r.claim.Tenant, r.sessionID) }

// openSession opens the plan's session: restored from the checkpoint taken after the latest step
// before `first` that has one (resume_task when the task waits in checkpointed), else fresh. It
// returns where the run continues: just after that checkpoint, so that the safe steps done since
// are run again on the restored page.
func (r *planRun) openSession(first int) (int, error) {
	t, err := r.s.LeasedTask(r.ctx, r.claim)
	if err != nil {
		return 0, err
	}
	r.t.State = t.State
	cp, from := "", 0
	for k := first - 1; k >= 0; k-- {
		if id := r.progress[k].CheckpointID; id != "" {
			cp, from = id, k+1
			break
		}
	}
	if cp == "" && t.State == task.Checkpointed {
		// Checkpointed, but by no step this run knows of (the worker died between the
		// checkpoint and its progress row): restore it and run every safe step again.
		if cp, err = r.s.LatestCheckpoint(r.ctx, r.claim); err != nil {
			return 0, err
		}
	}
	for {
		r.opens++
		key := planKey(r.claim.TaskID, r.claim.Epoch, fmt.Sprintf("session:%d", r.opens))
		var rsp *app.PlanResponder
		var st *app.StoredReply
		if t.State == task.Checkpointed {
			body, _ := json.Marshal(map[string]string{"checkpoint_id": cp})
			rsp, st, err = r.command("resume_task", key, []string{r.claim.TaskID}, body, func(call app.Call, rsp *app.PlanResponder) (app.Response, error) {
				return r.s.ResumeTask(r.ctx, call, r.claim.TaskID, cp, app.ForPlan[*app.ResumeResult](rsp))
			})
		} else {
			body := []byte("{}")
			if cp != "" {
				body, _ = json.Marshal(map[string]string{"from_checkpoint": cp})
			}
			rsp, st, err = r.command("create_browser_session", key, []string{r.claim.TaskID}, body, func(call app.Call, rsp *app.PlanResponder) (app.Response, error) {
				return r.s.CreateBrowserSession(r.ctx, call, r.claim.TaskID, app.SessionRequest{FromCheckpoint: cp}, app.ForPlan[*app.SessionResult](rsp))
			})
		}
		if err != nil {
			return 0, err
		}
		if rsp.Problem != nil {
			if classify(rsp.Problem.Code) == throttled {
				if err := r.sleep(retryAfter(rsp.Problem)); err != nil {
					return 0, err
				}
				continue
			}
			return 0, rsp.Problem
		}
		switch {
		case rsp.SessionID != "":
			r.sessionID = rsp.SessionID
		case st != nil && st.SessionID != "":
			r.sessionID = st.SessionID
		default:
			return 0, fmt.Errorf("opening the plan's session: %s answered no session", key)
		}
		break
	}
	if err := r.tx(func(c *app.LeaseTx) error {
		return c.SetLeaseSession(r.sessionID)
	}); err != nil {
		return 0, err
	}
	return from, nil
}

func retryAfter(e *app.Error) time.Duration {
	if e.RetryAfter > 0 {
		return min(e.RetryAfter, 30*time.Second)
	}
	return time.Second
}

// sleep waits d unless the run ends first.
func (r *planRun) sleep(d time.Duration) error {
	select {
	case <-r.ctx.Done():
		return context.Cause(r.ctx)
	case <-time.After(d):
		return nil
	}
}

// tx runs fn in a transaction that holds the task and this worker's lease; the events fn emits
// are the worker's (actor worker:<node>, no command).
func (r *planRun) tx(fn func(c *app.LeaseTx) error) error {
	return r.s.InLease(r.ctx, r.claim, r.actor.Subject, func(c *app.LeaseTx) error {
		if err := fn(c); err != nil {
			return err
		}
		r.t.State = c.Task().State
		return nil
	})
}

// attempt runs step i once (rerun: a safe step done before, run again on a restored page).
func (r *planRun) attempt(i int, rerun bool) *stepResult {
	st := r.t.Plan[i]
	p := &r.progress[i]
	attempt := p.Attempts + 1
	if rerun {
		attempt = max(p.Attempts, 1)
	}
	tries := 0
	for {
		key := stepKey(r.claim.TaskID, r.claim.Epoch, i, attempt, tries)
		if rerun {
			key = planKey(r.claim.TaskID, r.claim.Epoch, fmt.Sprintf("rerun:%d:%d:%d", i, r.opens, tries))
		}
		if err := r.tx(func(c *app.LeaseTx) error {
			if c.Task().State.Terminal() {
				return app.ErrTaskEnded
			}
			data := map[string]any{"index": i, "op": st.Op, "attempt": attempt}
			if rerun {
				data["rerun"] = true
			} else {
				now := c.Now()
				np := *p
				np.State, np.CommandKey, np.StartedAt, np.ApprovalID = app.StepInFlight, key, &now, ""
				if err := c.SaveStepProgress(&np); err != nil {
					return err
				}
				*p = np
			}
			return c.Emit("plan.step_started", "plan", data)
		}); err != nil {
			return &stepResult{err: err}
		}
		res := r.exec(i, key)
		if res.problem != nil && classify(res.problem.Code) == throttled {
			if err := r.sleep(retryAfter(res.problem)); err != nil {
				return &stepResult{err: err}
			}
			tries++
			continue
		}
		return res
	}
}

// exec runs step i's operation under key.
func (r *planRun) exec(i int, key string) *stepResult {
	// The step's fill values are opened only now, for running it (keys.go).
	st, e := r.s.OpenStep(r.t, i)
	if e != nil {
		return &stepResult{problem: e}
	}
	sid := r.sessionID
	target := []string{sid}
	args := []byte(st.Args)
	if len(args) == 0 {
		args = []byte("{}")
	}
	switch st.Op {
	case "navigate":
		var a navigateArgs
		if e := decodeArgs(st, &a); e != nil {
			return &stepResult{problem: e}
		}
		return r.commandResult(r.command("navigate", key, target, args, func(call app.Call, rsp *app.PlanResponder) (app.Response, error) {
			return r.s.Navigate(r.ctx, call, sid, page.NavigateRequest{ContextID: a.ContextID, URL: a.URL, WaitUntil: a.WaitUntil}, a.TimeoutMs, app.ForPlan[*app.NavigateResult](rsp))
		}))
	case "act":
		var a actArgs
		if e := decodeArgs(st, &a); e != nil {
			return &stepResult{problem: e}
		}
		req := page.ActRequest{ContextID: a.ContextID, Action: a.Action, NodeID: a.NodeID, Query: a.Query, Value: a.Value,
			SecretRef: a.SecretRef, Values: a.Values, Key: a.Key}
		hold := r.holdReason
		return r.commandResult(r.command("act", key, target, args, func(call app.Call, rsp *app.PlanResponder) (app.Response, error) {
			if hold != "" {
				return r.s.HoldActForSafety(r.ctx, call, sid, req, a.ArtifactID, a.TimeoutMs, hold, app.ForPlan[*app.ActOutcome](rsp))
			}
			return r.s.Act(r.ctx, call, sid, req, a.ArtifactID, a.TimeoutMs, app.ForPlan[*app.ActOutcome](rsp))
		}))
	case "capture_evidence":
		var a evidenceArgs
		if e := decodeArgs(st, &a); e != nil {
			return &stepResult{problem: e}
		}
		res := r.commandResult(r.command("capture_evidence", key, target, args, func(call app.Call, rsp *app.PlanResponder) (app.Response, error) {
			return r.s.CaptureEvidence(r.ctx, call, sid, app.EvidenceRequest{ContextID: a.ContextID, Kinds: a.Kinds, FullPage: a.FullPage, NodeID: a.NodeID}, app.ForPlan[*app.EvidenceResult](rsp))
		}))
		return res
	case "observe":
		var a observeArgs
		if e := decodeArgs(st, &a); e != nil {
			return &stepResult{problem: e}
		}
		snap, err := r.s.Observe(r.ctx, r.actor, sid, page.ObserveRequest{ContextID: a.ContextID, Within: a.Within, MaxNodes: a.MaxNodes, Mode: a.Mode,
			Since: a.Since, Cursor: a.Cursor, MaxBytes: a.MaxBytes})
		if err != nil {
			return errResult(err)
		}
		return r.keepResult(i, snap, "ax_snapshot", snap.ContextID, snap.EpochID, snap.URL)
	case "extract":
		var a extractArgs
		if e := decodeArgs(st, &a); e != nil {
			return &stepResult{problem: e}
		}
		res, err := r.s.Extract(r.ctx, r.actor, sid, page.ExtractRequest{ContextID: a.ContextID, Kind: a.Kind, NodeID: a.NodeID,
			Query: a.Query, Schema: a.Schema, Fields: a.Fields})
		if err != nil {
			return errResult(err)
		}
		return r.keepResult(i, map[string]any{"kind": a.Kind, "data": res.Data}, "other", "", "", "")
	default:
		return &stepResult{problem: app.Errorf(app.CodeInvalidRequest, "unknown plan step kind %q", st.Op)}
	}
}

func errResult(err error) *stepResult {
	if e := app.AsError(err); e != nil {
		return &stepResult{problem: e}
	}
	return &stepResult{err: err}
}

// commandResult turns a command's outcome into a step result.
func (r *planRun) commandResult(rsp *app.PlanResponder, st *app.StoredReply, err error) *stepResult {
	if err != nil {
		return errResult(err)
	}
	res := &stepResult{}
	if rsp.Receipt != nil {
		res.receiptID, res.commandID = rsp.Receipt.ID, rsp.Receipt.CommandID
	} else if st != nil && st.Receipt != nil {
		res.receiptID, res.commandID = st.Receipt.ReceiptID, st.Receipt.CommandID
	}
	outcome := task.Outcome("")
	if rsp.Receipt != nil {
		outcome = rsp.Receipt.Outcome
	} else if st != nil && st.Receipt != nil {
		outcome = st.Receipt.Outcome
	}
	if outcome == task.ReconciliationRequired {
		// Interrupted after its input may have been sent: never run again. The task waits in
		// waiting_for_external_input; the step stays in flight until an operator settles it.
		res.wait = true
		return res
	}
	if rsp.Problem != nil {
		res.problem = rsp.Problem
		return res
	}
	if rsp.ApprovalID != "" { // the act is held for an approval (202)
		res.held = rsp.ApprovalID
		return res
	}
	res.artifactID = rsp.ArtifactID
	if st != nil { // a replay: what the stored reply says
		if st.ApprovalID != "" {
			res.held = st.ApprovalID
			return res
		}
		if st.Receipt != nil && st.Receipt.Outcome != task.Applied && st.Receipt.Outcome != task.NoSideEffect {
			return r.fromOutcome(st.Receipt.Outcome, "", st.Receipt.ProblemCode)
		}
	}
	res.done = true
	return res
}

// keepResult stores what a read step returned as an artifact of the task (JSON), named by the
// step's plan.step_finished event.
func (r *planRun) keepResult(i int, v any, kind, contextID, epochID, url string) *stepResult {
	content, err := json.Marshal(v)
	if err != nil {
		return &stepResult{err: err}
	}
	art := &app.Artifact{ID: ids.New(ids.Artifact), Tenant: r.claim.Tenant, SHA256: sha256Hex(content), Size: int64(len(content)),
		MediaType: "application/json", Kind: kind, TaskID: r.claim.TaskID, SessionID: r.sessionID, ContextID: contextID,
		EpochID: epochID, SourceURL: url}
	if err := r.tx(func(c *app.LeaseTx) error { return c.KeepArtifact(art, content) }); err != nil {
		return &stepResult{err: err}
	}
	return &stepResult{done: true, artifactID: art.ID}
}

// fromOutcome reads a receipt outcome found for a step's command.
func (r *planRun) fromOutcome(outcome task.Outcome, reconciliation string, code app.Code) *stepResult {
	switch outcome {
	case task.Applied:
		return &stepResult{done: true}
	case task.NoSideEffect, task.UnknownOutcome:
		return &stepResult{rerun: true} // nothing happened, or a safe command whose result was lost
	case task.Rejected:
		if code == "" {
			code = app.CodeInternal
		}
		return &stepResult{problem: &app.Error{Code: code, Detail: "the step's command was refused"}}
	case task.ReconciliationRequired:
		switch reconciliation {
		case string(task.Applied):
			return &stepResult{done: true}
		case string(task.NoSideEffect):
			return &stepResult{deadReason: "reconciled_no_side_effect", problem: &app.Error{Code: app.CodeInvalidTransition,
				Detail: "the step's action was interrupted and an operator found it had no effect; it is never run again"}}
		default: // open: the task waits in waiting_for_external_input for an operator
			return &stepResult{wait: true}
		}
	default: // pending_approval: the approval is still open; look again shortly
		return &stepResult{wait: true, delay: time.Second}
	}
}

// settleInFlight finds what became of step i, left in flight by an earlier run.
func (r *planRun) settleInFlight(i int) *stepResult {
	p := r.progress[i]
	if !sideEffectingOp(r.t.Plan[i].Op) {
		return &stepResult{rerun: true} // safe: run it again
	}
	ks, err := r.s.CommandKeyState(r.ctx, r.claim, p.CommandKey)
	switch {
	case errors.Is(err, app.ErrNotFound):
		return &stepResult{rerun: true} // its command never committed: nothing ran
	case err != nil:
		return &stepResult{err: err}
	case !ks.Completed:
		// Its node is gone or slow; recovery classifies the command once that node is stale.
		return &stepResult{wait: true, delay: 2 * time.Second}
	}
	st, err := app.ParseStoredReply(ks.Body)
	if err != nil {
		return &stepResult{err: err}
	}
	if st.ApprovalID != "" {
		np := p
		np.State, np.ApprovalID = app.StepHeld, st.ApprovalID
		r.progress[i] = np
		return r.settleHeld(i)
	}
	if st.Receipt == nil {
		if st.Code != "" {
			return &stepResult{problem: &app.Error{Code: st.Code, Detail: st.Detail}}
		}
		return &stepResult{err: fmt.Errorf("the reply of %s has no receipt", p.CommandKey)}
	}
	res := r.fromOutcome(st.Receipt.Outcome, ks.Reconciliation, st.Receipt.ProblemCode)
	if res.problem != nil && st.Code != "" {
		res.problem = &app.Error{Code: st.Code, Detail: st.Detail}
	}
	res.receiptID, res.commandID = st.Receipt.ReceiptID, st.Receipt.CommandID
	return res
}

// settleHeld finds what became of step i's act, held for an approval.
func (r *planRun) settleHeld(i int) *stepResult {
	ao, err := r.s.ApprovalOutcomeOf(r.ctx, r.claim, r.progress[i].ApprovalID)
	if err != nil {
		return &stepResult{err: err}
	}
	switch ao.State {
	case task.ApprovalPending:
		return &stepResult{wait: true}
	case task.ApprovalDenied:
		return &stepResult{deadReason: "approval_denied", problem: &app.Error{Code: app.CodeInvalidTransition,
			Detail: "the approval of the step's action was denied; it never ran"}}
	case task.ApprovalExpired:
		// Nobody decided before its expires_at (or the task itself expired: then recording the
		// dead letter finds the task ended). An expired approval is never revived.
		return &stepResult{deadReason: "approval_expired", problem: &app.Error{Code: app.CodeApprovalNotPending,
			Detail: "the approval of the step's action expired before anyone decided; it never ran"}}
	case task.ApprovalApproved:
		if ao.Outcome == "" {
			return &stepResult{wait: true, delay: time.Second} // the approved action is still running
		}
		res := r.fromOutcome(ao.Outcome, ao.Reconciliation, ao.ProblemCode)
		res.receiptID = ao.ReceiptID
		return res
	default: // cancelled: so is the task
		return &stepResult{err: app.ErrTaskEnded}
	}
}

// handle records a step result and says whether the run goes on (and if not, whether to give the
// lease back and when the task is runnable again).
func (r *planRun) handle(i int, res *stepResult, rerun bool) (next, release bool, delay time.Duration) {
	st := r.t.Plan[i]
	p := &r.progress[i]
	switch {
	case res.err != nil:
		release, delay = r.internal(res.err)
		return false, release, delay
	case res.wait:
		return false, true, res.delay
	case res.held != "":
		return r.parkHeld(p, res.held)
	case res.done:
		attempts := p.Attempts
		if !rerun {
			attempts++
		}
		return r.stepDone(i, res, rerun, attempts, "plan")
	}
	// A problem.
	e := res.problem
	r.w.stepsFailed.Add(1)
	class := classify(e.Code)
	if res.deadReason != "" {
		class = fatal
	}
	switch class {
	case stateChanged:
		t, err := r.s.LeasedTask(r.ctx, r.claim)
		if err != nil {
			release, delay = r.internal(err)
			return false, release, delay
		}
		r.t.State = t.State
		switch t.State {
		case task.Admitted, task.Running, task.Checkpointed:
			class = sessionGone // e.g. its session was closed: open another
		default:
			return false, !t.State.Terminal(), 0
		}
	case throttled:
		return false, true, retryAfter(e)
	default: // retryable, fatal, sessionGone: counted against the step's attempts below
	}
	if class == sessionGone {
		r.sessionID = ""
	}
	consumed := class != fatal
	attempts := p.Attempts
	if consumed {
		attempts++
	}
	r.history = append(r.history, map[string]any{"index": i, "attempt": attempts, "problem_code": string(e.Code),
		"detail": e.Detail, "at": r.s.Now().UTC().Format(time.RFC3339Nano)})
	if class == fatal || attempts >= r.maxAttempts(i) {
		reason := res.deadReason
		if reason == "" {
			reason = "attempts_exhausted"
			if class == fatal {
				reason = "not_retryable"
			}
		}
		r.deadLetter(i, attempts, e, reason, res)
		return false, false, 0
	}
	// Record the failed attempt, wait, and go again.
	err := r.tx(func(c *app.LeaseTx) error {
		np := *p
		np.State, np.Attempts, np.LastProblemCode, np.LastError = app.StepPending, attempts, e.Code, truncate(e.Detail, 2000)
		np.ApprovalID, np.FinishedAt = "", nil
		if err := c.SaveStepProgress(&np); err != nil {
			return err
		}
		*p = np
		data := map[string]any{"index": i, "op": st.Op, "attempt": attempts, "succeeded": false, "problem_code": string(e.Code)}
		if res.receiptID != "" {
			data["receipt_id"] = res.receiptID
		}
		return c.Emit("plan.step_finished", "plan", data)
	})
	if err != nil {
		release, delay = r.internal(err)
		return false, release, delay
	}
	if err := r.sleep(r.backoff(attempts)); err != nil {
		release, delay = r.internal(err)
		return false, release, delay
	}
	return true, false, 0
}

// parkHeld records that step p waits for its approval and gives the lease back: the task is
// runnable again once the approval is resolved.
func (r *planRun) parkHeld(p *app.StepProgress, approvalID string) (next, release bool, delay time.Duration) {
	err := r.tx(func(c *app.LeaseTx) error {
		np := *p
		np.State, np.ApprovalID = app.StepHeld, approvalID
		if err := c.SaveStepProgress(&np); err != nil {
			return err
		}
		*p = np
		return nil
	})
	if err != nil {
		release, delay = r.internal(err)
		return false, release, delay
	}
	return false, true, 0
}

// stepDone records step i done after attempts tries (a checkpoint first, after a side effect that
// was not a re-run) with its plan.step_finished event, caused by cause ("plan" or "autonomous").
func (r *planRun) stepDone(i int, res *stepResult, rerun bool, attempts int, cause string) (next, release bool, delay time.Duration) {
	st := r.t.Plan[i]
	p := &r.progress[i]
	r.w.stepsSucceeded.Add(1)
	cp := ""
	if sideEffectingOp(st.Op) && !rerun {
		cp = r.checkpoint(i)
	}
	err := r.tx(func(c *app.LeaseTx) error {
		now := c.Now()
		np := *p
		np.Attempts = attempts
		np.State, np.FinishedAt, np.ApprovalID = app.StepDone, &now, ""
		if res.receiptID != "" {
			np.ReceiptID = res.receiptID
		}
		if cp != "" {
			np.CheckpointID = cp
		}
		if err := c.SaveStepProgress(&np); err != nil {
			return err
		}
		*p = np
		data := map[string]any{"index": i, "op": st.Op, "attempt": max(np.Attempts, 1), "succeeded": true}
		if res.receiptID != "" {
			data["receipt_id"] = res.receiptID
		}
		if res.artifactID != "" {
			data["artifact_id"] = res.artifactID
		}
		if rerun {
			data["rerun"] = true
		}
		return c.Emit("plan.step_finished", cause, data)
	})
	if err != nil {
		release, delay = r.internal(err)
		return false, release, delay
	}
	return true, false, 0
}

// backoff is the wait after the n-th failed attempt.
func (r *planRun) backoff(n int) time.Duration {
	d := r.w.cfg.BackoffBase
	for k := 1; k < n && d < r.w.cfg.BackoffMax; k++ {
		d *= 2
	}
	return min(d, r.w.cfg.BackoffMax)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// checkpoint takes a checkpoint of the plan's session after step i; "" when none could be taken
// (the next takeover then restores an earlier one).
func (r *planRun) checkpoint(i int) string {
	if !r.sessionLive() {
		return ""
	}
	sid := r.sessionID
	rsp, st, err := r.command("checkpoint_browser_session", planKey(r.claim.TaskID, r.claim.Epoch, fmt.Sprintf("checkpoint:%d", i)),
		[]string{sid}, []byte("{}"), func(call app.Call, rsp *app.PlanResponder) (app.Response, error) {
			return r.s.CheckpointBrowserSession(r.ctx, call, sid, app.ForPlan[*app.CheckpointResult](rsp))
		})
	if err != nil || rsp.Problem != nil || st != nil {
		r.log.Warn("checkpoint after a plan step failed", "task_id", r.claim.TaskID, "step", i, "err", err)
		return ""
	}
	return rsp.CheckpointID
}

// deadLetter fails the plan at step i: a screenshot of the page when possible, the dead letter
// with the evidence, plan.step_finished (dead_lettered) and the task failed (trigger dead_letter).
func (r *planRun) deadLetter(i, attempts int, e *app.Error, reason string, res *stepResult) {
	st := r.t.Plan[i]
	if r.t.ReplayOf != "" { // a replay's failed step is its divergence (ADR 0035)
		if err := r.s.ReplayStepFailed(r.ctx, r.claim, r.actor.Subject, i, e.Code); err != nil {
			r.log.Warn("recording a replay's divergence", "task_id", r.claim.TaskID, "err", err)
		}
	}
	artifactID := ""
	if r.sessionLive() {
		sid := r.sessionID
		rsp, _, err := r.command("capture_evidence", planKey(r.claim.TaskID, r.claim.Epoch, fmt.Sprintf("dead_letter:%d", i)),
			[]string{sid}, []byte(`{"kinds":["screenshot"]}`), func(call app.Call, rsp *app.PlanResponder) (app.Response, error) {
				return r.s.CaptureEvidence(r.ctx, call, sid, app.EvidenceRequest{Kinds: []string{app.EvidenceScreenshot}}, app.ForPlan[*app.EvidenceResult](rsp))
			})
		if err == nil && rsp.Problem == nil {
			artifactID = rsp.ArtifactID
		}
	}
	evidence := map[string]any{
		"step": i, "op": st.Op, "attempts": attempts, "max_attempts": r.maxAttempts(i),
		"problem": map[string]any{"code": string(e.Code), "detail": e.Detail},
		"history": r.history, "session_id": r.sessionID, "node_id": r.s.NodeID(),
	}
	if res.receiptID != "" {
		evidence["receipt_id"] = res.receiptID
	}
	if artifactID != "" {
		evidence["screenshot_artifact_id"] = artifactID
	}
	err := r.tx(func(c *app.LeaseTx) error {
		if c.Task().State.Terminal() {
			return app.ErrTaskEnded
		}
		if err := c.InsertDeadLetter(&app.DeadLetter{Tenant: c.Task().Tenant, TaskID: c.Task().ID, StepIndex: i, CommandID: res.commandID,
			Reason: reason, ProblemCode: e.Code, Attempts: attempts, ArtifactID: artifactID, Evidence: evidence}); err != nil {
			return err
		}
		now := c.Now()
		np := r.progress[i]
		np.State, np.Attempts, np.FinishedAt, np.ApprovalID = app.StepFailed, attempts, &now, ""
		np.LastProblemCode, np.LastError = e.Code, truncate(e.Detail, 2000)
		if err := c.SaveStepProgress(&np); err != nil {
			return err
		}
		r.progress[i] = np
		data := map[string]any{"index": i, "op": st.Op, "attempt": max(attempts, 1), "succeeded": false,
			"dead_lettered": true, "problem_code": string(e.Code)}
		if res.receiptID != "" {
			data["receipt_id"] = res.receiptID
		}
		if artifactID != "" {
			data["artifact_id"] = artifactID
		}
		if err := c.Emit("plan.step_finished", "plan", data); err != nil {
			return err
		}
		if c.Task().State == task.Admitted {
			if err := c.Transition(task.Start, "plan"); err != nil {
				return err
			}
		}
		if _, err := task.Next(c.Task().State, task.DeadLetter); err != nil {
			// Not running (checkpointed, say): the plan is over, the task waits for its client.
			return c.FinishLease()
		}
		if err := c.Transition(task.DeadLetter, "dead_letter: "+reason); err != nil {
			return err
		}
		return c.AdmitWaiting()
	})
	if err != nil {
		if !errors.Is(err, app.ErrTaskEnded) && !errors.Is(err, app.ErrLeaseLost) {
			r.log.Error("dead-lettering a plan failed", "task_id", r.claim.TaskID, "err", err)
		}
		return
	}
	r.w.deadLetters.Add(1)
	r.log.Warn("plan dead-lettered", "task_id", r.claim.TaskID, "step", i, "reason", reason, "problem_code", string(e.Code))
}

// close ends a plan that ran to its end: close_task by the postcondition.
func (r *planRun) close() (bool, time.Duration) {
	for try := 0; ; try++ {
		key := planKey(r.claim.TaskID, r.claim.Epoch, fmt.Sprintf("close:%d", try))
		rsp, _, err := r.command("close_task", key, []string{r.claim.TaskID}, []byte("{}"), func(call app.Call, rsp *app.PlanResponder) (app.Response, error) {
			return r.s.CloseTask(r.ctx, call, r.claim.TaskID, app.ForPlan[*app.CloseResult](rsp))
		})
		if err != nil {
			return r.internal(err)
		}
		if rsp.Problem != nil {
			if classify(rsp.Problem.Code) == throttled && try < 10 {
				if err := r.sleep(retryAfter(rsp.Problem)); err != nil {
					return r.internal(err)
				}
				continue
			}
			t, err := r.s.LeasedTask(r.ctx, r.claim)
			if err != nil {
				return r.internal(err)
			}
			return !t.State.Terminal(), time.Second
		}
		r.w.plansClosed.Add(1)
		return false, 0
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
