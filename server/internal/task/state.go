package task

import (
	"errors"
	"fmt"
)

// State is the lifecycle state of a task, as carried by the wire field
// "state" of a Task (schema TaskState).
type State string

// The ten task states of CONTRACT "Task lifecycle".
const (
	// Created is the state of a task that create_task has just recorded.
	Created State = "created"
	// Admitted is the state of a task whose policy is valid and that fits
	// within the tenant's quotas.
	Admitted State = "admitted"
	// Running is the state of a task that has a browser session, has run a
	// command, or whose plan a worker has picked up.
	Running State = "running"
	// WaitingForApproval is the state of a task held by a pending approval.
	WaitingForApproval State = "waiting_for_approval"
	// WaitingForExternalInput is the state of a task with an open
	// reconciliation that an operator must settle.
	WaitingForExternalInput State = "waiting_for_external_input"
	// Checkpointed is the state of a task whose browser sessions were lost
	// and that can be resumed from a checkpoint.
	Checkpointed State = "checkpointed"
	// Succeeded is the terminal state of a task closed with its
	// postcondition holding (or without a postcondition).
	Succeeded State = "succeeded"
	// Failed is the terminal state of a task closed with an unmet
	// postcondition, or whose plan step failed beyond its attempts.
	Failed State = "failed"
	// Cancelled is the terminal state of a task stopped by cancel_task.
	Cancelled State = "cancelled"
	// Expired is the terminal state of a task whose deadline passed.
	Expired State = "expired"
)

// ErrUnknownState is wrapped by the error [ParseState] returns for a string
// that names no state.
var ErrUnknownState = errors.New("unknown task state")

// AllStates returns every task state, in lifecycle order: the six
// non-terminal states first, then the four terminal ones. The caller owns the
// returned slice.
func AllStates() []State {
	return []State{
		Created, Admitted, Running, WaitingForApproval, WaitingForExternalInput,
		Checkpointed, Succeeded, Failed, Cancelled, Expired,
	}
}

// Terminal reports whether s is final: succeeded, failed, cancelled or
// expired. No trigger moves a task out of a terminal state. An unknown state
// is not terminal.
func (s State) Terminal() bool {
	switch s {
	case Succeeded, Failed, Cancelled, Expired:
		return true
	case Created, Admitted, Running, WaitingForApproval, WaitingForExternalInput, Checkpointed:
		return false
	default:
		return false
	}
}

// Valid reports whether s is one of the ten states of [AllStates].
func (s State) Valid() bool {
	switch s {
	case Created, Admitted, Running, WaitingForApproval, WaitingForExternalInput,
		Checkpointed, Succeeded, Failed, Cancelled, Expired:
		return true
	default:
		return false
	}
}

// String returns the wire name of s.
func (s State) String() string { return string(s) }

// ParseState returns the state whose wire name is exactly s (case-sensitive),
// or an error wrapping [ErrUnknownState].
func ParseState(s string) (State, error) {
	if st := State(s); st.Valid() {
		return st, nil
	}
	return "", fmt.Errorf("%w: %q", ErrUnknownState, s)
}
