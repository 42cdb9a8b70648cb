package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/task"
)

// The optional roles of the autonomous loop (issue #11, ADR 0013, docs/orchestrator.md): the
// safety role judges each proposed step and classifies the page before the step runs, and the
// observer role condenses long pages for the planner. Both are used only when the orchestrator
// offers an approved model for them under the task's model_policy. Neither has authority: a safety
// verdict can only make a task stricter (block a step, hold it for a person, or end the task
// because the page is more sensitive than its model_policy allows), never permit what the task's
// policy forbids; an observer's summary only replaces page text the planner would have seen.

const (
	// observerThreshold: a masked observation longer than this (bytes of JSON) is condensed by
	// the observer, when the task has one, before the planner sees it.
	observerThreshold = 8 << 10
	// maxBlockedProposals: consecutive proposals the safety role blocked before the task fails.
	maxBlockedProposals = 3
)

// safetySchema constrains the safety role's answer.
var safetySchema = json.RawMessage(`{
  "type": "object", "additionalProperties": false, "required": ["verdict", "classification", "reason"],
  "properties": {"verdict": {"enum": ["allow", "hold", "block"]},
    "classification": {"enum": ["public", "internal", "confidential", "restricted"]},
    "reason": {"type": "string", "maxLength": 1000}}
}`)

// observerSchema constrains the observer's answer: a short structured summary of the page.
var observerSchema = json.RawMessage(`{
  "type": "object", "additionalProperties": false, "required": ["summary", "facts", "controls"],
  "properties": {
    "summary": {"type": "string", "maxLength": 2000},
    "facts": {"type": "array", "maxItems": 40, "items": {"type": "string", "maxLength": 300}},
    "controls": {"type": "array", "maxItems": 60, "items": {"type": "object", "additionalProperties": false,
      "required": ["role", "name"], "properties": {"role": {"type": "string", "maxLength": 64}, "name": {"type": "string", "maxLength": 300}}}}}
}`)

const safetyInstructions = `You review, for safety, ONE step a planner model proposed for a browser task, before it runs. Answer JSON {"verdict", "classification", "reason"}.
verdict: "allow" (the step may run; the task's policy and approval rules still apply), "hold" (a person must approve it first) or "block" (never run it).
classification: the most sensitive data the page shows: public, internal, confidential or restricted. Values shown as *** are protected.`

const observerInstructions = `Condense a browser page (its accessibility tree) for a planner model. Answer JSON {"summary", "facts", "controls"}:
a short summary of the page, the facts that matter for the goal (or for the focus when one is given: the fields it asks for, with their values), and the interactive controls (role, name) the planner may use. Values shown as *** are protected: never guess them.`

// safetyJudgement is what the safety role decided about one proposed step.
type safetyJudgement struct {
	verdict        string // allow, hold or block
	classification string
	reason         string
	exceeded       bool // the page is classified above the task's model_policy.data_classification
}

// decideRoles settles whether this run uses the safety and observer roles. The safety role's
// decision is kept for the task's life in its history: once a task was judged by a safety model,
// a safety role that loses its models stops the task (fail closed, never a silent downgrade);
// when it had none at the first step, that is recorded once (safety.judged, verdict skipped).
func (a *autoRun) decideRoles(hist roleHistory) error {
	switch {
	case hist.safetySkipped:
		a.safety = false
	case hist.safetyUsed:
		a.safety = true
	default:
		on, err := a.eligible(app.RoleSafety)
		if err != nil {
			return err
		}
		if !on {
			if err := a.tx(func(c *app.LeaseTx) error {
				if c.Task().State.Terminal() {
					return app.ErrTaskEnded
				}
				return c.Emit("safety.judged", "autonomous", map[string]any{"verdict": "skipped",
					"reason": "no approved safety model satisfies the task's model_policy: steps are not judged by a model; the task's policy alone decides"})
			}); err != nil {
				return err
			}
		}
		a.safety = on
	}
	// The observer has no say over what is allowed: it is used when it has an eligible model now.
	on, err := a.eligible(app.RoleObserver)
	a.observer = err == nil && on
	return nil
}

// roleHistory is what the task's history says of its optional roles.
type roleHistory struct{ safetySkipped, safetyUsed bool }

// eligible tells whether role has an approved model satisfying the task's model policy.
func (a *autoRun) eligible(role string) (bool, error) {
	orch := a.w.m
	if orch == nil {
		return false, app.ErrOrchestratorUnavailable
	}
	ctx, cancel := context.WithTimeout(a.ctx, 15*time.Second)
	defer cancel()
	models, err := orch.Eligible(ctx, role, a.t.ModelPolicy)
	switch {
	case errors.Is(err, app.ErrNoCompliantModel):
		return false, nil
	case err != nil:
		return false, err
	}
	return len(models) > 0, nil
}

// condense is the page as the planner sees it: the masked observation, or — when the task has an
// observer and the page is long, or the last step extracted with a schema — the observer's short
// structured summary of it (the observer sees only the masked observation). An observer that
// cannot answer leaves the planner the masked observation.
func (a *autoRun) condense(obs maskedObservation, index int) (any, error) {
	if !a.observer {
		return obs, nil
	}
	raw, err := json.Marshal(obs)
	if err != nil {
		return nil, err
	}
	focus := a.schemaFocus()
	if len(raw) <= observerThreshold && focus == nil {
		return obs, nil
	}
	in := map[string]any{"goal": a.t.Goal, "page": json.RawMessage(raw)}
	if focus != nil {
		in["focus"] = focus
	}
	user, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	reply, err := a.complete(app.RoleObserver, index, app.ModelRequest{Role: app.RoleObserver, Policy: a.t.ModelPolicy,
		Messages:   []app.ModelMessage{{Role: "system", Content: observerInstructions}, {Role: "user", Content: string(user)}},
		SchemaName: "bap_observation", Schema: observerSchema, MaxTokens: 1024, Reasoning: "low"})
	if err != nil {
		if a.callEnded(err) {
			return nil, err
		}
		return obs, nil // no observer could answer: the planner reads the page itself
	}
	var s struct {
		Summary  string   `json:"summary"`
		Facts    []string `json:"facts"`
		Controls []struct {
			Role string `json:"role"`
			Name string `json:"name"`
		} `json:"controls"`
	}
	if json.Unmarshal(reply.Content, &s) != nil {
		return obs, nil
	}
	facts := make([]string, 0, len(s.Facts))
	for _, f := range s.Facts {
		facts = append(facts, truncate(a.scrub.text(f), 300))
	}
	controls := make([]map[string]string, 0, len(s.Controls))
	for _, c := range s.Controls {
		controls = append(controls, map[string]string{"role": truncate(c.Role, 64), "name": truncate(a.scrub.text(c.Name), 300)})
	}
	return map[string]any{"url": obs.URL, "title": obs.Title, "condensed_by": app.RoleObserver,
		"summary": truncate(a.scrub.text(s.Summary), 2000), "facts": facts, "controls": controls}, nil
}

// schemaFocus is what the last step extracted with a schema (kind schema) asked for, nil if the
// last step was no such extract.
func (a *autoRun) schemaFocus() map[string]any {
	k := len(a.t.Plan) - 1
	if k < 0 || a.t.Plan[k].Op != "extract" || a.progress[k].State != app.StepDone {
		return nil
	}
	var x struct {
		Kind   string          `json:"kind"`
		Schema json.RawMessage `json:"schema"`
		Fields json.RawMessage `json:"fields"`
	}
	if json.Unmarshal(a.t.Plan[k].Args, &x) != nil || x.Kind != "schema" {
		return nil
	}
	f := map[string]any{"kind": "schema"}
	if len(x.Schema) > 0 {
		f["schema"] = x.Schema
	}
	if len(x.Fields) > 0 {
		f["fields"] = x.Fields
	}
	return f
}

// callEnded tells whether a model call failed because the task or this run ended (cancelled,
// expired, lease lost, the node stopping, the deadline), not because its models failed.
func (a *autoRun) callEnded(err error) bool {
	return errors.Is(err, app.ErrTaskEnded) || errors.Is(err, app.ErrTaskCancelled) || errors.Is(err, app.ErrLeaseLost) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || a.ctx.Err() != nil
}

// judge asks the safety role about step index (masked) on the page the planner saw (masked or
// condensed), records safety.judged, and answers the verdict. When every approved safety model
// fails the step is held for a person (fail closed).
func (a *autoRun) judge(view any, index int, st app.PlanStep) (*safetyJudgement, error) {
	pol := a.t.ModelPolicy.DataClassification
	if pol == "" {
		pol = "restricted"
	}
	user, err := json.Marshal(map[string]any{
		"goal": a.t.Goal, "allowed_origins": a.t.Policy.AllowedOrigins, "task_data_classification": pol,
		"page":          view,
		"proposed_step": map[string]any{"index": index, "op": st.Op, "args": scrubJSON(maskArgs(st.Op, st.Args), &a.scrub)},
	})
	if err != nil {
		return nil, err
	}
	reply, err := a.complete(app.RoleSafety, index, app.ModelRequest{Role: app.RoleSafety, Policy: a.t.ModelPolicy,
		Messages:   []app.ModelMessage{{Role: "system", Content: safetyInstructions}, {Role: "user", Content: string(user)}},
		SchemaName: "bap_safety", Schema: safetySchema, MaxTokens: 512})
	j := &safetyJudgement{}
	data := map[string]any{"step": index}
	var all *app.AllModelsFailedError
	switch {
	case err == nil:
		var v struct {
			Verdict        string `json:"verdict"`
			Classification string `json:"classification"`
			Reason         string `json:"reason"`
		}
		_ = json.Unmarshal(reply.Content, &v)
		j.verdict, j.classification, j.reason = v.Verdict, v.Classification, truncate(a.scrub.text(v.Reason), 500)
		if j.verdict != "allow" && j.verdict != "block" {
			j.verdict = "hold" // anything else is not a permission: a person decides
		}
		if !slices.Contains(app.DataClassifications, j.classification) {
			j.classification = "restricted" // unknown: the most sensitive (fail closed)
		}
		data["model"], data["provider"], data["classification"] = reply.Model.ID, reply.Model.Provider, j.classification
	case errors.As(err, &all) && !a.callEnded(err):
		// Every approved safety model failed: fail closed, a person decides.
		j.verdict, j.reason = "hold", "no approved safety model could answer: the step is held for a person (fail closed)"
		data["fail_closed"] = true
	default:
		return nil, err
	}
	j.exceeded = slices.Index(app.DataClassifications, j.classification) > slices.Index(app.DataClassifications, pol)
	data["verdict"] = j.verdict
	if j.reason != "" {
		data["reason"] = j.reason
	}
	if err := a.tx(func(c *app.LeaseTx) error {
		if c.Task().State.Terminal() {
			return app.ErrTaskEnded
		}
		return c.Emit("safety.judged", "autonomous", data)
	}); err != nil {
		return nil, err
	}
	return j, nil
}

// gate holds step index — not an act (acts are held by the act use-case itself, so approving runs
// the held action once) — for a person's approval as request_approval does: the task waits in
// waiting_for_approval; approved, the step runs; denied, it never runs and the planner is told.
// Its stored arguments are its own (only a fill's value is masked, and a fill is an act), so a
// worker taking over can run it.
func (a *autoRun) gate(index int, reason string) *stepResult {
	key := planKey(a.claim.TaskID, a.claim.Epoch, fmt.Sprintf("safety-hold:%d", index))
	body, err := json.Marshal(map[string]any{"reason": reason})
	if err != nil {
		return &stepResult{err: err}
	}
	rsp, _, err := a.command("request_approval", key, []string{a.claim.TaskID}, body, func(call app.Call, rsp *app.PlanResponder) (app.Response, error) {
		return a.s.RequestApproval(a.ctx, call, a.claim.TaskID, reason, app.ForPlan[*app.ApprovalResult](rsp))
	})
	if err != nil {
		return errResult(err)
	}
	if rsp.Problem != nil {
		return &stepResult{problem: rsp.Problem}
	}
	if rsp.ApprovalID == "" {
		return &stepResult{err: fmt.Errorf("request_approval for step %d answered no approval", index)}
	}
	return &stepResult{held: rsp.ApprovalID}
}

// settleGate finds what became of step i, held by gate (a held step that never started: no
// command key). Approved, it is run by the loop once the session is live.
func (a *autoRun) settleGate(i int) (res *stepResult, approved bool) {
	ao, err := a.s.ApprovalOutcomeOf(a.ctx, a.claim, a.progress[i].ApprovalID)
	if err != nil {
		return &stepResult{err: err}, false
	}
	switch ao.State {
	case task.ApprovalPending:
		return &stepResult{wait: true}, false
	case task.ApprovalApproved:
		return nil, true
	case task.ApprovalDenied:
		return &stepResult{deadReason: "approval_denied", problem: &app.Error{Code: app.CodeInvalidTransition,
			Detail: "a person denied the step the safety review held; it never ran"}}, false
	case task.ApprovalExpired:
		// Nobody decided before its expires_at (or the task expired: recording the dead letter
		// then finds it ended). An expired approval is never revived.
		return &stepResult{deadReason: "approval_expired", problem: &app.Error{Code: app.CodeApprovalNotPending,
			Detail: "nobody decided on the step the safety review held before its approval expired; it never ran"}}, false
	default: // cancelled: so is the task
		return &stepResult{err: app.ErrTaskEnded}, false
	}
}
