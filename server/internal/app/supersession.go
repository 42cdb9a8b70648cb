package app

import (
	"context"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/task"
)

// Corrections (issue #23 item 2; migration 0013). How a task ended, what an operator found an
// interrupted command did, and an approver's decision are records that are never updated in
// place: a correction is a new record that supersedes the current one, the database refuses any
// UPDATE or DELETE of them, and reads show the current record with its chain. A correction
// changes the record, never the past: no command runs again, an approved action is not undone.

// OutcomeRecord is one record of how a task ended: the root, written when it reached its
// terminal state, or a correction of the one it supersedes.
type OutcomeRecord struct {
	ID           int64
	State        task.State
	Verification string // "", "verified", "unverified" or "unmet"
	Reason       string
	RecordedBy   string
	RecordedAt   time.Time
	Supersedes   int64 // 0 for the root
}

// OutcomeCorrection is what an operator corrects about how a task ended.
type OutcomeCorrection struct {
	// State is succeeded or failed: whether the task did what it was for.
	State task.State
	// Verification is unverified or unmet ("" keeps none): a correction never claims verified,
	// which only the runtime's own evaluation of the postcondition records.
	Verification string
	// Reason says why (required, at most 2000 characters).
	Reason string
}

// CorrectTaskOutcome records an operator's correction of how an ended task ended: a new outcome
// that supersedes the current one, and the task's state and verification become its. The task
// stays ended; its history gets a task.state_changed event with cause outcome_corrected.
func (s *Service) CorrectTaskOutcome(ctx context.Context, operator Actor, taskID string, in OutcomeCorrection) (*Task, error) {
	switch {
	case in.State != task.Succeeded && in.State != task.Failed:
		return nil, Errorf(CodeInvalidRequest, "a corrected outcome is succeeded or failed")
	case in.Verification != "" && in.Verification != "unverified" && in.Verification != "unmet":
		return nil, Errorf(CodeInvalidRequest, "a corrected verification is unverified or unmet: only the runtime's postcondition check verifies")
	case in.Reason == "" || len(in.Reason) > 2000:
		return nil, Errorf(CodeInvalidRequest, "a correction needs a reason of 1 to 2000 characters")
	}
	err := s.store.InTx(ctx, func(tx Tx) error {
		t, err := tx.LockTask(ctx, operator.Tenant, taskID)
		if err != nil {
			return err
		}
		if !t.State.Terminal() {
			return Errorf(CodeInvalidTransition, "task is %s: only how an ended task ended is corrected", t.State)
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: operator.Subject, Tenant: t.Tenant, Operation: "correct_outcome"}, t: t, now: s.cfg.Now()}
		o := OutcomeRecord{State: in.State, Verification: in.Verification, Reason: in.Reason, RecordedBy: operator.Subject, RecordedAt: c.now}
		if err := tx.CorrectTaskOutcome(ctx, t, o); err != nil {
			return err
		}
		from := t.State
		t.State, t.Verification, t.UpdatedAt = in.State, in.Verification, c.now
		data := map[string]any{"from": string(from), "to": string(t.State), "cause": "outcome_corrected", "reason": in.Reason}
		if in.Verification != "" {
			data["verification"] = in.Verification
		}
		if err := c.emit(ctx, t, "task.state_changed", "outcome_corrected", data); err != nil {
			return err
		}
		return tx.UpdateTask(ctx, t)
	})
	if err != nil {
		return nil, fmt.Errorf("correcting the outcome of task %s: %w", taskID, err)
	}
	return s.store.GetTask(ctx, operator.Tenant, taskID)
}

// CorrectApprovalDecision records a correction of a decided approval's record: a new decision
// record with the same decision (what it caused stands: an approved action ran, a denied one
// never will) and the corrected reason, by the operator, superseding the current one.
func (s *Service) CorrectApprovalDecision(ctx context.Context, operator Actor, approvalID, reason string) (*Approval, error) {
	if reason == "" || len(reason) > 2000 {
		return nil, Errorf(CodeInvalidRequest, "a correction needs a reason of 1 to 2000 characters")
	}
	err := s.store.InTx(ctx, func(tx Tx) error {
		peek, err := tx.GetApproval(ctx, operator.Tenant, approvalID)
		if err != nil {
			return err
		}
		t, err := tx.LockTask(ctx, operator.Tenant, peek.TaskID)
		if err != nil {
			return err
		}
		a, err := tx.LockApproval(ctx, operator.Tenant, approvalID)
		if err != nil {
			return err
		}
		if a.Decision == nil {
			return Errorf(CodeApprovalNotPending, "approval %s is %s and has no decision to correct", a.ID, a.State)
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: operator.Subject, Tenant: t.Tenant, Operation: "correct_decision"}, t: t, now: s.cfg.Now()}
		// bap correct is the one caller: the operator's admin CLI on the database.
		d := Decision{Decision: a.Decision.Decision, DecidedBy: operator.Subject, Workload: WorkloadAdminCLI, Via: ViaSocket, Reason: reason,
			DecidedAt: c.now, Supersedes: a.Decision.ID}
		if err := tx.CorrectApprovalDecision(ctx, a, d); err != nil {
			return err
		}
		if err := c.emit(ctx, t, "approval.resolved", "decision_corrected", map[string]any{
			"approval_id": a.ID, "state": string(a.State), "decision": d.Decision, "resolved_by": operator.Subject,
			"resolved_via": ViaSocket, "resolved_workload": d.Workload, "supersedes": d.Supersedes,
		}); err != nil {
			return err
		}
		return tx.UpdateTask(ctx, t)
	})
	if err != nil {
		return nil, fmt.Errorf("correcting the decision of approval %s: %w", approvalID, err)
	}
	return s.store.GetApproval(ctx, operator.Tenant, approvalID)
}
