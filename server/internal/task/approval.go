package task

import (
	"errors"
	"fmt"
)

// ApprovalState is the state of an approval request (schema ApprovalState).
type ApprovalState string

// The five approval states of CONTRACT "Policy and approvals".
const (
	// ApprovalPending is the state of an approval that awaits a decision.
	ApprovalPending ApprovalState = "pending"
	// ApprovalApproved is the final state of an approval resolved with
	// "approve"; its held action runs exactly once.
	ApprovalApproved ApprovalState = "approved"
	// ApprovalDenied is the final state of an approval resolved with "deny";
	// its held action never runs.
	ApprovalDenied ApprovalState = "denied"
	// ApprovalCancelled is the final state of an approval closed because its
	// task was cancelled; its held action never runs.
	ApprovalCancelled ApprovalState = "cancelled"
	// ApprovalExpired is the final state of an approval whose deadline (or
	// whose task's deadline) passed before a decision; its held action never
	// runs.
	ApprovalExpired ApprovalState = "expired"
)

// Decision is an approver's answer to a pending approval (wire field
// "decision" of resolve_approval).
type Decision string

const (
	// Approve lets the held action run, exactly once.
	Approve Decision = "approve"
	// Deny refuses the held action; it never runs.
	Deny Decision = "deny"
)

// ErrApprovalNotPending is returned when an approval that is no longer
// pending is resolved, cancelled or expired; the BAP transport maps it to
// 409 approval_not_pending.
var ErrApprovalNotPending = errors.New("approval not pending")

// ErrUnknownApprovalState is wrapped by the error [ParseApprovalState]
// returns for a string that names no approval state.
var ErrUnknownApprovalState = errors.New("unknown approval state")

// ErrUnknownDecision is wrapped by the errors [ParseDecision] and
// [ApprovalState.Resolve] return for a decision other than approve or deny.
var ErrUnknownDecision = errors.New("unknown approval decision")

// AllApprovalStates returns every approval state, pending first. The caller
// owns the returned slice.
func AllApprovalStates() []ApprovalState {
	return []ApprovalState{ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalCancelled, ApprovalExpired}
}

// Valid reports whether s is one of the states of [AllApprovalStates].
func (s ApprovalState) Valid() bool {
	switch s {
	case ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalCancelled, ApprovalExpired:
		return true
	default:
		return false
	}
}

// Terminal reports whether s is final, that is a valid state other than
// pending.
func (s ApprovalState) Terminal() bool { return s.Valid() && s != ApprovalPending }

// String returns the wire name of s.
func (s ApprovalState) String() string { return string(s) }

// ParseApprovalState returns the approval state named exactly s
// (case-sensitive), or an error wrapping [ErrUnknownApprovalState].
func ParseApprovalState(s string) (ApprovalState, error) {
	if st := ApprovalState(s); st.Valid() {
		return st, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownApprovalState, s)
}

// ParseDecision returns the decision named exactly s (case-sensitive), or an
// error wrapping [ErrUnknownDecision].
func ParseDecision(s string) (Decision, error) {
	switch d := Decision(s); d {
	case Approve, Deny:
		return d, nil
	default:
		return "", fmt.Errorf("%w: %q", ErrUnknownDecision, s)
	}
}

// Resolve returns the state an approval in s moves to under decision d:
// approved for [Approve], denied for [Deny]. It returns [ErrApprovalNotPending]
// when s is not pending (checked first, so a replayed or late resolution is
// always reported as such), and an error wrapping [ErrUnknownDecision] for
// any other decision.
func (s ApprovalState) Resolve(d Decision) (ApprovalState, error) {
	if s != ApprovalPending {
		return "", ErrApprovalNotPending
	}
	switch d {
	case Approve:
		return ApprovalApproved, nil
	case Deny:
		return ApprovalDenied, nil
	default:
		return "", fmt.Errorf("%w: %q", ErrUnknownDecision, string(d))
	}
}

// Cancel returns [ApprovalCancelled] for a pending approval (its task was
// cancelled), else [ErrApprovalNotPending].
func (s ApprovalState) Cancel() (ApprovalState, error) {
	if s != ApprovalPending {
		return "", ErrApprovalNotPending
	}
	return ApprovalCancelled, nil
}

// Expire returns [ApprovalExpired] for a pending approval whose deadline
// passed, else [ErrApprovalNotPending].
func (s ApprovalState) Expire() (ApprovalState, error) {
	if s != ApprovalPending {
		return "", ErrApprovalNotPending
	}
	return ApprovalExpired, nil
}
