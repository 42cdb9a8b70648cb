package worker

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// The autonomous loop (issue #11, ADR 0013, docs/orchestrator.md). An autonomous task is queued
// like a delegated plan (task_lease) and claimed by the same workers; its plan grows one step at a
// time:
//
//	observe (masked) → the planner proposes ONE typed step (JSON-schema-constrained) → the step is
//	validated against the step schema → appended to the plan (arguments masked) → run through the
//	same use-cases as a plan step (lease fencing, policy, approval holds, receipts, events) → …
//
// until the planner says done — then the verifier records its judgement and close_task decides by
// the postcondition — or a budget ends (the task fails, budget.exhausted). Every model call is
// registered with the task's in-flight work, so cancel_task stops it; it records its provenance
// (model.called, model.fallback). No compliant model, every model failing, or an unreachable
// orchestrator stop the task (failed, with the cause): never a silent downgrade.

// autoRun is one worker's run of an autonomous task.
type autoRun struct {
	*planRun
	scrub       scrubber
	tokens      int64
	cost        float64
	invalid     int    // consecutive proposals that did not validate
	blocked     int    // consecutive proposals the safety role blocked
	lastProblem string // why the last proposal was not accepted, told to the planner
	safety      bool   // the safety role judges each step (roles.go)
	observer    bool   // the observer condenses long pages for the planner (roles.go)
	approved    int    // a step the safety review held and a person approved, to run; -1 none
}

const (
	maxInvalidProposals = 3   // consecutive invalid proposals before the task fails
	historyForPlanner   = 20  // most recent steps shown to the planner
	observeMaxNodes     = 300 // nodes of the observation a model sees
)

// runAutonomous runs the loop; it returns whether to give the lease back, and after what delay.
func (r *planRun) runAutonomous() (bool, time.Duration) {
	a := &autoRun{planRun: r, approved: -1}
	r.t.Budget = r.t.Budget.WithDefaults()
	hist, err := a.loadUsage()
	if err != nil {
		return r.internal(err)
	}
	if err := a.decideRoles(hist); err != nil {
		if errors.Is(err, app.ErrTaskEnded) {
			return false, 0
		}
		return a.modelTrouble(app.RoleSafety, err)
	}
	// Settle what an earlier run left: a step in flight or held for an approval.
	for i := range r.t.Plan {
		var res *stepResult
		switch r.progress[i].State {
		case app.StepInFlight:
			res = r.settleInFlight(i)
		case app.StepHeld:
			if r.progress[i].CommandKey == "" {
				// Held by the safety review before it started (gate): approved, it runs below.
				var approved bool
				if res, approved = a.settleGate(i); approved {
					a.approved = i
					continue
				}
			} else {
				res = r.settleHeld(i)
			}
		case app.StepPending:
			res = &stepResult{rerun: true}
		default:
			continue
		}
		if res.rerun {
			// It never ran to an outcome; its stored arguments are masked, so it is not run again:
			// the planner is told and proposes again.
			res = &stepResult{problem: app.Errorf(app.CodeInternal, "this step was interrupted before it completed; it is not run again")}
		}
		if next, release, delay := a.finish(i, res, false); !next {
			return release, delay
		}
	}
	for {
		if r.stopping.Err() != nil {
			return true, 0 // the node is shutting down: someone else carries on
		}
		if name, used, limit, over := a.overBudget(); over {
			return a.exhausted(name, used, limit)
		}
		if !r.sessionLive() {
			from, err := r.openSession(len(r.t.Plan))
			if err != nil {
				if e := app.AsError(err); e != nil {
					return a.stop("session_failed", fmt.Sprintf("no browser session could be opened: %s", e.Code))
				}
				return r.internal(err)
			}
			if err := a.rebuild(from); err != nil {
				return r.internal(err)
			}
		}
		if i := a.approved; i >= 0 {
			// A person approved the step the safety review held: it runs, once.
			a.approved = -1
			res := r.attempt(i, false)
			if next, release, delay := a.finish(i, res, false); !next {
				return release, delay
			}
			continue
		}
		obs, err := a.observe()
		if err != nil {
			if e := app.AsError(err); e != nil && classify(e.Code) == sessionGone {
				r.sessionID = ""
				continue
			}
			return r.internal(err)
		}
		index := len(r.t.Plan)
		view, err := a.condense(obs, index)
		if err != nil {
			return a.modelTrouble(app.RoleObserver, err)
		}
		prop, reply, err := a.propose(view, index)
		if err != nil {
			return a.modelTrouble(app.RolePlanner, err)
		}
		if prop.Op == opDone {
			if err := a.recordProposal(-1, prop, reply, true, ""); err != nil {
				return r.internal(err)
			}
			return a.finishGoal(prop.Reason)
		}
		st, verr := validateProposal(*prop)
		if verr != nil {
			a.invalid++
			a.lastProblem = verr.Error()
			if err := a.recordProposal(-1, prop, reply, false, verr.Error()); err != nil {
				return r.internal(err)
			}
			if a.invalid >= maxInvalidProposals {
				return a.stop("planner_invalid_output", fmt.Sprintf("the planner proposed %d invalid steps in a row", a.invalid))
			}
			continue
		}
		a.invalid, a.lastProblem = 0, ""
		if index >= r.t.Budget.MaxSteps {
			return a.exhausted("max_steps", float64(index), float64(r.t.Budget.MaxSteps))
		}
		hold := ""
		if a.safety {
			j, err := a.judge(view, index, st)
			if err != nil {
				if errors.Is(err, app.ErrTaskEnded) {
					return false, 0
				}
				return a.modelTrouble(app.RoleSafety, err)
			}
			if j.exceeded {
				// The page is more sensitive than the task lets models see: no more page content
				// goes to a model (fail closed).
				return a.stop("data_classification_exceeded", fmt.Sprintf(
					"the safety review classified the page %s, above the task's model_policy.data_classification", j.classification))
			}
			switch j.verdict {
			case "block":
				a.blocked++
				a.lastProblem = "the safety review blocked this step; it was not run: " + j.reason
				if err := a.recordProposal(-1, prop, reply, false, a.lastProblem); err != nil {
					return r.internal(err)
				}
				if a.blocked >= maxBlockedProposals {
					return a.stop("safety_blocked", fmt.Sprintf("the safety review blocked %d proposed steps in a row", a.blocked))
				}
				continue
			case "hold":
				hold = truncate("the safety review holds this "+st.Op+" step for a person: "+j.reason, 1000)
			}
		}
		a.blocked = 0
		if err := a.appendStep(index, st, prop, reply); err != nil {
			return r.internal(err)
		}
		var res *stepResult
		switch {
		case hold != "" && st.Op == "act":
			// Held as an approval rule would hold it: approving runs the held action once.
			r.holdReason = hold
			res = r.attempt(index, false)
			r.holdReason = ""
		case hold != "":
			res = a.gate(index, hold)
		default:
			res = r.attempt(index, false)
		}
		if next, release, delay := a.finish(index, res, false); !next {
			return release, delay
		}
	}
}

// loadUsage sums the tokens and cost of the task's model calls so far (its history), so that a
// worker taking over counts what its predecessors spent, and reads what the history says of the
// safety role.
func (a *autoRun) loadUsage() (roleHistory, error) {
	var after int64
	var h roleHistory
	for {
		evs, err := a.s.LeasedEvents(a.ctx, a.claim, after, app.MaxEventPage)
		if err != nil {
			return h, err
		}
		for _, e := range evs {
			if e.Type == "safety.judged" {
				if e.Data["verdict"] == "skipped" {
					h.safetySkipped = true
				} else {
					h.safetyUsed = true
				}
			}
			if e.Type != "model.called" {
				continue
			}
			if e.Data["role"] == app.RoleSafety {
				h.safetyUsed = true
			}
			in, _ := e.Data["input_tokens"].(float64)
			out, _ := e.Data["output_tokens"].(float64)
			cost, _ := e.Data["cost_usd"].(float64)
			a.tokens += int64(in) + int64(out)
			a.cost += cost
		}
		if len(evs) < app.MaxEventPage {
			return h, nil
		}
		after = evs[len(evs)-1].Seq
	}
}

// overBudget tells which budget (other than steps, checked on each proposal) is used up.
func (a *autoRun) overBudget() (string, float64, float64, bool) {
	b := a.t.Budget
	if a.tokens >= b.MaxTokens {
		return "max_tokens", float64(a.tokens), float64(b.MaxTokens), true
	}
	if b.MaxCostUSD > 0 && a.cost >= b.MaxCostUSD {
		return "max_cost_usd", a.cost, b.MaxCostUSD, true
	}
	if used := a.s.Now().Sub(a.t.CreatedAt); used >= b.MaxWallTime {
		return "max_wall_time_ms", float64(used.Milliseconds()), float64(b.MaxWallTime.Milliseconds()), true
	}
	return "", 0, 0, false
}

// rebuild runs again, on a session restored from a checkpoint, the safe steps done since it.
func (a *autoRun) rebuild(from int) error {
	for k := from; k < len(a.t.Plan); k++ {
		if a.progress[k].State != app.StepDone || sideEffectingOp(a.t.Plan[k].Op) {
			continue
		}
		res := a.attempt(k, true)
		if res.err != nil {
			return res.err
		}
		data := map[string]any{"index": k, "op": a.t.Plan[k].Op, "attempt": max(a.progress[k].Attempts, 1),
			"succeeded": res.done, "rerun": true}
		if res.problem != nil {
			data["problem_code"] = string(res.problem.Code)
		}
		if err := a.tx(func(c *app.LeaseTx) error {
			return c.Emit("plan.step_finished", "autonomous", data)
		}); err != nil {
			return err
		}
	}
	return nil
}

// observe reads the page as the planner will see it: the full accessibility tree (text too), masked.
func (a *autoRun) observe() (maskedObservation, error) {
	snap, err := a.s.Observe(a.ctx, a.actor, a.sessionID, page.ObserveRequest{MaxNodes: observeMaxNodes, Mode: "full"})
	if err != nil {
		return maskedObservation{}, err
	}
	return maskSnapshot(snap, &a.scrub), nil
}

// plannerInstructions is the planner's system message.
const plannerInstructions = `You drive a web browser for a task through BAP. Propose exactly ONE next step as JSON {"op", "args", "reason"}.
op is one of navigate (args: {"url"}), act (args: {"action", "query" or "node_id", "value"?, "secret_ref"?, "values"?, "key"?}),
extract (args: {"kind": "text"|"table"|"links"|"attributes"}), capture_evidence (args: {"kinds": ["screenshot"]}), observe (args: {}),
or done (args: {}) when the goal is reached or cannot be reached. Queries are typed: role, name, text, label, placeholder, test_id.
The task's policy decides what is allowed (origins, approvals); a refused step is reported back to you. Values shown as *** are protected.
For a password or another credential, fill with "secret_ref" (one of "secrets": {"secret_id", "name", "origins"}) instead of "value": the browser types it only on the secret's origins, and you never see it.
The observation is the page's accessibility tree, or, for a long page, a summary an observer condensed from it ({"summary", "facts", "controls"}).`

// propose asks the planner for step index.
func (a *autoRun) propose(obs any, index int) (*proposal, *app.ModelReply, error) {
	type histStep struct {
		Index   int             `json:"index"`
		Op      string          `json:"op"`
		Args    json.RawMessage `json:"args,omitempty"`
		Outcome string          `json:"outcome"`
	}
	hist := []histStep{}
	for k := max(0, len(a.t.Plan)-historyForPlanner); k < len(a.t.Plan); k++ {
		p := a.progress[k]
		outcome := p.State
		if p.LastProblemCode != "" && p.State != app.StepDone {
			// The code and our own detail (details never hold request values; scrubbed anyway).
			outcome = "refused or failed: " + string(p.LastProblemCode) + " (" + truncate(a.scrub.text(p.LastError), 200) + ")"
		}
		hist = append(hist, histStep{Index: k, Op: a.t.Plan[k].Op, Args: scrubJSON(maskArgs(a.t.Plan[k].Op, a.t.Plan[k].Args), &a.scrub), Outcome: outcome})
	}
	ctx := map[string]any{
		"goal":            a.t.Goal,
		"allowed_origins": a.t.Policy.AllowedOrigins,
		"step":            index,
		"steps_left":      a.t.Budget.MaxSteps - index,
		"history":         hist,
		"observation":     obs,
	}
	if len(a.t.Postcondition) > 0 {
		ctx["postcondition"] = a.t.Postcondition
	}
	if secrets := a.usableSecrets(); len(secrets) > 0 {
		ctx["secrets"] = secrets
	}
	if a.lastProblem != "" {
		ctx["last_proposal_rejected"] = a.lastProblem
	}
	user, err := json.Marshal(ctx)
	if err != nil {
		return nil, nil, err
	}
	reply, err := a.complete(app.RolePlanner, index, app.ModelRequest{Role: app.RolePlanner, Policy: a.t.ModelPolicy,
		Messages:   []app.ModelMessage{{Role: "system", Content: plannerInstructions}, {Role: "user", Content: string(user)}},
		SchemaName: "bap_step", Schema: plannerSchema, MaxTokens: 2048, Reasoning: "high"})
	if err != nil {
		return nil, nil, err
	}
	var p proposal
	if err := json.Unmarshal(reply.Content, &p); err != nil {
		p = proposal{Op: "invalid", Reason: ""}
	}
	return &p, reply, nil
}

// plannerSecret is what the planner is told of a secret it may fill by reference: never a value.
type plannerSecret struct {
	ID      string   `json:"secret_id"`
	Name    string   `json:"name"`
	Origins []string `json:"origins"`
}

// usableSecrets lists the secrets usable on the task's origins (list_task_secrets), for the
// planner; none when the store keeps no secrets or listing fails (the planner then types values).
func (a *autoRun) usableSecrets() []plannerSecret {
	list, err := a.s.SecretsForTask(a.ctx, a.t)
	if err != nil {
		return nil
	}
	out := make([]plannerSecret, 0, len(list))
	for _, sec := range list {
		out = append(out, plannerSecret{ID: sec.ID, Name: sec.Name, Origins: sec.Origins})
	}
	return out
}

// complete makes one model call: registered with the task's in-flight work (cancel_task stops
// it), bounded by the wall-time budget and the task's deadline, its provenance recorded.
func (a *autoRun) complete(role string, step int, req app.ModelRequest) (*app.ModelReply, error) {
	orch := a.w.m
	if orch == nil {
		return nil, app.ErrOrchestratorUnavailable
	}
	flCtx, end := a.s.BeginModelCall(a.ctx, a.claim.Tenant, a.claim.TaskID)
	defer end()
	ctx, cancel := context.WithCancelCause(a.ctx)
	defer cancel(nil)
	stop := context.AfterFunc(flCtx, func() { cancel(context.Cause(flCtx)) })
	defer stop()
	if t, err := a.s.LeasedTask(ctx, a.claim); err != nil {
		return nil, err
	} else if t.State.Terminal() {
		return nil, app.ErrTaskEnded // cancelled (or ended) before the call was registered
	}
	deadline := a.t.CreatedAt.Add(a.t.Budget.MaxWallTime)
	if a.t.Deadline != nil && a.t.Deadline.Before(deadline) {
		deadline = *a.t.Deadline
	}
	ctx, cancelDeadline := context.WithDeadline(ctx, deadline)
	defer cancelDeadline()
	for asked := 1; ; asked++ {
		reply, err := orch.Complete(ctx, req)
		var failures []app.ModelFailure
		var all *app.AllModelsFailedError
		switch {
		case err == nil && reply.ReplyID == "":
			// Fail closed (ADR 0031): a reply without an id cannot be processed exactly once (the
			// orchestrator adapter already takes such an answer for its model's failure).
			if len(reply.Fallbacks) > 0 {
				if _, rerr := a.recordCall(role, step, nil, reply.Fallbacks); rerr != nil {
					return nil, rerr
				}
			}
			return nil, fmt.Errorf("%w: its reply carries no id, so it cannot be processed exactly once", app.ErrOrchestratorUnavailable)
		case err == nil:
			failures = reply.Fallbacks
		case errors.As(err, &all):
			failures = all.Failures
		}
		if len(failures) > 0 || reply != nil {
			redelivered, rerr := a.recordCall(role, step, reply, failures)
			if rerr != nil {
				return nil, rerr
			}
			if redelivered {
				// A reply the inbox already has was processed when it came first: it is never
				// taken as this call's answer. A fresh call gets a fresh reply; an orchestrator
				// that redelivers again is not answering.
				a.log.Warn("the orchestrator delivered a reply it had delivered before; not processed again",
					"task_id", a.claim.TaskID, "role", role, "model", reply.Model.ID, "asked", asked)
				if asked < 2 {
					continue
				}
				return nil, fmt.Errorf("%w: it delivered replies it had delivered before", app.ErrOrchestratorUnavailable)
			}
		}
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
				return nil, fmt.Errorf("%w (%w)", err, cause)
			}
			return nil, err
		}
		return reply, nil
	}
}

// errRedelivered rolls back the recording of a model call whose reply the inbox already has.
var errRedelivered = errors.New("the orchestrator's reply was delivered before")

// replyDigest is the digest of what an orchestrator reply delivers: the model that served it and
// its answer.
func replyDigest(reply *app.ModelReply) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(reply.Model.ID))
	h.Write([]byte{0})
	h.Write(reply.Content)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// recordCall records a model call's fallbacks and, when a model answered, its provenance, with
// the reply's delivery in the inbox. A reply the inbox already has (redelivered) is neither
// recorded nor charged again: only the fallbacks are.
func (a *autoRun) recordCall(role string, step int, reply *app.ModelReply, failures []app.ModelFailure) (redelivered bool, err error) {
	err = a.recordCallTx(role, step, reply, failures)
	if errors.Is(err, errRedelivered) {
		if len(failures) == 0 {
			return true, nil
		}
		return true, a.recordCallTx(role, step, nil, failures)
	}
	if err == nil && reply != nil {
		a.tokens += int64(reply.InputTokens) + int64(reply.OutputTokens)
		a.cost += reply.CostUSD
	}
	return false, err
}

// recordCallTx is recordCall's transaction.
func (a *autoRun) recordCallTx(role string, step int, reply *app.ModelReply, failures []app.ModelFailure) error {
	return a.tx(func(c *app.LeaseTx) error {
		for k, f := range failures {
			data := map[string]any{"role": role, "from_model": f.Model.ID, "reason": truncate(a.scrub.text(f.Reason), 500),
				"latency_ms": f.Latency.Milliseconds()}
			if f.Model.Provider != "" {
				data["from_provider"] = f.Model.Provider
			}
			switch {
			case k+1 < len(failures):
				data["to_model"] = failures[k+1].Model.ID
			case reply != nil:
				data["to_model"] = reply.Model.ID
			}
			if err := c.Emit("model.fallback", "autonomous", data); err != nil {
				return err
			}
		}
		if reply == nil {
			return nil
		}
		called := map[string]any{
			"role": role, "provider": reply.Model.Provider, "model": reply.Model.ID, "prompt_sha256": reply.PromptSHA256,
			"reasoning": reply.Reasoning, "input_tokens": reply.InputTokens, "output_tokens": reply.OutputTokens,
			"cost_usd": reply.CostUSD, "latency_ms": reply.Latency.Milliseconds(), "step": step,
		}
		if reply.RequestedModel != "" && reply.RequestedModel != reply.Model.ID {
			called["requested_model"] = reply.RequestedModel
		}
		if reply.UsageUnknown {
			called["usage"] = "unknown" // the tokens are the worst case charged (loadUsage counts them)
		}
		if reply.TruncatedBytes > 0 {
			called["truncated_bytes"] = reply.TruncatedBytes
		}
		if err := c.Emit("model.called", "autonomous", called); err != nil {
			return err
		}
		dup, err := c.RecordReply(reply.ReplyID, replyDigest(reply))
		switch {
		case errors.Is(err, app.ErrDeliveryReused):
			a.log.Warn("the orchestrator sent a reply id again with another answer; not processed", "task_id", c.Task().ID)
			return errRedelivered
		case err != nil:
			return err
		case dup:
			return errRedelivered
		}
		return nil
	})
}

// recordProposal records planner.proposed: the step (index ≥ 0) or done, or a proposal that did
// not validate. Protected values are masked.
func (a *autoRun) recordProposal(index int, p *proposal, reply *app.ModelReply, accepted bool, problem string) error {
	data := map[string]any{"accepted": accepted, "model": reply.Model.ID, "provider": reply.Model.Provider}
	op := p.Op
	switch op {
	case "navigate", "observe", "act", "extract", "capture_evidence", opDone:
		data["op"] = op
	default: // outside the vocabulary: recorded without an op (never run)
		if accepted {
			return fmt.Errorf("accepted proposal with unknown op %q", truncate(p.Op, 40))
		}
	}
	if index >= 0 {
		data["index"] = index
	}
	if p.Reason != "" {
		data["reason"] = truncate(a.scrub.text(p.Reason), 1000)
	}
	if problem != "" {
		data["problem"] = truncate(a.scrub.text(problem), 500)
	}
	if accepted && op != opDone {
		var args map[string]any
		if json.Unmarshal(scrubJSON(maskArgs(p.Op, p.Args), &a.scrub), &args) == nil && args != nil {
			data["args"] = args
		}
	}
	return a.tx(func(c *app.LeaseTx) error {
		if c.Task().State.Terminal() {
			return app.ErrTaskEnded
		}
		return c.Emit("planner.proposed", "autonomous", data)
	})
}

// appendStep records step index (masked) with its planner.proposed event; the run keeps the
// unmasked step in memory to execute it.
func (a *autoRun) appendStep(index int, st app.PlanStep, p *proposal, reply *app.ModelReply) error {
	stored := app.PlanStep{Op: st.Op, Args: maskArgs(st.Op, st.Args), MaxAttempts: 1}
	if err := a.tx(func(c *app.LeaseTx) error {
		if c.Task().State.Terminal() {
			return app.ErrTaskEnded
		}
		return c.AppendPlanStep(index, stored)
	}); err != nil {
		return err
	}
	if err := a.recordProposal(index, p, reply, true, ""); err != nil {
		return err
	}
	a.scrub.add(filledValue(st))
	a.t.Plan = append(a.t.Plan, st)
	a.progress = append(a.progress, app.StepProgress{Index: index, State: app.StepPending})
	return nil
}

// finish records what became of step i and says whether the loop goes on (and if not, whether to
// give the lease back and when the task is runnable again). A refused or failed step does not end
// the task: the planner is told and proposes again, within the budget.
func (a *autoRun) finish(i int, res *stepResult, rerun bool) (next, release bool, delay time.Duration) {
	st := a.t.Plan[i]
	p := &a.progress[i]
	switch {
	case res.err != nil:
		release, delay = a.internal(res.err)
		return false, release, delay
	case res.wait:
		return false, true, res.delay
	case res.held != "":
		return a.parkHeld(p, res.held)
	case res.done:
		return a.stepDone(i, res, rerun, max(p.Attempts, 1), "autonomous")
	}
	e := res.problem
	if e == nil {
		e = app.Errorf(app.CodeInternal, "the step ended without an outcome")
	}
	a.w.stepsFailed.Add(1)
	switch classify(e.Code) {
	case stateChanged:
		t, err := a.s.LeasedTask(a.ctx, a.claim)
		if err != nil {
			release, delay = a.internal(err)
			return false, release, delay
		}
		a.t.State = t.State
		if t.State.Terminal() {
			return false, false, 0
		}
		if res.deadReason == "" {
			a.sessionID = "" // e.g. its session was closed: open another
		}
	case sessionGone:
		a.sessionID = ""
	default: // retryable, fatal, throttled: the failure is recorded below and the loop decides
	}
	err := a.tx(func(c *app.LeaseTx) error {
		if c.Task().State.Terminal() {
			return app.ErrTaskEnded
		}
		now := c.Now()
		np := *p
		np.State, np.Attempts, np.FinishedAt, np.ApprovalID = app.StepFailed, max(np.Attempts, 1), &now, ""
		np.LastProblemCode, np.LastError = e.Code, truncate(a.scrub.text(e.Detail), 2000)
		if res.receiptID != "" {
			np.ReceiptID = res.receiptID
		}
		if err := c.SaveStepProgress(&np); err != nil {
			return err
		}
		*p = np
		data := map[string]any{"index": i, "op": st.Op, "attempt": np.Attempts, "succeeded": false, "problem_code": string(e.Code)}
		if res.receiptID != "" {
			data["receipt_id"] = res.receiptID
		}
		return c.Emit("plan.step_finished", "autonomous", data)
	})
	if err != nil {
		release, delay = a.internal(err)
		return false, release, delay
	}
	return true, false, 0
}

// modelTrouble ends the run after a model call failed: the task was cancelled or ended, the
// wall-time budget ran out, or no model could answer (the task fails with the cause).
func (a *autoRun) modelTrouble(role string, err error) (bool, time.Duration) {
	if errors.Is(err, app.ErrTaskEnded) || errors.Is(err, app.ErrTaskCancelled) || errors.Is(err, app.ErrLeaseLost) {
		return false, 0
	}
	if t, gerr := a.s.LeasedTask(a.ctx, a.claim); gerr == nil && t.State.Terminal() {
		return false, 0 // cancelled or expired while the model thought
	}
	if a.ctx.Err() != nil {
		return a.internal(err) // the node is shutting down or the lease was lost
	}
	if d := a.t.Deadline; d != nil && !a.s.Now().Before(*d) {
		// The task's deadline passed while the model thought: it expires (as upkeep would do).
		if err := a.s.ExpireTask(a.ctx, app.TaskRef{Tenant: a.claim.Tenant, TaskID: a.claim.TaskID}); err != nil {
			return a.internal(err)
		}
		return false, 0
	}
	if name, used, limit, over := a.overBudget(); over {
		return a.exhausted(name, used, limit)
	}
	var all *app.AllModelsFailedError
	switch {
	case errors.Is(err, app.ErrNoCompliantModel):
		return a.stop("model_policy_unsatisfied", fmt.Sprintf("no approved %s model satisfies the task's model_policy any more", role))
	case errors.As(err, &all):
		return a.stop("all_models_failed", fmt.Sprintf("every approved %s model failed", role))
	case errors.Is(err, app.ErrOrchestratorBudget):
		// The orchestrator's own spend budget, not a model's failure: no fallback was tried.
		return a.stop("budget_exhausted", "the model orchestrator refuses calls: its spend budget is exhausted")
	case errors.Is(err, app.ErrOrchestratorUnavailable):
		return a.stop("orchestrator_unavailable", "the model orchestrator cannot be reached, or kept refusing calls (rate or concurrency limit) while BAP retried")
	default:
		if app.AsError(err) == nil && errors.Is(err, context.DeadlineExceeded) {
			return a.stop("orchestrator_unavailable", fmt.Sprintf("the %s model did not answer in time", role))
		}
		return a.internal(err)
	}
}

// exhausted ends the task failed because a budget ran out.
func (a *autoRun) exhausted(name string, used, limit float64) (bool, time.Duration) {
	return a.end("budget_exhausted: "+name, map[string]any{"budget": name, "used": used, "limit": limit})
}

// stop ends the task failed for a cause other than a budget.
func (a *autoRun) stop(cause, detail string) (bool, time.Duration) {
	a.log.Warn("autonomous task stopped", "task_id", a.claim.TaskID, "cause", cause, "detail", detail)
	return a.end(cause+": "+detail, nil)
}

// end moves the task to failed (trigger dead_letter: its run cannot go on), recording
// budget.exhausted first when a budget ran out.
func (a *autoRun) end(cause string, budget map[string]any) (bool, time.Duration) {
	err := a.tx(func(c *app.LeaseTx) error {
		if c.Task().State.Terminal() {
			return app.ErrTaskEnded
		}
		if budget != nil {
			if err := c.Emit("budget.exhausted", "autonomous", budget); err != nil {
				return err
			}
		}
		if c.Task().State == task.Admitted {
			if err := c.Transition(task.Start, "autonomous"); err != nil {
				return err
			}
		}
		if _, err := task.Next(c.Task().State, task.DeadLetter); err != nil {
			return c.FinishLease() // not running (checkpointed): the client decides
		}
		if err := c.Transition(task.DeadLetter, cause); err != nil {
			return err
		}
		return c.AdmitWaiting()
	})
	if err != nil && !errors.Is(err, app.ErrTaskEnded) {
		return a.internal(err)
	}
	return false, 0
}

// finishGoal ends a run whose planner said done: the verifier judges the final page against the
// goal (advisory, recorded as verifier.judged), then close_task decides by the postcondition.
func (a *autoRun) finishGoal(plannerReason string) (bool, time.Duration) {
	verdict := map[string]any{"verdict": "unavailable"}
	obs, oerr := a.observe()
	if oerr == nil {
		user, err := json.Marshal(map[string]any{
			"goal": a.t.Goal, "postcondition": a.t.Postcondition, "planner_says": a.scrub.text(plannerReason),
			"steps": len(a.t.Plan), "final_page": obs,
		})
		if err != nil {
			return a.internal(err)
		}
		reply, err := a.complete(app.RoleVerifier, len(a.t.Plan), app.ModelRequest{Role: app.RoleVerifier, Policy: a.t.ModelPolicy,
			Messages: []app.ModelMessage{{Role: "system", Content: "Judge whether the final page shows the goal reached. Answer JSON {\"verdict\": \"yes\"|\"no\"|\"unsure\", \"reason\"}. Values shown as *** are protected."},
				{Role: "user", Content: string(user)}},
			SchemaName: "bap_verdict", Schema: verifierSchema, MaxTokens: 512})
		switch {
		case err == nil:
			var v struct {
				Verdict string `json:"verdict"`
				Reason  string `json:"reason"`
			}
			_ = json.Unmarshal(reply.Content, &v)
			if v.Verdict != "yes" && v.Verdict != "no" {
				v.Verdict = "unsure"
			}
			verdict = map[string]any{"verdict": v.Verdict, "model": reply.Model.ID, "provider": reply.Model.Provider}
			if v.Reason != "" {
				verdict["reason"] = truncate(a.scrub.text(v.Reason), 1000)
			}
		case errors.Is(err, app.ErrTaskEnded), errors.Is(err, app.ErrTaskCancelled), errors.Is(err, app.ErrLeaseLost), a.ctx.Err() != nil:
			return a.modelTrouble(app.RoleVerifier, err)
		default:
			// The verifier has no authority: without it the postcondition still decides.
			verdict["reason"] = "no verifier model could answer"
		}
	}
	if err := a.tx(func(c *app.LeaseTx) error {
		if c.Task().State.Terminal() {
			return app.ErrTaskEnded
		}
		return c.Emit("verifier.judged", "autonomous", verdict)
	}); err != nil {
		if errors.Is(err, app.ErrTaskEnded) {
			return false, 0
		}
		return a.internal(err)
	}
	return a.close()
}
