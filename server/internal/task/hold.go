package task

// Hold returns the state of a task in from once an approval holds one of its acts (an act an
// approval rule holds, or request_approval), and whether that is a transition (trigger
// [AwaitApproval]) the caller must record:
//
//	running                                   --await_approval-->  waiting_for_approval
//	waiting_for_approval                      (joins the pending set, no transition)
//	waiting_for_external_input, handed off    (the person's act is held, no transition)
//
// A task a person took over (ADR 0023) already waits for a person, and the CONTRACT table has no
// waiting_for_external_input → waiting_for_approval: the person's held act leaves the task where
// it is, the approval is pending beside the handoff, and approving it runs the act on the
// person's page. Any other state (a reconciliation's wait, not handed off, included) refuses the
// hold with a *[TransitionError].
func Hold(from State, handedOff bool) (to State, transition bool, err error) {
	switch {
	case from == WaitingForApproval:
		return from, false, nil
	case from == WaitingForExternalInput && handedOff:
		return from, false, nil
	}
	next, err := Next(from, AwaitApproval)
	if err != nil {
		return "", false, err
	}
	return next, true, nil
}
