package task

// Waits is what a task waits for outside itself: a person who holds it (an open handoff, ADR
// 0023) and the reconciliations an operator must still settle (interrupted side effects). Either
// one keeps a running task in [WaitingForExternalInput]; only when neither is left does it run
// again.
type Waits struct {
	// HandedOff is whether a handoff of the task is open.
	HandedOff bool
	// Reconciliations is the number of the task's open reconciliations.
	Reconciliations int
}

// Any reports whether the task waits for anything outside itself.
func (w Waits) Any() bool { return w.HandedOff || w.Reconciliations > 0 }

// AfterWaits returns the state of a task in from once what it waits for outside itself changed —
// a handoff opened or returned, a reconciliation opened or settled — and, when that is a
// transition the caller must record, its trigger:
//
//	running,                    waits     --await_external_input-->     waiting_for_external_input
//	waiting_for_external_input, no wait   --external_input_resolved-->  running
//	waiting_for_external_input, waits     (still waiting: no transition)
//	running,                    no wait   (no transition)
//	any other state                       (no transition)
//
// So a person's act interrupted during a handoff opens a reconciliation beside it and the task
// stays handed off; settling that reconciliation while the handoff is open keeps the task with
// the person; and a hand-back that leaves a reconciliation open keeps the task waiting until an
// operator settles it. In any other state the wait is recorded (the reconciliation, the handoff
// row) without moving the task: a task waiting for approval leaves through approval_resolved and
// then, running, asks again (a reconciliation opened meanwhile moves it on to
// waiting_for_external_input), a checkpointed one leaves through resume, and a final state stays
// final.
// transition is false whenever trigger is "".
func AfterWaits(from State, w Waits) (to State, trigger Trigger, transition bool) {
	switch {
	case from == Running && w.Any():
		return WaitingForExternalInput, AwaitExternalInput, true
	case from == WaitingForExternalInput && !w.Any():
		return Running, ExternalInputResolved, true
	default:
		return from, "", false
	}
}
