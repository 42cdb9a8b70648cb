package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/task"
)

// Delegated mode (ADR 0011): a task created with a plan is queued (task_lease) and run by the
// workers of any node (worker.go, planrun.go). This file holds the vocabulary: the ports the
// workers need from the store, each step's progress, the arguments of each step kind, and how a
// worker tells errors that may improve on retry from those that cannot.

// Step progress states (plan_step_progress.state).
const (
	StepPending  = "pending"
	StepInFlight = "in_flight" // started; its command (command_key) may have run
	StepHeld     = "held"      // its act waits for an approval (approval_id)
	StepDone     = "done"
	StepFailed   = "failed" // dead-lettered
)

// LeaseClaim is a delegated task a worker of this node claimed.
type LeaseClaim struct {
	Tenant, TaskID string
	// Epoch fences the claim: every write of the worker checks it, so a worker whose lease expired
	// and was claimed again writes nothing more.
	Epoch int64
	// SessionID is the browser session the plan last ran in ("" when none).
	SessionID string
	// TookOver is true when the previous owner let its lease expire (its node died or stalled).
	TookOver bool
}

// StepProgress is the progress of one plan step.
type StepProgress struct {
	Index           int
	State           string
	Attempts        int // attempts the step consumed
	CommandKey      string
	ApprovalID      string
	ReceiptID       string
	CheckpointID    string // taken after the step
	LastProblemCode Code
	LastError       string
	StartedAt       *time.Time
	FinishedAt      *time.Time
}

// KeyState is what an Idempotency-Key recorded, with the reconciliation of its command if one was
// opened ("" none, "open", or the resolution "applied" / "no_side_effect").
type KeyState struct {
	Completed      bool
	Status         int
	Body           []byte
	CommandID      string
	Reconciliation string
}

// ApprovalOutcome is an approval's state and what became of the command that resolved it (empty
// while that command runs).
type ApprovalOutcome struct {
	State          task.ApprovalState
	ReceiptID      string
	Outcome        task.Outcome
	ProblemCode    Code
	Reconciliation string
}

// DeadLetter is a plan that failed beyond its attempts (or at once, with an error retrying cannot
// cure), with the evidence of why.
type DeadLetter struct {
	Tenant, TaskID string
	StepIndex      int
	CommandID      string
	Reason         string
	ProblemCode    Code
	Attempts       int
	ArtifactID     string // a screenshot of the page when the step failed ("" when none could be taken)
	Evidence       map[string]any
}

// PlanStore is what the workers need of the store beyond Store.
type PlanStore interface {
	// ClaimPlanTask leases the oldest runnable delegated task (admitted, running or checkpointed,
	// plan not finished, lease free or expired, not held back) to nodeID for ttl, skipping rows
	// other transactions hold (FOR UPDATE SKIP LOCKED). ErrNotFound when none is runnable.
	ClaimPlanTask(ctx context.Context, nodeID string, ttl time.Duration) (*LeaseClaim, error)
	// RenewLease extends a lease nodeID holds at epoch; false when it no longer holds it.
	RenewLease(ctx context.Context, taskID, nodeID string, epoch int64, ttl time.Duration) (bool, error)
	// ReleaseLease gives a lease back to the queue, runnable again after delay.
	ReleaseLease(ctx context.Context, taskID, nodeID string, epoch int64, delay time.Duration) error
	// PlanProgress reads the progress rows of a task's steps (steps never started have none).
	PlanProgress(ctx context.Context, tenant, taskID string) ([]StepProgress, error)
	// KeyState reads what an Idempotency-Key of tenant recorded; ErrNotFound when nothing.
	KeyState(ctx context.Context, tenant, key string) (*KeyState, error)
	// ApprovalOutcome reads an approval and the receipt of the command that resolved it.
	ApprovalOutcome(ctx context.Context, tenant, approvalID string) (*ApprovalOutcome, error)
	// LatestCheckpoint names a task's most recent checkpoint; ErrNotFound when it has none.
	LatestCheckpoint(ctx context.Context, tenant, taskID string) (string, error)
}

// PlanTx is what the workers need of a transaction beyond Tx.
type PlanTx interface {
	// LockLease locks the lease nodeID holds at epoch; ErrNotFound when it does not hold it.
	LockLease(ctx context.Context, taskID, nodeID string, epoch int64) error
	// SaveStepProgress writes a step's progress.
	SaveStepProgress(ctx context.Context, tenant, taskID string, p *StepProgress) error
	// SetLeaseSession records the session the plan runs in.
	SetLeaseSession(ctx context.Context, taskID, sessionID string) error
	// FinishLease takes a task out of the queue for good.
	FinishLease(ctx context.Context, taskID string) error
	// InsertDeadLetter records a dead letter.
	InsertDeadLetter(ctx context.Context, d *DeadLetter) error
}

// PlanResponder renders a worker's commands: it keeps what the worker needs of the result, typed,
// and stores a small JSON reply under the worker's key ({"receipt": …} like an interrupted
// command's replay, plus the problem or the held approval), which is all a replay of that key
// needs.
type PlanResponder struct {
	// Problem is the refusal, when the command was refused.
	Problem *Error
	// Receipt is the command's receipt, when it has one.
	Receipt *Receipt
	// ApprovalID is the approval the command's act is held for (202), or request_approval's.
	ApprovalID string
	// SessionID is the session a create_browser_session or resume_task opened.
	SessionID string
	// CheckpointID is the checkpoint a checkpoint_browser_session took.
	CheckpointID string
	// ArtifactID is the first artifact a capture_evidence stored.
	ArtifactID string
	// Answered tells that the command answered (Success or Failure was called).
	Answered bool
}

// StoredReply is the JSON a worker's key keeps.
type StoredReply struct {
	Receipt    *StoredReceipt `json:"receipt,omitempty"`
	Code       Code           `json:"code,omitempty"`
	Detail     string         `json:"detail,omitempty"`
	ApprovalID string         `json:"approval_id,omitempty"`
	SessionID  string         `json:"session_id,omitempty"`
}

// StoredReceipt is a receipt as a stored reply keeps it.
type StoredReceipt struct {
	ReceiptID   string       `json:"receipt_id"`
	CommandID   string       `json:"command_id"`
	Outcome     task.Outcome `json:"outcome"`
	ProblemCode Code         `json:"problem_code,omitempty"`
}

// ParseStoredReply reads a stored reply (a worker's own, or an interrupted command's
// {"receipt": …}).
func ParseStoredReply(body []byte) (*StoredReply, error) {
	var r StoredReply
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("reading a stored reply: %w", err)
	}
	return &r, nil
}

func toStored(rc *Receipt) *StoredReceipt {
	if rc == nil {
		return nil
	}
	return &StoredReceipt{ReceiptID: rc.ID, CommandID: rc.CommandID, Outcome: rc.Outcome, ProblemCode: rc.ProblemCode}
}

// Result is a command result a worker reads (ForPlan): it names its receipt and the references
// the plan run follows, so the worker's responder needs no type switch.
type Result interface {
	planRefs() planRefs
}

// planRefs is what PlanResponder keeps of a result.
type planRefs struct {
	receipt *Receipt
	// approvalID is the approval the result holds (held: a 202, stored in the reply) or asked for.
	approvalID string
	held       bool
	// sessionID (stored in the reply), checkpointID and artifactID are what the command made.
	sessionID, checkpointID, artifactID string
}

func (r *NavigateResult) planRefs() planRefs { return planRefs{receipt: r.Receipt} }

func (r *ActOutcome) planRefs() planRefs {
	if r.Held != nil {
		return r.Held.planRefs()
	}
	return planRefs{receipt: r.Done.Receipt}
}

func (r *HeldResult) planRefs() planRefs {
	return planRefs{receipt: r.Receipt, approvalID: r.Approval.ID, held: true}
}

func (r *EvidenceResult) planRefs() planRefs {
	refs := planRefs{receipt: r.Receipt}
	if len(r.Artifacts) > 0 {
		refs.artifactID = r.Artifacts[0].ID
	}
	return refs
}

func (r *SessionResult) planRefs() planRefs {
	return planRefs{receipt: r.Receipt, sessionID: r.Session.ID}
}

func (r *ResumeResult) planRefs() planRefs {
	return planRefs{receipt: r.Receipt, sessionID: r.Session.ID}
}

func (r *CheckpointResult) planRefs() planRefs {
	return planRefs{receipt: r.Receipt, checkpointID: r.Checkpoint.ID}
}

func (r *CloseResult) planRefs() planRefs { return planRefs{receipt: r.Receipt} }

func (r *TaskResult) planRefs() planRefs { return planRefs{receipt: r.Receipt} }

// planRefs of request_approval's result: the approval. (Its receipt stays out of the stored
// reply, as it always has: the worker reads only the approval.)
func (r *ApprovalResult) planRefs() planRefs {
	var refs planRefs
	if r.Approval != nil {
		refs.approvalID = r.Approval.ID
	}
	return refs
}

// ForPlan is p as the responder of a command whose result is R.
func ForPlan[R Result](p *PlanResponder) Responder[R] { return planAs[R]{p} }

type planAs[R Result] struct{ p *PlanResponder }

func (a planAs[R]) Success(result R) (Response, error) { return a.p.success(result.planRefs()) }

func (a planAs[R]) Failure(e *Error, rc *Receipt) (Response, error) { return a.p.Failure(e, rc) }

// success keeps what the worker needs of a result and renders the stored reply.
func (p *PlanResponder) success(refs planRefs) (Response, error) {
	p.Answered = true
	p.Receipt = refs.receipt
	p.ApprovalID, p.SessionID, p.CheckpointID, p.ArtifactID = refs.approvalID, refs.sessionID, refs.checkpointID, refs.artifactID
	reply := StoredReply{Receipt: toStored(p.Receipt), SessionID: refs.sessionID}
	status := 200
	if refs.held {
		status, reply.ApprovalID = 202, refs.approvalID
	}
	body, err := json.Marshal(reply)
	return Response{Status: status, Body: body}, err
}

// Failure keeps the refusal and renders the stored reply.
func (p *PlanResponder) Failure(e *Error, rc *Receipt) (Response, error) {
	p.Answered = true
	p.Problem, p.Receipt = e, rc
	body, err := json.Marshal(StoredReply{Receipt: toStored(rc), Code: e.Code, Detail: e.Detail})
	return Response{Status: e.Code.Status(), Body: body}, err
}

// checkLease fails with ErrLeaseLost unless the worker still holds the task's lease at the fence's
// epoch; it locks the lease row (after the task row, as the worker's own transactions do).
func checkLease(ctx context.Context, tx Tx, taskID string, f *LeaseFence) error {
	if err := tx.LockLease(ctx, taskID, f.NodeID, f.Epoch); err != nil {
		if errors.Is(err, ErrNotFound) {
			return ErrLeaseLost
		}
		return err
	}
	return nil
}
