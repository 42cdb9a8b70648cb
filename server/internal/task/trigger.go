package task

import (
	"errors"
	"fmt"
)

// Trigger names the cause of a lifecycle transition. Triggers are internal
// vocabulary, fit for logs and for the reason of a history event; clients
// never send them.
type Trigger string

// The thirteen triggers of the lifecycle, one per row cause of CONTRACT
// "Task lifecycle". Creation itself (create_task recording a new task in
// [Created]) is not a transition and has no trigger.
const (
	// Admit moves created → admitted: the policy is valid and the task fits
	// within quotas (at once, or when capacity frees).
	Admit Trigger = "admit"
	// Start moves admitted → running: the first browser session or command,
	// or a worker picking up the task's plan.
	Start Trigger = "start"
	// AwaitApproval moves running → waiting_for_approval: an act held by an
	// approval rule, or request_approval.
	AwaitApproval Trigger = "await_approval"
	// ApprovalResolved moves waiting_for_approval → running: the approval
	// that held the task left pending (resolve_approval with either decision,
	// or the approval expired).
	ApprovalResolved Trigger = "approval_resolved"
	// AwaitExternalInput moves running → waiting_for_external_input: a
	// reconciliation was opened and an operator must settle it.
	AwaitExternalInput Trigger = "await_external_input"
	// ExternalInputResolved moves waiting_for_external_input → running: the
	// reconciliation was resolved.
	ExternalInputResolved Trigger = "external_input_resolved"
	// SessionsLost moves running → checkpointed: the task's browser sessions
	// were lost (crash, node death) and it has a checkpoint.
	SessionsLost Trigger = "sessions_lost"
	// Resume moves checkpointed → running: resume_task with a compatible
	// checkpoint.
	Resume Trigger = "resume"
	// CloseSucceeded moves created, admitted or running → succeeded:
	// close_task found the postcondition holding (or there was none).
	CloseSucceeded Trigger = "close_succeeded"
	// CloseFailed moves created, admitted or running → failed: close_task
	// found the postcondition unmet.
	CloseFailed Trigger = "close_failed"
	// Cancel moves any non-terminal state → cancelled: cancel_task.
	Cancel Trigger = "cancel"
	// Expire moves any non-terminal state → expired: the task's deadline
	// passed.
	Expire Trigger = "expire"
	// DeadLetter moves running → failed: a plan step failed beyond its
	// attempts.
	DeadLetter Trigger = "dead_letter"
)

// ErrUnknownTrigger is wrapped by the error [ParseTrigger] returns for a
// string that names no trigger.
var ErrUnknownTrigger = errors.New("unknown task trigger")

// AllTriggers returns every trigger, in the order of the CONTRACT table. The
// caller owns the returned slice.
func AllTriggers() []Trigger {
	return []Trigger{
		Admit, Start, AwaitApproval, ApprovalResolved, AwaitExternalInput,
		ExternalInputResolved, SessionsLost, Resume, CloseSucceeded, CloseFailed,
		Cancel, Expire, DeadLetter,
	}
}

// Valid reports whether t is one of the triggers of [AllTriggers].
func (t Trigger) Valid() bool {
	switch t {
	case Admit, Start, AwaitApproval, ApprovalResolved, AwaitExternalInput,
		ExternalInputResolved, SessionsLost, Resume, CloseSucceeded, CloseFailed,
		Cancel, Expire, DeadLetter:
		return true
	default:
		return false
	}
}

// String returns the name of t.
func (t Trigger) String() string { return string(t) }

// ParseTrigger returns the trigger named exactly s (case-sensitive), or an
// error wrapping [ErrUnknownTrigger].
func ParseTrigger(s string) (Trigger, error) {
	if t := Trigger(s); t.Valid() {
		return t, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownTrigger, s)
}
