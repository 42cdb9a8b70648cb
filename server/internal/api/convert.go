package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
)

// This file translates between the generated wire types and the app's types. It decides nothing.

func ptr[T any](v T) *T { return &v }

func toTask(t *app.Task) (apigen.Task, error) {
	out := apigen.Task{
		TaskId: t.ID, State: apigen.TaskState(t.State), Goal: t.Goal,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, Deadline: t.Deadline, ClosedAt: t.EndedAt,
		Delegated: ptr(t.Delegated()),
	}
	mode := t.Mode
	if mode == "" {
		mode = app.ModeInteractive
	}
	out.Mode = ptr(apigen.TaskMode(mode))
	if t.ReplayOf != "" {
		out.ReplayOf = ptr(t.ReplayOf)
		out.ReplayMode = ptr(apigen.TaskReplayMode(t.ReplayMode))
	}
	if mode == app.ModeAutonomous {
		out.ModelPolicy, out.Budget = toModelPolicy(t.ModelPolicy), toBudget(t.Budget)
	}
	if t.Verification != "" {
		out.Verification = ptr(apigen.Verification(t.Verification))
	}
	if r := t.Result; r != nil {
		out.Result = ptr(toTaskResult(r))
	}
	if len(t.Outcomes) > 0 {
		out.Outcomes = ptr(toOutcomes(t.Outcomes))
	}
	pol := apigen.Policy{AllowedOrigins: t.Policy.AllowedOrigins}
	if pol.AllowedOrigins == nil {
		pol.AllowedOrigins = []string{}
	}
	if len(t.Policy.ApprovalRules) > 0 {
		rules := make([]apigen.ApprovalRule, 0, len(t.Policy.ApprovalRules))
		for _, r := range t.Policy.ApprovalRules {
			ar := apigen.ApprovalRule{Effect: apigen.ApprovalEffect(r.Effect)}
			if len(r.Origins) > 0 {
				ar.Origins = ptr(r.Origins)
			}
			if r.TTL > 0 {
				ar.Ttl = ptr(policy.FormatTTL(r.TTL))
			}
			if r.Channel != "" {
				ar.Channel = ptr(apigen.ApprovalChannel(r.Channel))
			}
			rules = append(rules, ar)
		}
		pol.ApprovalRules = &rules
	}
	if t.Policy.Record {
		pol.Record = ptr(true)
	}
	out.Policy = &pol
	if len(t.Postcondition) > 0 {
		var pc apigen.Postcondition
		if err := json.Unmarshal(t.Postcondition, &pc); err != nil {
			return out, fmt.Errorf("decoding postcondition of %s: %w", t.ID, err)
		}
		out.Postcondition = &pc
	}
	return out, nil
}

// toTaskResult renders a finished task's verifiable result.
func toTaskResult(r *app.ResultRecord) apigen.TaskResult {
	ev := make([]apigen.Artifact, 0, len(r.Evidence))
	for _, a := range r.Evidence {
		ev = append(ev, toArtifact(a))
	}
	out := apigen.TaskResult{
		Summary: r.Summary, Evidence: ev,
		Verification: apigen.ResultVerification{State: apigen.ResultVerificationState(r.VerificationState), Reason: r.VerificationReason},
		Integrity:    apigen.ResultIntegrity{Algorithm: apigen.ResultIntegrityAlgorithmSha256, Digest: r.Digest, ManifestArtifactId: r.ManifestArtifactID},
	}
	if r.Anchor != nil {
		out.Anchor = ptr(toAuditAnchor(r.Anchor))
	}
	if v := r.Replay; v != nil {
		rv := apigen.ReplayFinishedData{ReplayOf: v.ReplayOf, Outcome: apigen.ReplayFinishedDataOutcome(v.Outcome), Steps: v.Steps,
			StoppedBefore: v.StoppedBefore, Step: v.Step}
		if v.Mode != "" {
			rv.Mode = ptr(apigen.ReplayFinishedDataMode(v.Mode))
		}
		if v.Field != "" {
			rv.Field, rv.Expected, rv.Got = ptr(apigen.ReplayFinishedDataField(v.Field)), ptr(v.Expected), ptr(v.Got)
		}
		if len(v.AlteredRecords) > 0 {
			rv.AlteredRecords = &v.AlteredRecords
		}
		out.Replay = &rv
	}
	return out
}

func toModelPolicy(p app.ModelPolicy) *apigen.ModelPolicy {
	out := &apigen.ModelPolicy{MaxRetentionDays: p.MaxRetentionDays}
	if len(p.AllowedProviders) > 0 {
		out.AllowedProviders = ptr(p.AllowedProviders)
	}
	if len(p.AllowedRegions) > 0 {
		out.AllowedRegions = ptr(p.AllowedRegions)
	}
	if p.DataClassification != "" {
		out.DataClassification = ptr(apigen.DataClassification(p.DataClassification))
	}
	return out
}

func toBudget(b app.Budget) *apigen.TaskBudget {
	out := &apigen.TaskBudget{MaxSteps: ptr(b.MaxSteps), MaxTokens: ptr(int(b.MaxTokens)),
		MaxWallTimeMs: ptr(int(b.MaxWallTime.Milliseconds()))}
	if b.MaxCostUSD > 0 {
		out.MaxCostUsd = ptr(b.MaxCostUSD)
	}
	return out
}

func toReceipt(r *app.Receipt) apigen.Receipt {
	out := apigen.Receipt{
		ReceiptId: r.ID, CommandId: r.CommandID, TaskId: r.TaskID, Outcome: apigen.ReceiptOutcome(r.Outcome),
		Operation: apigen.CommandOperation(r.Operation), IssuedAt: r.IssuedAt,
	}
	if r.ProblemCode != "" {
		out.ProblemCode = ptr(apigen.ProblemCode(r.ProblemCode))
	}
	if r.Detail != "" {
		out.Detail = ptr(r.Detail)
	}
	return out
}

func toApproval(a *app.Approval) apigen.Approval {
	out := apigen.Approval{
		ApprovalId: a.ID, TaskId: a.TaskID, State: apigen.ApprovalState(a.State), Reason: a.Reason,
		CommandId: ptr(a.CommandID), RequestedAt: a.RequestedAt, ExpiresAt: a.ExpiresAt, ResolvedAt: a.ClosedAt,
	}
	if a.RequestedBy != "" {
		out.RequestedBy = ptr(a.RequestedBy)
	}
	if a.Channel != "" {
		out.Channel = ptr(apigen.ApprovalChannel(a.Channel))
	}
	if a.Effect != "" {
		out.Effect = ptr(apigen.ApprovalEffect(a.Effect))
	}
	if a.HeldMethod != "" {
		out.HeldRequest = &apigen.HeldRequest{Method: a.HeldMethod, Url: a.HeldURL}
		if len(a.Digest) == sha256.Size {
			out.HeldRequest.Digest = ptr(hex.EncodeToString(a.Digest))
		}
	}
	if a.ScreenshotArtifactID != "" {
		out.ScreenshotArtifactId = ptr(a.ScreenshotArtifactID)
	}
	if d := a.Decision; d != nil {
		out.Decision = ptr(apigen.ApprovalDecision(d.Decision))
		out.ResolvedBy = ptr(d.DecidedBy)
		if d.Workload != "" {
			out.ResolvedWorkload = ptr(d.Workload)
		}
		if d.Via != "" {
			out.ResolvedVia = ptr(apigen.DecisionChannel(d.Via))
		}
		if d.Reason != "" {
			out.ResolutionReason = ptr(d.Reason)
		}
	}
	if len(a.Decisions) > 0 {
		out.Decisions = ptr(toDecisions(a.Decisions))
	}
	return out
}

// toOutcomes renders an ended task's outcome chain, oldest first (the last is current).
func toOutcomes(in []app.OutcomeRecord) []apigen.TaskOutcomeRecord {
	out := make([]apigen.TaskOutcomeRecord, 0, len(in))
	for _, o := range in {
		r := apigen.TaskOutcomeRecord{OutcomeId: int(o.ID), State: apigen.TaskState(o.State), RecordedBy: o.RecordedBy, RecordedAt: o.RecordedAt}
		if o.Verification != "" {
			r.Verification = ptr(apigen.Verification(o.Verification))
		}
		if o.Reason != "" {
			r.Reason = ptr(o.Reason)
		}
		if o.Supersedes != 0 {
			r.Supersedes = ptr(int(o.Supersedes))
		}
		out = append(out, r)
	}
	return out
}

// toDecisions renders an approval's decision chain, oldest first (the last is current).
func toDecisions(in []app.Decision) []apigen.ApprovalDecisionRecord {
	out := make([]apigen.ApprovalDecisionRecord, 0, len(in))
	for _, d := range in {
		r := apigen.ApprovalDecisionRecord{DecisionId: int(d.ID), Decision: apigen.ApprovalDecision(d.Decision), DecidedBy: d.DecidedBy, DecidedAt: d.DecidedAt}
		if d.Workload != "" {
			r.DecidedWorkload = ptr(d.Workload)
		}
		if d.Via != "" {
			r.DecidedVia = ptr(apigen.DecisionChannel(d.Via))
		}
		if d.Reason != "" {
			r.Reason = ptr(d.Reason)
		}
		if d.Supersedes != 0 {
			r.Supersedes = ptr(int(d.Supersedes))
		}
		out = append(out, r)
	}
	return out
}

// toActor turns a stored subject ("kind:id") into the wire actor.
func toActor(subject string) *apigen.Actor {
	kind, id, _ := strings.Cut(subject, ":")
	a := &apigen.Actor{Kind: apigen.ActorKind(kind)}
	if id != "" && kind != "system" {
		a.Id = ptr(id)
	}
	return a
}

func toEvent(e *app.Event) apigen.Event {
	out := apigen.Event{
		EventId: e.ID, TaskId: e.TaskID, Seq: int(e.Seq), Type: apigen.EventType(e.Type), Time: e.Time,
		Data: e.Data, Actor: toActor(e.Actor),
	}
	if e.CommandID != "" || e.Cause != "" {
		c := &apigen.EventCause{}
		if e.CommandID != "" {
			c.CommandId = ptr(e.CommandID)
		}
		if e.Cause != "" {
			c.Reason = ptr(e.Cause)
		}
		out.Cause = c
	}
	if out.Data == nil {
		out.Data = map[string]any{}
	}
	return out
}

func fromCreateTask(in apigen.CreateTaskRequest) (app.CreateTaskInput, error) {
	out := app.CreateTaskInput{Goal: in.Goal, Deadline: in.Deadline}
	out.Policy.AllowedOrigins = in.Policy.AllowedOrigins
	out.Policy.Record = in.Policy.Record != nil && *in.Policy.Record
	if in.Policy.ApprovalRules != nil {
		for _, r := range *in.Policy.ApprovalRules {
			spec := app.ApprovalRuleSpec{Effect: string(r.Effect)}
			if r.Origins != nil {
				spec.Origins = *r.Origins
			}
			if r.Ttl != nil {
				d, err := policy.ParseTTL(*r.Ttl)
				if err != nil {
					return out, app.Errorf(app.CodeInvalidRequest, "policy.approval_rules[%d].ttl: %v", len(out.Policy.ApprovalRules), err)
				}
				spec.TTL = d
			}
			if r.Channel != nil {
				spec.Channel = string(*r.Channel)
			}
			out.Policy.ApprovalRules = append(out.Policy.ApprovalRules, spec)
		}
	}
	if in.Postcondition != nil {
		raw, err := json.Marshal(in.Postcondition)
		if err != nil {
			return out, err
		}
		out.Postcondition = raw
	}
	if in.Mode != nil {
		out.Mode = string(*in.Mode)
	}
	if p := in.ModelPolicy; p != nil {
		mp := &app.ModelPolicy{MaxRetentionDays: p.MaxRetentionDays}
		if p.AllowedProviders != nil {
			mp.AllowedProviders = *p.AllowedProviders
		}
		if p.AllowedRegions != nil {
			mp.AllowedRegions = *p.AllowedRegions
		}
		if p.DataClassification != nil {
			mp.DataClassification = string(*p.DataClassification)
		}
		out.ModelPolicy = mp
	}
	if b := in.Budget; b != nil {
		bb := &app.Budget{}
		if b.MaxSteps != nil {
			bb.MaxSteps = *b.MaxSteps
		}
		if b.MaxTokens != nil {
			bb.MaxTokens = int64(*b.MaxTokens)
		}
		if b.MaxCostUsd != nil {
			bb.MaxCostUSD = *b.MaxCostUsd
		}
		if b.MaxWallTimeMs != nil {
			bb.MaxWallTime = time.Duration(*b.MaxWallTimeMs) * time.Millisecond
		}
		out.Budget = bb
	}
	if in.Plan != nil {
		for _, st := range *in.Plan {
			ps := app.PlanStep{Op: string(st.Op)}
			if st.Args != nil {
				raw, err := json.Marshal(*st.Args)
				if err != nil {
					return out, err
				}
				ps.Args = raw
			}
			if st.MaxAttempts != nil {
				ps.MaxAttempts = *st.MaxAttempts
			}
			out.Plan = append(out.Plan, ps)
		}
	}
	return out, nil
}

// responder renders one operation's results (of type R) for the app, which stores them with the
// command.
type responder[R any] struct {
	status int
	render func(result R) (any, error)
	// accepted, when set, tells a result that answers 202 instead of status (an act held for
	// approval).
	accepted func(result R) bool
}

func (r responder[R]) Success(result R) (app.Response, error) {
	v, err := r.render(result)
	if err != nil {
		return app.Response{}, err
	}
	status := r.status
	if r.accepted != nil && r.accepted(result) {
		status = http.StatusAccepted
	}
	body, err := json.Marshal(v)
	if err != nil {
		return app.Response{}, err
	}
	return app.Response{Status: status, Body: body}, nil
}

func (r responder[R]) Failure(e *app.Error, rc *app.Receipt) (app.Response, error) {
	status, p := newProblem(e)
	if rc != nil {
		p.Receipt = toReceipt(rc)
	}
	body, err := json.Marshal(p)
	if err != nil {
		return app.Response{}, err
	}
	return app.Response{Status: status, Body: body}, nil
}

func taskReceipt(res *app.TaskResult) (apigen.Task, apigen.Receipt, error) {
	t, err := toTask(res.Task)
	return t, toReceipt(res.Receipt), err
}

var createTaskResponder = responder[*app.TaskResult]{status: 201, render: func(res *app.TaskResult) (any, error) {
	t, rc, err := taskReceipt(res)
	return apigen.CreateTaskResponse{Task: t, Receipt: rc}, err
}}

var replayTaskResponder = responder[*app.TaskResult]{status: 201, render: func(res *app.TaskResult) (any, error) {
	t, rc, err := taskReceipt(res)
	return apigen.ReplayTaskResponse{Task: t, Receipt: rc}, err
}}

var cancelTaskResponder = responder[*app.TaskResult]{status: 200, render: func(res *app.TaskResult) (any, error) {
	t, rc, err := taskReceipt(res)
	return apigen.CancelTaskResponse{Task: t, Receipt: rc}, err
}}

var closeTaskResponder = responder[*app.CloseResult]{status: 200, render: func(res *app.CloseResult) (any, error) {
	t, err := toTask(res.Task)
	if err != nil {
		return nil, err
	}
	unmet := make([]apigen.Clause, 0, len(res.Postcondition.Unmet))
	for _, raw := range res.Postcondition.Unmet {
		var c apigen.Clause
		if err := c.UnmarshalJSON(raw); err != nil {
			return nil, err
		}
		unmet = append(unmet, c)
	}
	evidence := make([]apigen.Artifact, 0, len(res.Evidence))
	for _, a := range res.Evidence {
		evidence = append(evidence, toArtifact(a))
	}
	return apigen.CloseTaskResponse{
		Task: t, Receipt: toReceipt(res.Receipt), Evidence: evidence,
		Postcondition: apigen.PostconditionResult{Satisfied: res.Postcondition.Satisfied, Unmet: unmet,
			ContextId: nonEmpty(res.Postcondition.ContextID)},
	}, nil
}}

var resumeTaskResponder = responder[*app.ResumeResult]{status: 200, render: func(res *app.ResumeResult) (any, error) {
	t, err := toTask(res.Task)
	if err != nil {
		return nil, err
	}
	return apigen.ResumeTaskResponse{Task: t, Session: toSession(res.Session), Receipt: toReceipt(res.Receipt)}, nil
}}

var requestApprovalResponder = responder[*app.ApprovalResult]{status: 201, render: func(res *app.ApprovalResult) (any, error) {
	return apigen.RequestApprovalResponse{Approval: toApproval(res.Approval), Receipt: toReceipt(res.Receipt)}, nil
}}

var resolveApprovalResponder = responder[*app.ApprovalResult]{status: 200, render: func(res *app.ApprovalResult) (any, error) {
	out := apigen.ResolveApprovalResponse{Approval: toApproval(res.Approval), Receipt: toReceipt(res.Receipt)}
	if res.ActionReceipt != nil {
		out.ActionReceipt = ptr(toReceipt(res.ActionReceipt))
	}
	return out, nil
}}

// InterruptedResponse renders what the key of a command interrupted by a crash replays once
// recovery has classified it: 200 with the command's receipt (CONTRACT "Mutating requests").
func InterruptedResponse(rc *app.Receipt) (app.Response, error) {
	body, err := json.Marshal(apigen.InterruptedCommandResponse{Receipt: toReceipt(rc)})
	if err != nil {
		return app.Response{}, err
	}
	return app.Response{Status: 200, Body: body}, nil
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func fromQuery(q *apigen.Query) *page.Query {
	if q == nil {
		return nil
	}
	return &page.Query{
		Role: deref(q.Role), Name: deref(q.Name), Text: deref(q.Text), Label: deref(q.Label),
		Placeholder: deref(q.Placeholder), TestID: deref(q.TestId), Within: deref(q.Within), Exact: deref(q.Exact),
	}
}

func toNodes(nodes []page.Node) []apigen.Node {
	out := make([]apigen.Node, 0, len(nodes))
	for i := range nodes {
		out = append(out, toNode(&nodes[i]))
	}
	return out
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toNode(n *page.Node) apigen.Node {
	out := apigen.Node{
		NodeId: nonEmpty(n.NodeID), Role: n.Role, Name: nonEmpty(n.Name), Value: nonEmpty(n.Value), Description: nonEmpty(n.Description),
		Href: nonEmpty(n.URL), Checked: n.Checked, Disabled: n.Disabled, Expanded: n.Expanded, Focused: n.Focused,
		Required: n.Required, Selected: n.Selected, Placeholder: nonEmpty(n.Placeholder), InputType: nonEmpty(n.InputType),
		Readonly: n.ReadOnly,
	}
	if n.Change != "" {
		out.Change = ptr(apigen.NodeChange(n.Change))
	}
	if n.Mixed {
		out.Mixed = ptr(true)
	}
	if n.Repeated {
		out.Repeated = ptr(true)
	}
	if len(n.Options) > 0 {
		out.Options = &n.Options
	}
	if n.Level > 0 {
		out.Level = ptr(n.Level)
	}
	if len(n.Children) > 0 {
		kids := toNodes(n.Children)
		out.Children = &kids
	}
	return out
}

func toSession(rec *app.SessionRecord) apigen.BrowserSession {
	return apigen.BrowserSession{
		SessionId: rec.ID, TaskId: rec.TaskID, ContextId: rec.ContextID, State: apigen.BrowserSessionState(rec.State),
		CreatedAt: rec.CreatedAt, ClosedAt: rec.EndedAt, FromCheckpoint: nonEmpty(rec.FromCheckpoint),
		Engine: apigen.BrowserEngine(rec.Engine), EngineVersion: nonEmpty(rec.EngineVersion),
	}
}

func sessionResponder(status int, create bool) responder[*app.SessionResult] {
	return responder[*app.SessionResult]{status: status, render: func(res *app.SessionResult) (any, error) {
		if create {
			return apigen.CreateBrowserSessionResponse{Session: toSession(res.Session), Receipt: toReceipt(res.Receipt)}, nil
		}
		return apigen.CloseBrowserSessionResponse{Session: toSession(res.Session), Receipt: toReceipt(res.Receipt)}, nil
	}}
}

var navigateResponder = responder[*app.NavigateResult]{status: 200, render: func(res *app.NavigateResult) (any, error) {
	out := apigen.NavigateResponse{ContextId: res.ContextID, EpochId: res.EpochID, Url: res.URL, Title: nonEmpty(res.Title),
		Receipt: toReceipt(res.Receipt)}
	if res.Status != 0 {
		out.Status = ptr(res.Status)
	}
	return out, nil
}}

var actResponder = responder[*app.ActOutcome]{status: 200, accepted: func(o *app.ActOutcome) bool { return o.Held != nil }, render: func(o *app.ActOutcome) (any, error) {
	if h := o.Held; h != nil {
		return apigen.ActPendingApprovalResponse{Approval: toApproval(h.Approval), Receipt: toReceipt(h.Receipt)}, nil
	}
	res := o.Done
	out := apigen.ActResponse{ContextId: nonEmpty(res.ContextID), EpochId: res.EpochID, Navigated: res.Navigated,
		Url: nonEmpty(res.URL), Receipt: toReceipt(res.Receipt)}
	if len(res.NewContexts) > 0 {
		out.NewContexts = &res.NewContexts
	}
	if len(res.Dialogs) > 0 {
		ds := make([]apigen.ActDialog, 0, len(res.Dialogs))
		for _, d := range res.Dialogs {
			ds = append(ds, apigen.ActDialog{Type: apigen.ActDialogType(d.Type), Message: nonEmpty(d.Message), Accepted: d.Accepted})
		}
		out.Dialogs = &ds
	}
	if len(res.Downloads) > 0 {
		dls := make([]apigen.ActDownload, 0, len(res.Downloads))
		for i, d := range res.Downloads {
			dl := apigen.ActDownload{Name: d.Name, MediaType: nonEmpty(d.MediaType), Size: int(d.Size), Reason: nonEmpty(d.Reason)}
			if i < len(res.DownloadArtifacts) {
				dl.ArtifactId = nonEmpty(res.DownloadArtifacts[i])
			}
			dls = append(dls, dl)
		}
		out.Downloads = &dls
	}
	if res.Effect != "" {
		e := apigen.ApprovalEffect(res.Effect)
		out.Effect = &e
	}
	return out, nil
}}
