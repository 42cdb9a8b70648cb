package e2e

import (
	"io"
	"log/slog"
	"sync"
	"testing"
)

// testLogger is the API's request log for one test: its lines go to that test's own output, so a
// failing test's report carries the requests it made, and a passing suite prints none of them
// (written to stderr, the lines of 80 tests crowded out the failures in CI's tail of the output).
// Lines written after the test's cleanups ran (a hijacked stream's handler can return later)
// are dropped rather than logged into a finished test.
func testLogger(t *testing.T) *slog.Logger {
	w := &testOutput{out: t.Output()}
	t.Cleanup(w.close)
	return slog.New(slog.NewTextHandler(w, nil))
}

type testOutput struct {
	mu     sync.Mutex
	out    io.Writer
	closed bool
}

func (w *testOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return len(p), nil
	}
	return w.out.Write(p)
}

func (w *testOutput) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
