package firefox

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// The live view (issue #18) as on Chromium: the session's viewport as JPEG frames through
// pagekit.LiveHub (one capture loop shared by every watcher, only while somebody watches, capped
// at page.LiveFrameInterval), each a browsingContext.captureScreenshot of the tab the agent last
// navigated or acted in. The console sends them over the same WebSocket as Chromium's.

// Watch calls onFrame with the session's live frames (an unchanged viewport is not sent again)
// until ctx ends, onFrame fails, or the session closes (page.ErrSessionClosed) or is lost
// (page.ErrSessionLost).
func (s *Session) Watch(ctx context.Context, onFrame func(page.LiveFrame) error) error {
	m := s.first()
	return m.live.Watch(ctx, m.life, m.liveErr, m.captureLive, onFrame)
}

// liveErr is why the session can no longer be watched (nil while it is alive).
func (s *Session) liveErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lost:
		return fmt.Errorf("%w: the browser exited", page.ErrSessionLost)
	case s.closed:
		return page.ErrSessionClosed
	}
	return nil
}

// setFront records that the agent works in tab t now (what the live view shows).
func (s *Session) setFront(t *Session) {
	m := s.first()
	m.mu.Lock()
	m.front = t
	m.mu.Unlock()
}

// captureLive takes one JPEG of the viewport of the front tab (the first one when the front tab
// closed).
func (s *Session) captureLive(ctx context.Context) (page.LiveFrame, bool) {
	s.mu.Lock()
	t := s.front
	s.mu.Unlock()
	if t == nil || t.check() != nil {
		t = s
	}
	q := float64(pagekit.LiveQuality) / 100
	res, err := s.e.c.BrowsingContextCaptureScreenshot(ctx, bidi.BrowsingContextCaptureScreenshotParameters{
		Context: t.top, Format: &bidi.BrowsingContextImageFormat{Type: "image/jpeg", Quality: &q}})
	if err != nil {
		if ctx.Err() == nil {
			s.debug("live view capture failed", err)
		}
		return page.LiveFrame{}, false
	}
	jpeg, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil || len(jpeg) == 0 {
		return page.LiveFrame{}, false
	}
	return page.LiveFrame{ContextID: t.ctxID, JPEG: jpeg, At: time.Now()}, true
}
