package waitfor

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// recorder stands in for a test so that a failing wait can be observed: Fatalf records the
// message and ends the goroutine, as testing.T's does.
type recorder struct {
	testing.TB
	ended bool // the test's context has ended
	msg   string
}

func (r *recorder) Helper() {}

func (r *recorder) Context() context.Context {
	if !r.ended {
		return context.Background()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder in its own goroutine and returns what it failed with ("" if it
// returned normally).
func run(ended bool, f func(tb testing.TB)) string {
	r := &recorder{ended: ended}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.msg
}

func TestWaits(t *testing.T) {
	t.Parallel()
	ready := make(chan int, 1)
	ready <- 7
	closed := make(chan int)
	close(closed)

	cases := []struct {
		name  string
		ended bool
		wait  func(tb testing.TB)
		want  string // substring of the failure; "" means the wait succeeds
	}{
		{"holds at once", false, func(tb testing.TB) { True(tb, time.Second, "x", func() bool { return true }) }, ""},
		{"holds on the third check", false, func(tb testing.TB) {
			n := 0
			Until(tb, 5*time.Second, "third", func() (bool, string) { n++; return n == 3, fmt.Sprint(n) })
		}, ""},
		{"never holds: names what and why", false, func(tb testing.TB) {
			Until(tb, 30*time.Millisecond, "the row", func() (bool, string) { return false, "state is running" })
		}, "the row: not true within 30ms: state is running"},
		{"never holds, no reason", false, func(tb testing.TB) {
			True(tb, 10*time.Millisecond, "the flag", func() bool { return false })
		}, "the flag: not true within 10ms"},
		{"the test ended", true, func(tb testing.TB) {
			True(tb, time.Minute, "the flag", func() bool { return false })
		}, "the test ended while waiting"},
		{"holds reports false at the deadline", false, func(tb testing.TB) {
			n := 0
			if Holds(tb, 20*time.Millisecond, func() bool { n++; return false }) || n < 2 {
				tb.Fatalf("held after %d checks", n)
			}
		}, ""},
		{"receives", false, func(tb testing.TB) {
			if v := Receive(tb, time.Second, "seven", ready); v != 7 {
				tb.Fatalf("got %d", v)
			}
		}, ""},
		{"receives nothing", false, func(tb testing.TB) { Receive(tb, 10*time.Millisecond, "a frame", make(chan int)) }, "a frame: nothing within 10ms"},
		{"closed channel", false, func(tb testing.TB) { Receive(tb, time.Second, "a frame", closed) }, "the channel closed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := run(c.ended, c.wait)
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Fatalf("failure %q, want %q", got, c.want)
			}
		})
	}
}
