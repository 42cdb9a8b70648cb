package task_test

import (
	"errors"
	"testing"

	"github.com/originweave/bap/server/internal/task"
)

// no marks a refused transition in the table below.
const no task.State = ""

// lifecycle is the CONTRACT "Task lifecycle" table written out by hand for
// every (state, trigger) pair: 10 states × 13 triggers. It is deliberately
// not derived from task.Next.
var lifecycle = map[task.State]map[task.Trigger]task.State{
	task.Created: {
		task.Admit:                 task.Admitted,
		task.Start:                 no,
		task.AwaitApproval:         no,
		task.ApprovalResolved:      no,
		task.AwaitExternalInput:    no,
		task.ExternalInputResolved: no,
		task.SessionsLost:          no,
		task.Resume:                no,
		task.CloseSucceeded:        task.Succeeded,
		task.CloseFailed:           task.Failed,
		task.Cancel:                task.Cancelled,
		task.Expire:                task.Expired,
		task.DeadLetter:            no,
	},
	task.Admitted: {
		task.Admit:                 no,
		task.Start:                 task.Running,
		task.AwaitApproval:         no,
		task.ApprovalResolved:      no,
		task.AwaitExternalInput:    no,
		task.ExternalInputResolved: no,
		task.SessionsLost:          no,
		task.Resume:                no,
		task.CloseSucceeded:        task.Succeeded,
		task.CloseFailed:           task.Failed,
		task.Cancel:                task.Cancelled,
		task.Expire:                task.Expired,
		task.DeadLetter:            no,
	},
	task.Running: {
		task.Admit:                 no,
		task.Start:                 no,
		task.AwaitApproval:         task.WaitingForApproval,
		task.ApprovalResolved:      no,
		task.AwaitExternalInput:    task.WaitingForExternalInput,
		task.ExternalInputResolved: no,
		task.SessionsLost:          task.Checkpointed,
		task.Resume:                no,
		task.CloseSucceeded:        task.Succeeded,
		task.CloseFailed:           task.Failed,
		task.Cancel:                task.Cancelled,
		task.Expire:                task.Expired,
		task.DeadLetter:            task.Failed,
	},
	task.WaitingForApproval: {
		task.Admit:                 no,
		task.Start:                 no,
		task.AwaitApproval:         no,
		task.ApprovalResolved:      task.Running,
		task.AwaitExternalInput:    no,
		task.ExternalInputResolved: no,
		task.SessionsLost:          no,
		task.Resume:                no,
		task.CloseSucceeded:        no,
		task.CloseFailed:           no,
		task.Cancel:                task.Cancelled,
		task.Expire:                task.Expired,
		task.DeadLetter:            no,
	},
	task.WaitingForExternalInput: {
		task.Admit:                 no,
		task.Start:                 no,
		task.AwaitApproval:         no,
		task.ApprovalResolved:      no,
		task.AwaitExternalInput:    no,
		task.ExternalInputResolved: task.Running,
		task.SessionsLost:          no,
		task.Resume:                no,
		task.CloseSucceeded:        no,
		task.CloseFailed:           no,
		task.Cancel:                task.Cancelled,
		task.Expire:                task.Expired,
		task.DeadLetter:            no,
	},
	task.Checkpointed: {
		task.Admit:                 no,
		task.Start:                 no,
		task.AwaitApproval:         no,
		task.ApprovalResolved:      no,
		task.AwaitExternalInput:    no,
		task.ExternalInputResolved: no,
		task.SessionsLost:          no,
		task.Resume:                task.Running,
		task.CloseSucceeded:        no,
		task.CloseFailed:           no,
		task.Cancel:                task.Cancelled,
		task.Expire:                task.Expired,
		task.DeadLetter:            no,
	},
	task.Succeeded: {
		task.Admit:                 no,
		task.Start:                 no,
		task.AwaitApproval:         no,
		task.ApprovalResolved:      no,
		task.AwaitExternalInput:    no,
		task.ExternalInputResolved: no,
		task.SessionsLost:          no,
		task.Resume:                no,
		task.CloseSucceeded:        no,
		task.CloseFailed:           no,
		task.Cancel:                no,
		task.Expire:                no,
		task.DeadLetter:            no,
	},
	task.Failed: {
		task.Admit:                 no,
		task.Start:                 no,
		task.AwaitApproval:         no,
		task.ApprovalResolved:      no,
		task.AwaitExternalInput:    no,
		task.ExternalInputResolved: no,
		task.SessionsLost:          no,
		task.Resume:                no,
		task.CloseSucceeded:        no,
		task.CloseFailed:           no,
		task.Cancel:                no,
		task.Expire:                no,
		task.DeadLetter:            no,
	},
	task.Cancelled: {
		task.Admit:                 no,
		task.Start:                 no,
		task.AwaitApproval:         no,
		task.ApprovalResolved:      no,
		task.AwaitExternalInput:    no,
		task.ExternalInputResolved: no,
		task.SessionsLost:          no,
		task.Resume:                no,
		task.CloseSucceeded:        no,
		task.CloseFailed:           no,
		task.Cancel:                no,
		task.Expire:                no,
		task.DeadLetter:            no,
	},
	task.Expired: {
		task.Admit:                 no,
		task.Start:                 no,
		task.AwaitApproval:         no,
		task.ApprovalResolved:      no,
		task.AwaitExternalInput:    no,
		task.ExternalInputResolved: no,
		task.SessionsLost:          no,
		task.Resume:                no,
		task.CloseSucceeded:        no,
		task.CloseFailed:           no,
		task.Cancel:                no,
		task.Expire:                no,
		task.DeadLetter:            no,
	},
}

// TestLifecycleTableIsComplete guards the table above: it must cover every
// state and every trigger, and nothing else.
func TestLifecycleTableIsComplete(t *testing.T) {
	t.Parallel()
	states, triggers := task.AllStates(), task.AllTriggers()
	if len(states) != 10 || len(triggers) != 13 {
		t.Fatalf("AllStates() has %d states and AllTriggers() %d triggers, want 10 and 13", len(states), len(triggers))
	}
	if len(lifecycle) != len(states) {
		t.Errorf("table has %d states, want %d", len(lifecycle), len(states))
	}
	for _, s := range states {
		row, ok := lifecycle[s]
		if !ok {
			t.Errorf("table misses state %s", s)
			continue
		}
		if len(row) != len(triggers) {
			t.Errorf("table row %s has %d triggers, want %d", s, len(row), len(triggers))
		}
		for _, tr := range triggers {
			if _, ok := row[tr]; !ok {
				t.Errorf("table row %s misses trigger %s", s, tr)
			}
		}
	}
}

func TestNextExhaustive(t *testing.T) {
	t.Parallel()
	for from, row := range lifecycle {
		for trigger, want := range row {
			t.Run(string(from)+"/"+string(trigger), func(t *testing.T) {
				t.Parallel()
				got, err := task.Next(from, trigger)
				if want == no {
					assertRefused(t, from, trigger, got, err)
					return
				}
				if err != nil {
					t.Fatalf("Next(%s, %s) error = %v, want %s", from, trigger, err, want)
				}
				if got != want {
					t.Fatalf("Next(%s, %s) = %s, want %s", from, trigger, got, want)
				}
			})
		}
	}
}

func assertRefused(t *testing.T, from task.State, trigger task.Trigger, got task.State, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("Next(%s, %s) = %s, want invalid transition", from, trigger, got)
	}
	if got != "" {
		t.Errorf("Next(%s, %s) returned state %q with its error, want empty", from, trigger, got)
	}
	if !errors.Is(err, task.ErrInvalidTransition) {
		t.Errorf("errors.Is(%v, ErrInvalidTransition) = false", err)
	}
	var te *task.TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("error %T is not a *TransitionError", err)
	}
	if te.From != from || te.Trigger != trigger {
		t.Errorf("TransitionError = {%s, %s}, want {%s, %s}", te.From, te.Trigger, from, trigger)
	}
	if te.Error() == "" {
		t.Error("TransitionError.Error() is empty")
	}
}

func TestNextUnknownInputs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		from    task.State
		trigger task.Trigger
	}{
		{"empty state", "", task.Cancel},
		{"unknown state", "paused", task.Cancel},
		{"wrong case state", "RUNNING", task.Cancel},
		{"empty trigger", task.Running, ""},
		{"unknown trigger", task.Running, "create"},
		{"wrong case trigger", task.Running, "CANCEL"},
		{"both unknown", "x", "y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := task.Next(tt.from, tt.trigger)
			assertRefused(t, tt.from, tt.trigger, got, err)
		})
	}
}

func TestTerminalStatesAreFinal(t *testing.T) {
	t.Parallel()
	wantTerminal := map[task.State]bool{
		task.Created:                 false,
		task.Admitted:                false,
		task.Running:                 false,
		task.WaitingForApproval:      false,
		task.WaitingForExternalInput: false,
		task.Checkpointed:            false,
		task.Succeeded:               true,
		task.Failed:                  true,
		task.Cancelled:               true,
		task.Expired:                 true,
	}
	for _, s := range task.AllStates() {
		want, ok := wantTerminal[s]
		if !ok {
			t.Errorf("AllStates() returned unexpected state %q", s)
			continue
		}
		if got := s.Terminal(); got != want {
			t.Errorf("%s.Terminal() = %v, want %v", s, got, want)
		}
		for _, tr := range task.AllTriggers() {
			_, err := task.Next(s, tr)
			if s.Terminal() && err == nil {
				t.Errorf("terminal state %s left by trigger %s", s, tr)
			}
		}
		// Every non-terminal state can be cancelled and expired.
		if !s.Terminal() {
			for _, tr := range []task.Trigger{task.Cancel, task.Expire} {
				if next, err := task.Next(s, tr); err != nil || !next.Terminal() {
					t.Errorf("Next(%s, %s) = %q, %v; want a terminal state", s, tr, next, err)
				}
			}
		}
	}
	if task.State("").Terminal() || task.State("done").Terminal() {
		t.Error("an unknown state reports Terminal() = true")
	}
}

// TestEveryStateReachable walks the lifecycle from created and checks that
// every state is reachable and every non-terminal state can reach a
// terminal one.
func TestEveryStateReachable(t *testing.T) {
	t.Parallel()
	seen := map[task.State]bool{task.Created: true}
	queue := []task.State{task.Created}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, tr := range task.AllTriggers() {
			if next, err := task.Next(s, tr); err == nil && !seen[next] {
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	for _, s := range task.AllStates() {
		if !seen[s] {
			t.Errorf("state %s is unreachable from created", s)
		}
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	for _, s := range task.AllStates() {
		got, err := task.ParseState(string(s))
		if err != nil || got != s {
			t.Errorf("ParseState(%q) = %q, %v", s, got, err)
		}
		if !s.Valid() || s.String() != string(s) {
			t.Errorf("%q: Valid() = %v, String() = %q", s, s.Valid(), s.String())
		}
	}
	for _, bad := range []string{"", "Running", "RUNNING", " running", "running ", "paused", "new", "closed"} {
		got, err := task.ParseState(bad)
		if !errors.Is(err, task.ErrUnknownState) || got != "" {
			t.Errorf("ParseState(%q) = %q, %v; want ErrUnknownState", bad, got, err)
		}
	}
}

func TestParseTrigger(t *testing.T) {
	t.Parallel()
	want := []string{
		"admit", "start", "await_approval", "approval_resolved", "await_external_input",
		"external_input_resolved", "sessions_lost", "resume", "close_succeeded", "close_failed",
		"cancel", "expire", "dead_letter",
	}
	got := task.AllTriggers()
	if len(got) != len(want) {
		t.Fatalf("AllTriggers() = %v, want %v", got, want)
	}
	for i, name := range want {
		if string(got[i]) != name {
			t.Errorf("AllTriggers()[%d] = %q, want %q", i, got[i], name)
		}
		tr, err := task.ParseTrigger(name)
		if err != nil || string(tr) != name || !tr.Valid() || tr.String() != name {
			t.Errorf("ParseTrigger(%q) = %q, %v", name, tr, err)
		}
	}
	for _, bad := range []string{"", "Admit", "create", "close", "approve"} {
		if tr, err := task.ParseTrigger(bad); !errors.Is(err, task.ErrUnknownTrigger) || tr != "" {
			t.Errorf("ParseTrigger(%q) = %q, %v; want ErrUnknownTrigger", bad, tr, err)
		}
	}
}

func TestAllStatesWireNames(t *testing.T) {
	t.Parallel()
	want := []string{
		"created", "admitted", "running", "waiting_for_approval", "waiting_for_external_input",
		"checkpointed", "succeeded", "failed", "cancelled", "expired",
	}
	got := task.AllStates()
	if len(got) != len(want) {
		t.Fatalf("AllStates() = %v, want %v", got, want)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("AllStates()[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	got[0] = "mutated"
	if task.AllStates()[0] != task.Created {
		t.Error("AllStates() shares its backing array between calls")
	}
}
