package browser

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/page"

	bappage "github.com/originweave/bap/server/internal/page"
)

// The live view (issue #18): a session's viewport as JPEG frames, for people watching the
// console's task page. One capture loop per session serves every watcher, and it runs only while
// somebody watches: with no watcher there is no loop, no timer and no capture. The loop captures
// at most once per page.LiveFrameInterval (2 fps), whatever the watchers ask. Frames are handed
// to the watchers and dropped; nothing is stored.
//
// Frames are periodic Page.captureScreenshot calls rather than Page.startScreencast: a screencast
// sends a frame per compositor frame (throttled only by everyNthFrame, which is not a rate) and
// stalls until each one is acknowledged, while a ticker gives a hard cap by construction and a
// loop that stops with its last watcher.

// liveQuality is the JPEG quality of live frames: legible text at a fraction of PNG's size.
const liveQuality = 60

// liveCaptureTimeout bounds one capture of the live loop.
const liveCaptureTimeout = 5 * time.Second

// liveHub is a session's live view state.
type liveHub struct {
	mu       sync.Mutex
	watchers map[chan LiveFrame]struct{}
	last     *LiveFrame    // the latest frame, given to a watcher at once when it joins
	stop     chan struct{} // closed to stop the running loop; nil when none runs
	done     chan struct{} // closed when the last loop started has returned
	// loops counts capture loops running, captures the captures made since the session opened:
	// what the tests check to prove an unwatched session costs nothing.
	loops    atomic.Int32
	captures atomic.Uint64
}

// Watch calls onFrame with the session's live frames (each a JPEG of the viewport of the context
// the agent last worked in; an unchanged viewport is not sent again) until ctx ends, onFrame
// fails, or the session closes (ErrSessionClosed) or is lost (ErrSessionLost). Many watchers
// share one capture loop, capped at one frame per page.LiveFrameInterval; a watcher slower than
// that skips frames instead of holding the others back.
func (s *Session) Watch(ctx context.Context, onFrame func(LiveFrame) error) error {
	if err := s.liveErr(); err != nil {
		return err
	}
	ch := make(chan LiveFrame, 1)
	s.live.join(s, ch)
	defer s.live.leave(ch)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.life.Done():
			return s.liveErr()
		case f := <-ch:
			if err := onFrame(f); err != nil {
				return err
			}
		}
	}
}

// liveErr is why the session can no longer be watched (nil while it is alive).
func (s *Session) liveErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lost != "":
		return fmt.Errorf("%w: %s", ErrSessionLost, s.lost)
	case s.closed:
		return ErrSessionClosed
	}
	return nil
}

// join adds a watcher, starting the loop if it is the first.
func (h *liveHub) join(s *Session, ch chan LiveFrame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watchers == nil {
		h.watchers = make(map[chan LiveFrame]struct{})
	}
	h.watchers[ch] = struct{}{}
	if h.last != nil {
		ch <- *h.last
	}
	if h.stop == nil {
		prev := h.done
		h.stop, h.done = make(chan struct{}), make(chan struct{})
		h.loops.Add(1)
		go s.liveLoop(h.stop, prev, h.done)
	}
}

// leave removes a watcher; the last one stops the loop and returns once it has stopped.
func (h *liveHub) leave(ch chan LiveFrame) {
	h.mu.Lock()
	delete(h.watchers, ch)
	if len(h.watchers) > 0 || h.stop == nil {
		h.mu.Unlock()
		return
	}
	close(h.stop)
	done := h.done
	h.stop, h.last = nil, nil
	h.mu.Unlock()
	<-done
}

// publish hands a frame to every watcher, replacing one it has not taken yet.
func (h *liveHub) publish(f LiveFrame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last != nil && bytes.Equal(h.last.JPEG, f.JPEG) {
		return
	}
	h.last = &f
	for ch := range h.watchers {
		select {
		case <-ch:
		default:
		}
		ch <- f // ch is written only here and in join, under mu: there is room now
	}
}

// liveLoop captures a frame at once and then once per page.LiveFrameInterval until stop is
// closed or the session ends. It starts after the loop before it (prev) has returned, so two
// loops never capture at the same time.
func (s *Session) liveLoop(stop <-chan struct{}, prev <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	defer s.live.loops.Add(-1)
	if prev != nil {
		select {
		case <-prev:
		case <-stop:
			return
		}
	}
	ctx, cancel := context.WithCancel(s.life)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(bappage.LiveFrameInterval)
	defer t.Stop()
	for {
		if f, ok := s.captureLive(ctx); ok {
			s.live.publish(f)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// captureLive takes one JPEG of the front tab's viewport. It does not bring the tab to the front
// nor count as use of the session (the idle reaper ignores watchers).
func (s *Session) captureLive(ctx context.Context) (LiveFrame, bool) {
	s.mu.Lock()
	t := s.front
	if t == nil {
		t = s.tabs[s.defaultCtx]
	}
	s.mu.Unlock()
	if t == nil || t.page == nil {
		return LiveFrame{}, false
	}
	select {
	case <-t.ready:
	default:
		return LiveFrame{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, liveCaptureTimeout)
	defer cancel()
	s.live.captures.Add(1)
	res, err := call(ctx, t.page.sess, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatJpeg, Quality: ptr(int64(liveQuality))})
	if err != nil || len(res.Data) == 0 {
		if ctx.Err() == nil {
			s.b.log.Debug("live view capture failed", "err", err)
		}
		return LiveFrame{}, false
	}
	return LiveFrame{ContextID: t.id, JPEG: res.Data, At: time.Now()}, true
}
