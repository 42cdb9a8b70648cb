// Package waitfor lets a test wait for something it can observe (a row, an event, a counter, a
// message on a channel) instead of sleeping for a guessed time. A wait ends as soon as the
// condition holds, so a fast machine pays nothing, and a failure says what was awaited and the
// last reason it was not yet true, so a slow machine's failure is diagnosable.
//
// A test that must show that something does not happen should not sleep either: it waits for a
// positive signal that the thing would have happened by then (the worker's next cycle ran, the
// stream delivered a later event) and then checks that it did not.
package waitfor

import (
	"testing"
	"time"
)

// Poll bounds: conditions are re-checked quickly at first (most hold within milliseconds) and
// then less often, so a long wait does not load a busy machine.
const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 200 * time.Millisecond
)

// Until re-checks cond until it reports true, and fails t if within passes first or t's context
// ends. what names the awaited condition; why is the condition's own account of its last check.
func Until(t testing.TB, within time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	var why string
	if Holds(t, within, func() bool {
		var ok bool
		ok, why = cond()
		return ok
	}) {
		return
	}
	if err := t.Context().Err(); err != nil {
		t.Fatalf("waitfor: %s: the test ended while waiting: %v", what, err)
	}
	if why != "" {
		t.Fatalf("waitfor: %s: not true within %s: %s", what, within, why)
	}
	t.Fatalf("waitfor: %s: not true within %s", what, within)
}

// Holds re-checks cond until it reports true and says whether it did before within passed (or
// t's context ended). It does not fail t: the caller fails with its own diagnosis (a server's
// logs, a history), which a generic message cannot give.
func Holds(t testing.TB, within time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := firstPoll
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		timer := time.NewTimer(min(pause, left))
		select {
		case <-t.Context().Done():
			timer.Stop()
			return false
		case <-timer.C:
		}
		pause = min(2*pause, maxPoll)
	}
}

// True is Until for a condition that gives no reason.
func True(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	Until(t, within, what, func() (bool, string) { return cond(), "" })
}

// Receive waits for a value on ch and returns it, failing t if within passes first, the channel
// is closed, or t's context ends.
func Receive[T any](t testing.TB, within time.Duration, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("waitfor: %s: the channel closed", what)
		}
		return v
	case <-timer.C:
		t.Fatalf("waitfor: %s: nothing within %s", what, within)
	case <-t.Context().Done():
		t.Fatalf("waitfor: %s: the test ended while waiting: %v", what, t.Context().Err())
	}
	var zero T
	return zero
}
