package firefox

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/page"
)

// watcher is one Watch call of a test: its frames, and Watch's error once it returns.
type watcher struct {
	frames chan page.LiveFrame
	done   chan error
	cancel context.CancelFunc
}

func watch(ctx context.Context, s *Session) *watcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &watcher{frames: make(chan page.LiveFrame, 64), done: make(chan error, 1), cancel: cancel}
	go func() {
		w.done <- s.Watch(ctx, func(f page.LiveFrame) error {
			w.frames <- f
			return nil
		})
	}()
	return w
}

func (w *watcher) next(t *testing.T, ctx context.Context) page.LiveFrame {
	t.Helper()
	select {
	case f := <-w.frames:
		if !bytes.HasPrefix(f.JPEG, []byte{0xFF, 0xD8, 0xFF}) {
			t.Fatalf("a live frame is not a JPEG: % x", f.JPEG[:min(8, len(f.JPEG))])
		}
		return f
	case err := <-w.done:
		t.Fatalf("Watch returned before a frame: %v", err)
	case <-ctx.Done():
		t.Fatal("no live frame")
	}
	return page.LiveFrame{}
}

// TestPortLiveViewRunsOnlyWhileWatched: as on Chromium (TestLiveViewRunsOnlyWhileWatched), the
// live view costs nothing unwatched — no capture loop before the first watcher or after the last
// one left — two watchers share one loop, a navigation shows in a new frame of the tab's context,
// and closing the session ends every Watch with page.ErrSessionClosed.
func TestPortLiveViewRunsOnlyWhileWatched(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := newSite(t)
	s := portSession(t, ctx, &events{}, st.shop.URL)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: st.shop.URL + "/checkout"}); err != nil {
		t.Fatal(err)
	}
	if n, c := s.live.Loops(), s.live.Captures(); n != 0 || c != 0 {
		t.Fatalf("unwatched session: %d capture loops, %d captures; want none", n, c)
	}
	a := watch(ctx, s)
	first := a.next(t, ctx)
	if first.ContextID != s.DefaultContext() {
		t.Fatalf("frame of context %q, want the tab's %q", first.ContextID, s.DefaultContext())
	}
	b := watch(ctx, s)
	if f := b.next(t, ctx); !bytes.Equal(f.JPEG, first.JPEG) && f.At.Before(first.At) {
		t.Fatal("a second watcher got an older frame than the first one's")
	}
	if n := s.live.Loops(); n != 1 {
		t.Fatalf("two watchers run %d capture loops, want one shared", n)
	}
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: st.shop.URL + "/thanks"}); err != nil {
		t.Fatal(err)
	}
	for {
		if f := a.next(t, ctx); !bytes.Equal(f.JPEG, first.JPEG) {
			break // the navigated page
		}
	}
	a.cancel()
	b.cancel()
	for _, w := range []*watcher{a, b} {
		if err := <-w.done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Watch after its watcher left: %v", err)
		}
	}
	if n := s.live.Loops(); n != 0 {
		t.Fatalf("nobody watches and %d capture loops run", n)
	}
	captured := s.live.Captures()
	c := watch(ctx, s)
	c.next(t, ctx)
	if got := s.live.Captures(); got <= captured {
		t.Fatalf("captures went from %d to %d while watched", captured, got)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-c.done; !errors.Is(err, page.ErrSessionClosed) {
		t.Fatalf("Watch of a closed session ended with %v, want ErrSessionClosed", err)
	}
	if n := s.live.Loops(); n != 0 {
		t.Fatalf("the session closed and %d capture loops run", n)
	}
	if err := s.Watch(ctx, func(page.LiveFrame) error { return nil }); !errors.Is(err, page.ErrSessionClosed) {
		t.Fatalf("Watch of a closed session: %v", err)
	}
}
