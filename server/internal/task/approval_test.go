package task_test

import (
	"errors"
	"testing"

	"github.com/originweave/bap/server/internal/task"
)

// op is one way an approval can leave pending.
type op string

const (
	opApprove op = "resolve(approve)"
	opDeny    op = "resolve(deny)"
	opCancel  op = "cancel"
	opExpire  op = "expire"
)

func apply(s task.ApprovalState, o op) (task.ApprovalState, error) {
	switch o {
	case opApprove:
		return s.Resolve(task.Approve)
	case opDeny:
		return s.Resolve(task.Deny)
	case opCancel:
		return s.Cancel()
	case opExpire:
		return s.Expire()
	}
	panic("unknown op " + string(o))
}

func TestApprovalTransitions(t *testing.T) {
	t.Parallel()
	const notPending task.ApprovalState = ""
	// Written out for every (state, operation) pair.
	table := map[task.ApprovalState]map[op]task.ApprovalState{
		task.ApprovalPending: {
			opApprove: task.ApprovalApproved,
			opDeny:    task.ApprovalDenied,
			opCancel:  task.ApprovalCancelled,
			opExpire:  task.ApprovalExpired,
		},
		task.ApprovalApproved:  {opApprove: notPending, opDeny: notPending, opCancel: notPending, opExpire: notPending},
		task.ApprovalDenied:    {opApprove: notPending, opDeny: notPending, opCancel: notPending, opExpire: notPending},
		task.ApprovalCancelled: {opApprove: notPending, opDeny: notPending, opCancel: notPending, opExpire: notPending},
		task.ApprovalExpired:   {opApprove: notPending, opDeny: notPending, opCancel: notPending, opExpire: notPending},
		// Unknown states are not pending either.
		"":        {opApprove: notPending, opDeny: notPending, opCancel: notPending, opExpire: notPending},
		"Pending": {opApprove: notPending, opDeny: notPending, opCancel: notPending, opExpire: notPending},
	}
	if len(task.AllApprovalStates()) != 5 {
		t.Fatalf("AllApprovalStates() = %v, want 5 states", task.AllApprovalStates())
	}
	for _, s := range task.AllApprovalStates() {
		if _, ok := table[s]; !ok {
			t.Errorf("table misses approval state %s", s)
		}
	}
	for from, row := range table {
		for o, want := range row {
			t.Run(string(from)+"/"+string(o), func(t *testing.T) {
				t.Parallel()
				got, err := apply(from, o)
				if want == notPending {
					if !errors.Is(err, task.ErrApprovalNotPending) || got != "" {
						t.Fatalf("%s on %q = %q, %v; want ErrApprovalNotPending", o, from, got, err)
					}
					return
				}
				if err != nil || got != want {
					t.Fatalf("%s on %q = %q, %v; want %s", o, from, got, err, want)
				}
				if !got.Terminal() {
					t.Errorf("%s.Terminal() = false", got)
				}
			})
		}
	}
}

func TestResolveUnknownDecision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		from    task.ApprovalState
		d       task.Decision
		wantErr error
	}{
		{"pending, empty decision", task.ApprovalPending, "", task.ErrUnknownDecision},
		{"pending, past tense", task.ApprovalPending, "approved", task.ErrUnknownDecision},
		{"pending, wrong case", task.ApprovalPending, "APPROVE", task.ErrUnknownDecision},
		// A resolution of a settled approval is reported as not pending
		// whatever its decision says.
		{"approved, unknown decision", task.ApprovalApproved, "maybe", task.ErrApprovalNotPending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.from.Resolve(tt.d)
			if !errors.Is(err, tt.wantErr) || got != "" {
				t.Fatalf("Resolve(%q) on %q = %q, %v; want %v", tt.d, tt.from, got, err, tt.wantErr)
			}
		})
	}
}

func TestParseApproval(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"pending", "approved", "denied", "cancelled", "expired"} {
		s, err := task.ParseApprovalState(name)
		if err != nil || string(s) != name || !s.Valid() || s.String() != name {
			t.Errorf("ParseApprovalState(%q) = %q, %v", name, s, err)
		}
		if s.Terminal() != (name != "pending") {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
	}
	for _, bad := range []string{"", "Pending", "rejected", "open"} {
		if s, err := task.ParseApprovalState(bad); !errors.Is(err, task.ErrUnknownApprovalState) || s != "" {
			t.Errorf("ParseApprovalState(%q) = %q, %v", bad, s, err)
		}
	}
	for _, name := range []string{"approve", "deny"} {
		if d, err := task.ParseDecision(name); err != nil || string(d) != name {
			t.Errorf("ParseDecision(%q) = %q, %v", name, d, err)
		}
	}
	for _, bad := range []string{"", "Approve", "approved", "reject"} {
		if d, err := task.ParseDecision(bad); !errors.Is(err, task.ErrUnknownDecision) || d != "" {
			t.Errorf("ParseDecision(%q) = %q, %v", bad, d, err)
		}
	}
}
