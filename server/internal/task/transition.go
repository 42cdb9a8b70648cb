package task

import (
	"errors"
	"fmt"
)

// ErrInvalidTransition is the sentinel every refused transition wraps; the
// BAP transport maps it to 409 invalid_transition.
var ErrInvalidTransition = errors.New("invalid transition")

// TransitionError reports that Trigger cannot move a task out of From. It
// wraps [ErrInvalidTransition], so errors.Is(err, ErrInvalidTransition) holds.
type TransitionError struct {
	// From is the state the task was in (possibly not a valid state).
	From State
	// Trigger is the refused trigger (possibly not a valid trigger).
	Trigger Trigger
}

// Error describes the refused transition.
func (e *TransitionError) Error() string {
	switch {
	case !e.From.Valid():
		return fmt.Sprintf("invalid transition: unknown task state %q", string(e.From))
	case !e.Trigger.Valid():
		return fmt.Sprintf("invalid transition: unknown trigger %q", string(e.Trigger))
	case e.From.Terminal():
		return fmt.Sprintf("invalid transition: task is %s, a final state (trigger %s)", e.From, e.Trigger)
	default:
		return fmt.Sprintf("invalid transition: trigger %s does not apply to a %s task", e.Trigger, e.From)
	}
}

// Unwrap returns [ErrInvalidTransition].
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// Next returns the state a task in from moves to when t happens, exactly as
// the CONTRACT "Task lifecycle" table says:
//
//	created              --admit-->                    admitted
//	admitted             --start-->                    running
//	running              --await_approval-->           waiting_for_approval
//	waiting_for_approval --approval_resolved-->        running
//	running              --await_external_input-->     waiting_for_external_input
//	waiting_for_external_input --external_input_resolved--> running
//	running              --sessions_lost-->            checkpointed
//	checkpointed         --resume-->                   running
//	created|admitted|running --close_succeeded-->      succeeded
//	created|admitted|running --close_failed-->         failed
//	any non-terminal     --cancel-->                   cancelled
//	any non-terminal     --expire-->                   expired
//	running              --dead_letter-->              failed
//
// Every other pair, every pair whose from is terminal, and every unknown state
// or trigger yields a *[TransitionError]. There are no self-loops: an event
// that leaves the state unchanged (a second approval requested while one is
// already pending) is not a transition, and the caller must not call Next for
// it. Guards that need data (admission quotas, "has a checkpoint", checkpoint
// compatibility) are the caller's to check before firing the trigger.
func Next(from State, t Trigger) (State, error) {
	if !from.Valid() || from.Terminal() {
		return "", &TransitionError{From: from, Trigger: t}
	}
	// from is one of the six non-terminal states below.
	switch t {
	case Cancel:
		return Cancelled, nil
	case Expire:
		return Expired, nil
	case CloseSucceeded, CloseFailed:
		if from == Created || from == Admitted || from == Running {
			if t == CloseSucceeded {
				return Succeeded, nil
			}
			return Failed, nil
		}
	case Admit:
		if from == Created {
			return Admitted, nil
		}
	case Start:
		if from == Admitted {
			return Running, nil
		}
	case AwaitApproval:
		if from == Running {
			return WaitingForApproval, nil
		}
	case ApprovalResolved:
		if from == WaitingForApproval {
			return Running, nil
		}
	case AwaitExternalInput:
		if from == Running {
			return WaitingForExternalInput, nil
		}
	case ExternalInputResolved:
		if from == WaitingForExternalInput {
			return Running, nil
		}
	case SessionsLost:
		if from == Running {
			return Checkpointed, nil
		}
	case Resume:
		if from == Checkpointed {
			return Running, nil
		}
	case DeadLetter:
		if from == Running {
			return Failed, nil
		}
	}
	return "", &TransitionError{From: from, Trigger: t}
}
