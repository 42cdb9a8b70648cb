package browser

import (
	"context"
	"fmt"
	"time"

	"github.com/chromedp/cdproto/page"

	"github.com/originweave/bap/server/internal/pagekit"
)

// The live view (issue #18): the session's viewport as JPEG frames through pagekit.LiveHub (one
// capture loop shared by every watcher, only while somebody watches, capped at
// page.LiveFrameInterval). Frames are periodic Page.captureScreenshot calls rather than
// Page.startScreencast: a screencast sends a frame per compositor frame (throttled only by
// everyNthFrame, which is not a rate) and stalls until each one is acknowledged.

// Watch calls onFrame with the session's live frames (each a JPEG of the viewport of the context
// the agent last worked in; an unchanged viewport is not sent again) until ctx ends, onFrame
// fails, or the session closes (ErrSessionClosed) or is lost (ErrSessionLost).
func (s *Session) Watch(ctx context.Context, onFrame func(LiveFrame) error) error {
	return s.live.Watch(ctx, s.life, s.liveErr, s.captureLive, onFrame)
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
	res, err := call(ctx, t.page.sess, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatJpeg, Quality: ptr(int64(pagekit.LiveQuality))})
	if err != nil || len(res.Data) == 0 {
		if ctx.Err() == nil {
			s.b.log.Debug("live view capture failed", "err", err)
		}
		return LiveFrame{}, false
	}
	return LiveFrame{ContextID: t.id, JPEG: res.Data, At: time.Now()}, true
}
