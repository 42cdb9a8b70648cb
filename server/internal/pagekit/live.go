package pagekit

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/originweave/bap/server/internal/page"
)

// The live view (issue #18): a session's viewport as JPEG frames, for people watching the
// console's task page, the same on every engine. One capture loop per session serves every
// watcher, and it runs only while somebody watches: with no watcher there is no loop, no timer
// and no capture. The loop captures at most once per page.LiveFrameInterval (2 fps), whatever the
// watchers ask. Frames are handed to the watchers and dropped; nothing is stored.
//
// Frames are periodic screenshots (CDP's Page.captureScreenshot, BiDi's
// browsingContext.captureScreenshot) rather than a screencast: a ticker gives a hard cap by
// construction and a loop that stops with its last watcher.

// LiveQuality is the JPEG quality of live frames (of 100): legible text at a fraction of PNG's
// size.
const LiveQuality = 60

// LiveCaptureTimeout bounds one capture of the live loop.
const LiveCaptureTimeout = 5 * time.Second

// LiveHub is a session's live view state: its watchers and capture loop. The zero value is ready.
type LiveHub struct {
	mu       sync.Mutex
	watchers map[chan page.LiveFrame]struct{}
	last     *page.LiveFrame // the latest frame, given to a watcher at once when it joins
	stop     chan struct{}   // closed to stop the running loop; nil when none runs
	done     chan struct{}   // closed when the last loop started has returned
	// loops counts capture loops running, captures the captures made since the session opened:
	// what the tests check to prove an unwatched session costs nothing.
	loops    atomic.Int32
	captures atomic.Uint64
}

// Loops is the number of capture loops running (0 or 1).
func (h *LiveHub) Loops() int32 { return h.loops.Load() }

// Captures is the number of captures made.
func (h *LiveHub) Captures() uint64 { return h.captures.Load() }

// Watch calls onFrame with the session's live frames (an unchanged viewport is not sent again)
// until ctx ends (its error), onFrame fails (its error), or life ends (gone's answer then: the
// session closed or was lost). gone is nil while the session lives; capture takes one frame
// (false: none this time). Many watchers share one capture loop, capped at one frame per
// page.LiveFrameInterval; a watcher slower than that skips frames instead of holding the others
// back.
func (h *LiveHub) Watch(ctx, life context.Context, gone func() error, capture func(context.Context) (page.LiveFrame, bool), onFrame func(page.LiveFrame) error) error {
	if err := gone(); err != nil {
		return err
	}
	ch := make(chan page.LiveFrame, 1)
	h.join(life, capture, ch)
	defer h.leave(ch)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-life.Done():
			return gone()
		case f := <-ch:
			if err := onFrame(f); err != nil {
				return err
			}
		}
	}
}

// join adds a watcher, starting the loop if it is the first.
func (h *LiveHub) join(life context.Context, capture func(context.Context) (page.LiveFrame, bool), ch chan page.LiveFrame) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watchers == nil {
		h.watchers = make(map[chan page.LiveFrame]struct{})
	}
	h.watchers[ch] = struct{}{}
	if h.last != nil {
		ch <- *h.last
	}
	if h.stop == nil {
		prev := h.done
		h.stop, h.done = make(chan struct{}), make(chan struct{})
		h.loops.Add(1)
		go h.loop(life, capture, h.stop, prev, h.done)
	}
}

// leave removes a watcher; the last one stops the loop and returns once it has stopped.
func (h *LiveHub) leave(ch chan page.LiveFrame) {
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
func (h *LiveHub) publish(f page.LiveFrame) {
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

// loop captures a frame at once and then once per page.LiveFrameInterval until stop is closed or
// life ends. It starts after the loop before it (prev) has returned, so two loops never capture
// at the same time.
func (h *LiveHub) loop(life context.Context, capture func(context.Context) (page.LiveFrame, bool), stop <-chan struct{}, prev <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	defer h.loops.Add(-1)
	if prev != nil {
		select {
		case <-prev:
		case <-stop:
			return
		}
	}
	ctx, cancel := context.WithCancel(life)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(page.LiveFrameInterval)
	defer t.Stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, LiveCaptureTimeout)
		h.captures.Add(1)
		f, ok := capture(cctx)
		ccancel()
		if ok {
			h.publish(f)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
