package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/page"
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

// sideEffectingOp tells the plan operations whose effect must never be repeated (act) from the
// safe ones a worker may run again after a takeover (a GET navigation, observe, extract,
// capture_evidence).
func sideEffectingOp(op string) bool { return op == "act" }

// Arguments of each step kind: the body of the operation it names (already validated against
// spec/schemas/PlanStep.json by create_task).
type navigateArgs struct {
	URL       string `json:"url"`
	ContextID string `json:"context_id"`
	WaitUntil string `json:"wait_until"`
	TimeoutMs int    `json:"timeout_ms"`
}

type actArgs struct {
	ContextID  string      `json:"context_id"`
	Action     string      `json:"action"`
	NodeID     string      `json:"node_id"`
	Query      *page.Query `json:"query"`
	Value      string      `json:"value"`
	SecretRef  string      `json:"secret_ref"` // a stored secret typed by reference (secrets.go): never a value
	Values     []string    `json:"values"`
	Key        string      `json:"key"`
	ArtifactID string      `json:"artifact_id"`
	TimeoutMs  int         `json:"timeout_ms"`
}

type observeArgs struct {
	ContextID string `json:"context_id"`
	Within    string `json:"within"`
	MaxNodes  int    `json:"max_nodes"`
	Mode      string `json:"mode"`
	Since     string `json:"since"`
	Cursor    string `json:"cursor"`
	MaxBytes  int    `json:"max_bytes"`
}

type extractArgs struct {
	ContextID string                `json:"context_id"`
	Kind      string                `json:"kind"`
	NodeID    string                `json:"node_id"`
	Query     *page.Query           `json:"query"`
	Schema    json.RawMessage       `json:"schema"`
	Fields    map[string]page.Query `json:"fields"`
}

type evidenceArgs struct {
	ContextID string   `json:"context_id"`
	Kinds     []string `json:"kinds"`
	FullPage  bool     `json:"full_page"`
	NodeID    string   `json:"node_id"`
}

// decodeArgs decodes a step's arguments; a step the runtime cannot read is an invalid_request,
// which no retry cures.
func decodeArgs(st PlanStep, v any) *Error {
	raw := st.Args
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return Errorf(CodeInvalidRequest, "the arguments of this %s step cannot be read: %v", st.Op, err)
	}
	return nil
}

// errorClass is how a worker treats a step's problem.
type errorClass int

const (
	// retryable problems consume an attempt; the step runs again after a backoff.
	retryable errorClass = iota
	// fatal problems cannot improve on retry: the plan fails at once, consuming no attempt.
	fatal
	// throttled problems (the node or tenant is saturated) are waited out without consuming one.
	throttled
	// sessionGone problems need a new browser session (restored from the last checkpoint).
	sessionGone
	// stateChanged problems (invalid_transition) mean the task changed under the worker.
	stateChanged
)

func classify(code Code) errorClass {
	switch code {
	case CodeInvalidRequest, CodeOriginNotAllowed, CodeInsufficientScope, CodeApproverNotPermitted, CodeBrowserUnavailable,
		CodeSecretOriginMismatch, CodeSecretNotFound,
		CodeNotImplemented, CodeCheckpointForeign, CodeCheckpointIncompatible, CodeCheckpointStale,
		CodeIdempotencyKeyReused, CodePayloadTooLarge, CodeUnsupportedMediaType, CodeUnauthenticated, CodeIdempotencyKeyRequired:
		return fatal
	case CodeRateLimited, CodeOverloaded, CodeIdempotencyInFlight:
		return throttled
	case CodeBrowserSessionLost:
		return sessionGone
	case CodeInvalidTransition:
		return stateChanged
	default: // action_timeout, not_found (a query matching nothing), stale_node_handle, navigation_failed, …
		return retryable
	}
}

// planResponder renders the worker's commands: it keeps the typed result for the worker and
// stores a small JSON reply under the worker's key ({"receipt": …} like an interrupted command's
// replay, plus the problem or the held approval), which is all a replay of that key needs.
type planResponder struct {
	result  any
	problem *Error
	receipt *Receipt
}

// storedReply is the JSON a worker's key keeps.
type storedReply struct {
	Receipt    *storedReceipt `json:"receipt,omitempty"`
	Code       Code           `json:"code,omitempty"`
	Detail     string         `json:"detail,omitempty"`
	ApprovalID string         `json:"approval_id,omitempty"`
	SessionID  string         `json:"session_id,omitempty"`
}

type storedReceipt struct {
	ReceiptID   string       `json:"receipt_id"`
	CommandID   string       `json:"command_id"`
	Outcome     task.Outcome `json:"outcome"`
	ProblemCode Code         `json:"problem_code,omitempty"`
}

func toStored(rc *Receipt) *storedReceipt {
	if rc == nil {
		return nil
	}
	return &storedReceipt{ReceiptID: rc.ID, CommandID: rc.CommandID, Outcome: rc.Outcome, ProblemCode: rc.ProblemCode}
}

// resultReceipt finds the receipt of a use-case's result.
func resultReceipt(result any) *Receipt {
	switch r := result.(type) {
	case *NavigateResult:
		return r.Receipt
	case *ActResult:
		return r.Receipt
	case *HeldResult:
		return r.Receipt
	case *EvidenceResult:
		return r.Receipt
	case *SessionResult:
		return r.Receipt
	case *ResumeResult:
		return r.Receipt
	case *CheckpointResult:
		return r.Receipt
	case *CloseResult:
		return r.Receipt
	case *TaskResult:
		return r.Receipt
	}
	return nil
}

func (p *planResponder) Success(result any) (Response, error) {
	p.result = result
	p.receipt = resultReceipt(result)
	reply := storedReply{Receipt: toStored(p.receipt)}
	status := 200
	switch r := result.(type) {
	case *HeldResult:
		status, reply.ApprovalID = 202, r.Approval.ID
	case *SessionResult:
		reply.SessionID = r.Session.ID
	case *ResumeResult:
		reply.SessionID = r.Session.ID
	}
	body, err := json.Marshal(reply)
	return Response{Status: status, Body: body}, err
}

func (p *planResponder) Failure(e *Error, rc *Receipt) (Response, error) {
	p.problem, p.receipt = e, rc
	body, err := json.Marshal(storedReply{Receipt: toStored(rc), Code: e.Code, Detail: e.Detail})
	return Response{Status: problemStatus(e.Code), Body: body}, err
}

// problemStatus is the HTTP status the API gives a code, kept with the worker's stored replies so
// that they read like the API's: the one table (package problem).
func problemStatus(code Code) int { return code.Status() }

// parseStored reads a stored reply (the worker's own, or an interrupted command's {"receipt": …}).
func parseStored(body []byte) (*storedReply, error) {
	var r storedReply
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("reading a stored reply: %w", err)
	}
	return &r, nil
}

// planKey is the Idempotency-Key of a worker's command: the task, the lease epoch (a worker
// taking over never replays its predecessor's keys by accident), and what the command is for.
func planKey(taskID string, epoch int64, what string) string {
	return fmt.Sprintf("plan:%s:%d:%s", taskID, epoch, what)
}

// stepKey is the key of attempt `attempt` of step i; try counts the throttled retries of that
// attempt (each a command of its own, since a refusal is recorded under its key).
func stepKey(taskID string, epoch int64, i, attempt, try int) string {
	if try == 0 {
		return planKey(taskID, epoch, fmt.Sprintf("step:%d:%d", i, attempt))
	}
	return planKey(taskID, epoch, fmt.Sprintf("step:%d:%d:%d", i, attempt, try))
}

// checkLease fails with errLeaseLost unless the worker still holds the task's lease at the fence's
// epoch; it locks the lease row (after the task row, as the worker's own transactions do).
func checkLease(ctx context.Context, tx Tx, taskID string, f *LeaseFence) error {
	if err := tx.LockLease(ctx, taskID, f.NodeID, f.Epoch); err != nil {
		if errors.Is(err, ErrNotFound) {
			return errLeaseLost
		}
		return err
	}
	return nil
}

// errLeaseLost reports that this worker no longer holds the task's lease.
var errLeaseLost = fmt.Errorf("the task's lease was lost")

// errTaskEnded reports that the task ended (closed, cancelled, expired) under the worker.
var errTaskEnded = fmt.Errorf("the task ended")
