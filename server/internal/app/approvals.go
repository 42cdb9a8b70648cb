package app

import (
	"context"
	"fmt"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/task"
)

// ApprovalResult is the result of request_approval and resolve_approval. ActionReceipt is the
// receipt of a held action that an approval released (none until browser actions can be held).
type ApprovalResult struct {
	Approval      *Approval
	Receipt       *Receipt
	ActionReceipt *Receipt
}

// RequestApproval asks a person to approve the task's next step; the task waits in
// waiting_for_approval until every pending approval is resolved.
func (s *Service) RequestApproval(ctx context.Context, call Call, taskID, reason string, r Responder) (Response, error) {
	return s.runCommand(ctx, call, r, func(ctx context.Context, tx Tx, cmd *Command) (any, error) {
		c, err := s.beginOnTask(ctx, tx, cmd, taskID, false)
		if err != nil {
			return nil, err
		}
		switch c.t.State {
		case task.Admitted:
			// request_approval is the task's first command: it starts running, then waits.
			if err := c.transition(ctx, c.t, task.Start, "request_approval"); err != nil {
				return nil, err
			}
			if err := c.transition(ctx, c.t, task.AwaitApproval, "request_approval"); err != nil {
				return nil, err
			}
		case task.WaitingForApproval:
			// Already waiting: one more approval joins the pending set.
		default:
			if err := c.transition(ctx, c.t, task.AwaitApproval, "request_approval"); err != nil {
				return nil, c.reject(ctx, AsError(err))
			}
		}
		a := &Approval{
			ID: ids.New(ids.Approval), TaskID: c.t.ID, Tenant: c.t.Tenant, CommandID: cmd.ID,
			State: task.ApprovalPending, Reason: reason, RequestedBy: call.Actor.Subject, RequestedAt: c.now,
		}
		if err := tx.InsertApproval(ctx, a); err != nil {
			return nil, fmt.Errorf("inserting approval: %w", err)
		}
		if err := c.emit(ctx, c.t, "approval.requested", "request_approval", map[string]any{
			"approval_id": a.ID, "reason": a.Reason,
		}); err != nil {
			return nil, err
		}
		rc, err := c.receipt(ctx, task.Applied, "", "")
		if err != nil {
			return nil, err
		}
		return &ApprovalResult{Approval: a, Receipt: rc}, nil
	})
}

// ResolveApproval records the authenticated caller's decision on a pending approval. When it was
// the task's last pending approval, the task runs again.
func (s *Service) ResolveApproval(ctx context.Context, call Call, approvalID, decision, reason string, r Responder) (Response, error) {
	if decision != "approve" && decision != "deny" {
		return Response{}, Errorf(CodeInvalidRequest, "decision must be approve or deny")
	}
	if held, ok := s.heldAction(approvalID); ok && decision == "approve" {
		return s.approveHeldAction(ctx, call, approvalID, reason, held, r)
	}
	if err := s.checkApprovalHere(ctx, call.Actor, approvalID); err != nil {
		return Response{}, err // its held action waits on another live node (ownership.go)
	}
	defer func() {
		// Denied (or found closed): whatever it held never runs.
		if a, err := s.store.GetApproval(context.WithoutCancel(ctx), call.Actor.Tenant, approvalID); err == nil && a.State != task.ApprovalPending {
			s.held.Delete(approvalID)
		}
	}()
	return s.runCommand(ctx, call, r, func(ctx context.Context, tx Tx, cmd *Command) (any, error) {
		// Lock the task before the approval: the same order as cancel_task, so the two never deadlock.
		peek, err := tx.GetApproval(ctx, call.Actor.Tenant, approvalID)
		if err != nil {
			return nil, err
		}
		c, err := s.beginOnTask(ctx, tx, cmd, peek.TaskID, false)
		if err != nil {
			return nil, err
		}
		a, err := c.decide(ctx, call, approvalID, decision, reason)
		if err != nil {
			return nil, err
		}
		rc, err := c.receipt(ctx, task.Applied, "", "")
		if err != nil {
			return nil, err
		}
		return &ApprovalResult{Approval: a, Receipt: rc}, nil
	})
}

// decide records the caller's decision on a pending approval (a refusal is returned as an
// *Error to record as rejected) and lets the task run again when none is left pending.
func (c *commandCtx) decide(ctx context.Context, call Call, approvalID, decision, reason string) (*Approval, error) {
	a, err := c.tx.LockApproval(ctx, call.Actor.Tenant, approvalID)
	if err != nil {
		return nil, err
	}
	if c.s.cfg.SeparationOfDuties && a.RequestedBy == call.Actor.Subject {
		return nil, c.reject(ctx, Errorf(CodeInsufficientScope, "separation of duties: whoever requested an approval may not resolve it"))
	}
	next, err := a.State.Resolve(task.Decision(decision))
	if err != nil {
		return nil, c.reject(ctx, Errorf(CodeApprovalNotPending, "approval is %s, not pending", a.State))
	}
	a.State = next
	closed := c.now
	a.ClosedAt = &closed
	a.Decision = &Decision{Decision: decision, DecidedBy: call.Actor.Subject, Reason: reason, DecidedAt: c.now}
	if err := c.tx.CloseApproval(ctx, a, c.cmd.ID); err != nil {
		return nil, fmt.Errorf("closing approval: %w", err)
	}
	if err := c.emit(ctx, c.t, "approval.resolved", "resolve_approval", map[string]any{
		"approval_id": a.ID, "state": string(a.State), "decision": decision, "decided_by": call.Actor.Subject,
	}); err != nil {
		return nil, err
	}
	if c.t.State == task.WaitingForApproval {
		pending, err := c.tx.PendingApprovals(ctx, c.t.Tenant, c.t.ID)
		if err != nil {
			return nil, err
		}
		if len(pending) == 0 {
			if err := c.transition(ctx, c.t, task.ApprovalResolved, "resolve_approval"); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}
