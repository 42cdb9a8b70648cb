package app

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/originweave/bap/server/internal/task"
)

// Decisions bind what the brief lists (issue #23 item 6; migration 0014): each authorization and
// policy decision is recorded with its actor, workload (OAuth client), tenant, session, task,
// purpose, operation, origin scope, data classification and approval state. The request's
// authorization is recorded by the transport (PointRequest); the policy's decisions — admission,
// the origin policy, approval rules, who may resolve an approval — by the command that took them,
// in its own transaction, when its receipt is issued. None of these comes from a request body:
// the actor, client and channel are the authenticated principal's (Call), the session, task and
// approval are the objects the command acted on, and purpose, origin scope and data
// classification are the task's own (its goal and policy), bound through the task.

// decisionNote is what a command's steps noted for its decision record.
type decisionNote struct {
	session       string
	origin        string // the origin it reached for ("" when none)
	approval      string
	approvalState task.ApprovalState
}

// notingOrigin wraps a phase-1 prepare so that the command's decision names rawURL's origin.
func notingOrigin[P any](rawURL string, prepare func(context.Context, *commandCtx) (P, error)) func(context.Context, *commandCtx) (P, error) {
	return func(ctx context.Context, c *commandCtx) (P, error) {
		c.cmd.note.origin = originOf(rawURL)
		return prepare(ctx, c)
	}
}

// originOf is scheme://host[:port] of rawURL ("" when it has none).
func originOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	o := u.Scheme + "://" + u.Host
	if len(o) > 300 {
		return ""
	}
	return o
}

// decisionPoint is where the command's receipt r was decided, or "" for a command that took no
// policy decision (its request's authorization is recorded by the transport).
func decisionPoint(operation string, r *Receipt) string {
	switch {
	case r.ProblemCode == CodeOriginNotAllowed:
		return PointOriginPolicy
	case r.ProblemCode == CodeApproverNotPermitted, operation == "resolve_approval":
		return PointApprovalResolution
	case r.Outcome == task.PendingApproval, operation == "act", operation == "request_approval":
		return PointApprovalRule
	case operation == "create_task":
		return PointAdmission
	case operation == "navigate":
		return PointOriginPolicy
	}
	return ""
}

// recordDecision records the policy decision the command's receipt r carries.
func (c *commandCtx) recordDecision(ctx context.Context, r *Receipt) error {
	point := decisionPoint(c.cmd.Operation, r)
	if point == "" || c.cmd.ID == "" {
		return nil
	}
	outcome, reason := AuthAllowed, string(r.ProblemCode)
	switch r.Outcome {
	case task.Rejected:
		outcome = AuthRefused
	case task.PendingApproval:
		outcome, reason = AuthHeld, "approval_required"
	default: // applied, no side effect or interrupted: the command was allowed to run
	}
	if point == PointApprovalRule && outcome == AuthAllowed && c.cmd.note.approvalState == task.ApprovalPending {
		outcome, reason = AuthHeld, "approval_required" // request_approval: the task waits for it
	}
	if point == PointAdmission && outcome == AuthAllowed {
		reason = "admitted"
		if c.t.State == task.Created {
			reason = "queued" // waits in created until capacity frees
		}
	}
	n := c.cmd.note
	d := AuthDecision{
		Time: c.now, Tenant: c.cmd.Tenant, Subject: c.cmd.Actor, ClientID: c.cmd.client, Via: c.cmd.via,
		Operation: c.cmd.Operation, TaskID: c.t.ID, Outcome: outcome, Reason: reason, Point: point,
		SessionID: n.session, CommandID: c.cmd.ID, TargetOrigin: n.origin, ApprovalID: n.approval, ApprovalState: string(n.approvalState),
	}
	if d.Via == "" && c.cmd.lease == nil {
		d.Via = ViaAPI
	}
	if err := c.tx.RecordDecision(ctx, d); err != nil {
		return fmt.Errorf("recording the decision: %w", err)
	}
	return nil
}

// DecisionFilter narrows ListDecisions.
type DecisionFilter struct {
	Tenant string // "" is every tenant (an operator's view)
	TaskID string
	Limit  int // 1–1000 (default 100)
}

// DecisionBinding is one recorded decision with the ten things it is bound to.
type DecisionBinding struct {
	ID             int64     `json:"decision_id"`
	Time           time.Time `json:"time"`
	Point          string    `json:"decision_point"`
	Outcome        string    `json:"outcome"`
	Reason         string    `json:"reason,omitempty"`
	Actor          string    `json:"actor"`
	Workload       string    `json:"workload,omitempty"`
	Via            string    `json:"via,omitempty"`
	Tenant         string    `json:"tenant,omitempty"`
	SessionID      string    `json:"session_id,omitempty"`
	TaskID         string    `json:"task_id,omitempty"`
	Purpose        string    `json:"purpose,omitempty"`
	Operation      string    `json:"operation"`
	Scope          string    `json:"scope,omitempty"`
	TargetOrigin   string    `json:"target_origin,omitempty"`
	OriginScope    []string  `json:"origin_scope,omitempty"`
	Classification string    `json:"data_classification,omitempty"`
	ApprovalID     string    `json:"approval_id,omitempty"`
	ApprovalState  string    `json:"approval_state"`
	CommandID      string    `json:"command_id,omitempty"`
}

// ListDecisions lists recorded decisions, newest first: an operator's view (`bap decisions
// list`), never an API a client reaches.
func (s *Service) ListDecisions(ctx context.Context, f DecisionFilter) ([]DecisionBinding, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 1 || f.Limit > 1000 {
		return nil, Errorf(CodeInvalidRequest, "limit must be between 1 and 1000")
	}
	return s.store.ListDecisions(ctx, f)
}
