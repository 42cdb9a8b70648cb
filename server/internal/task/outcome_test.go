package task_test

import (
	"errors"
	"testing"

	"github.com/originweave/bap/server/internal/task"
)

func TestClassifyInterrupted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		sideEffecting bool
		want          task.Outcome
	}{
		{"safe command (GET navigation, observe, extract)", false, task.UnknownOutcome},
		{"side-effecting command (act, POST navigation)", true, task.ReconciliationRequired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := task.ClassifyInterrupted(tt.sideEffecting)
			if got != tt.want {
				t.Fatalf("ClassifyInterrupted(%v) = %s, want %s", tt.sideEffecting, got, tt.want)
			}
			if !got.Interrupted() {
				t.Errorf("%s.Interrupted() = false", got)
			}
		})
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	want := map[task.Outcome]bool{ // outcome → Interrupted()
		"applied":                 false,
		"no_side_effect":          false,
		"pending_approval":        false,
		"rejected":                false,
		"unknown_outcome":         true,
		"reconciliation_required": true,
	}
	all := task.AllOutcomes()
	if len(all) != len(want) {
		t.Fatalf("AllOutcomes() = %v, want %d classes", all, len(want))
	}
	for _, o := range all {
		interrupted, ok := want[o]
		if !ok {
			t.Errorf("AllOutcomes() has unexpected %q", o)
			continue
		}
		if o.Interrupted() != interrupted {
			t.Errorf("%s.Interrupted() = %v, want %v", o, o.Interrupted(), interrupted)
		}
		if got, err := task.ParseOutcome(string(o)); err != nil || got != o || !o.Valid() || o.String() != string(o) {
			t.Errorf("ParseOutcome(%q) = %q, %v", o, got, err)
		}
	}
	for _, bad := range []string{"", "Applied", "success", "unknown"} {
		if got, err := task.ParseOutcome(bad); !errors.Is(err, task.ErrUnknownOutcome) || got != "" {
			t.Errorf("ParseOutcome(%q) = %q, %v; want ErrUnknownOutcome", bad, got, err)
		}
	}
}
