package browser

import (
	"context"
	"time"

	"github.com/chromedp/cdproto/page"
)

// Screenshot returns a PNG of the browsing context's viewport ("" for the
// default context).
func (s *Session) Screenshot(ctx context.Context, contextID string) ([]byte, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := s.readyTab(ctx, contextID)
	if err != nil {
		return nil, err
	}
	s.bringToFront(ctx, t)
	res, err := call(ctx, t.page.sess, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return res.Data, nil
}
