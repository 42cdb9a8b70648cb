package browser

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// watcher is one Watch call of a test: its frames, and Watch's error once it returns.
type watcher struct {
	frames chan LiveFrame
	done   chan error
	cancel context.CancelFunc
}

func watch(t *testing.T, s *Session) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(tctx(t))
	w := &watcher{frames: make(chan LiveFrame, 64), done: make(chan error, 1), cancel: cancel}
	go func() {
		w.done <- s.Watch(ctx, func(f LiveFrame) error {
			w.frames <- f
			return nil
		})
	}()
	return w
}

func (w *watcher) next(t *testing.T) LiveFrame {
	t.Helper()
	select {
	case f := <-w.frames:
		if !bytes.HasPrefix(f.JPEG, []byte{0xFF, 0xD8, 0xFF}) {
			t.Fatalf("a live frame is not a JPEG: % x", f.JPEG[:min(8, len(f.JPEG))])
		}
		return f
	case err := <-w.done:
		t.Fatalf("Watch returned before a frame: %v", err)
	case <-tctx(t).Done():
		t.Fatal("no live frame")
	}
	return LiveFrame{}
}

// The live view costs nothing unwatched: no capture loop exists before the first watcher or after
// the last one left, two watchers share one loop, a navigation shows in a new frame, and closing
// the session ends every Watch with ErrSessionClosed.
func TestLiveViewRunsOnlyWhileWatched(t *testing.T) {
	b := setup(t)
	s := b.s
	b.navigate("/shop.html")
	if n, c := s.live.Loops(), s.live.Captures(); n != 0 || c != 0 {
		t.Fatalf("unwatched session: %d capture loops, %d captures; want none", n, c)
	}

	a := watch(t, s)
	first := a.next(t)
	bw := watch(t, s)
	if f := bw.next(t); !bytes.Equal(f.JPEG, first.JPEG) && f.At.Before(first.At) {
		t.Fatal("a second watcher got an older frame than the first one's")
	}
	if n := s.live.Loops(); n != 1 {
		t.Fatalf("two watchers run %d capture loops, want one shared", n)
	}

	b.navigate("/big.html")
	for {
		f := a.next(t)
		if !bytes.Equal(f.JPEG, first.JPEG) {
			break // the navigated page
		}
	}

	a.cancel()
	bw.cancel()
	for _, w := range []*watcher{a, bw} {
		if err := <-w.done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Watch after its watcher left: %v", err)
		}
	}
	if n := s.live.Loops(); n != 0 {
		t.Fatalf("nobody watches and %d capture loops run", n)
	}
	captured := s.live.Captures()

	c := watch(t, s)
	c.next(t)
	if got := s.live.Captures(); got <= captured {
		t.Fatalf("captures went from %d to %d while watched", captured, got)
	}
	if err := s.Close(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-c.done; !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("Watch of a closed session ended with %v, want ErrSessionClosed", err)
	}
	if n := s.live.Loops(); n != 0 {
		t.Fatalf("the session closed and %d capture loops run", n)
	}
	if err := s.Watch(tctx(t), func(LiveFrame) error { return nil }); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("Watch of a closed session: %v", err)
	}
}
