package task

import (
	"errors"
	"fmt"
)

// Outcome is the outcome class of a command's receipt (wire field
// "outcome" of a Receipt, schema ReceiptOutcome). A receipt is not task
// success: it says what became of one command.
type Outcome string

// The six receipt outcome classes of CONTRACT "Mutating requests".
const (
	// Applied means the command ran and its effect took place.
	Applied Outcome = "applied"
	// NoSideEffect means the command ran and changed nothing (a read, or an
	// operator's reconciliation found the effect did not happen).
	NoSideEffect Outcome = "no_side_effect"
	// PendingApproval means the command is held by an approval rule and has
	// not run.
	PendingApproval Outcome = "pending_approval"
	// Rejected means the task's policy refused the command (for example
	// origin_not_allowed); it never ran, and a replay returns the same
	// problem.
	Rejected Outcome = "rejected"
	// UnknownOutcome means a crash interrupted a safe command (a GET
	// navigation, observe, extract) and its result was lost; the client may
	// retry it under a new idempotency key.
	UnknownOutcome Outcome = "unknown_outcome"
	// ReconciliationRequired means a crash interrupted a side-effecting
	// command; a task_reconciliation record is opened and the command is
	// never re-run.
	ReconciliationRequired Outcome = "reconciliation_required"
)

// ErrUnknownOutcome is wrapped by the error [ParseOutcome] returns for a
// string that names no outcome class.
var ErrUnknownOutcome = errors.New("unknown receipt outcome")

// AllOutcomes returns every receipt outcome class. The caller owns the
// returned slice.
func AllOutcomes() []Outcome {
	return []Outcome{Applied, NoSideEffect, PendingApproval, Rejected, UnknownOutcome, ReconciliationRequired}
}

// Valid reports whether o is one of the classes of [AllOutcomes].
func (o Outcome) Valid() bool {
	switch o {
	case Applied, NoSideEffect, PendingApproval, Rejected, UnknownOutcome, ReconciliationRequired:
		return true
	default:
		return false
	}
}

// Interrupted reports whether o is one of the two classes given to a command
// that a crash interrupted between its record and its receipt.
func (o Outcome) Interrupted() bool {
	return o == UnknownOutcome || o == ReconciliationRequired
}

// String returns the wire name of o.
func (o Outcome) String() string { return string(o) }

// ParseOutcome returns the outcome class named exactly s (case-sensitive), or
// an error wrapping [ErrUnknownOutcome].
func ParseOutcome(s string) (Outcome, error) {
	if o := Outcome(s); o.Valid() {
		return o, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownOutcome, s)
}

// ClassifyInterrupted returns the outcome class of a command that was
// recorded but whose receipt was never written (a crash, or cancel_task
// stopping in-flight browser I/O): [UnknownOutcome] for a safe command, whose
// loss the client may repair by retrying under a new key, and
// [ReconciliationRequired] for a side-effecting one, which must never be
// re-run and needs an operator to settle it. When in doubt, callers must pass
// sideEffecting = true.
func ClassifyInterrupted(sideEffecting bool) Outcome {
	if sideEffecting {
		return ReconciliationRequired
	}
	return UnknownOutcome
}
