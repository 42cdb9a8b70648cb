package browser

import (
	"context"
	"time"

	"github.com/chromedp/cdproto/page"
)

// CaptureMHTML returns an MHTML snapshot of the browsing context's document ("" for the default
// context): the DOM with its frames, shadow roots and sub-resources.
func (s *Session) CaptureMHTML(ctx context.Context, contextID string) ([]byte, error) {
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
	res, err := call(ctx, t.page.sess, page.CaptureSnapshot, page.CaptureSnapshotParams{Format: page.CaptureSnapshotFormatMhtml})
	if err != nil {
		return nil, s.mapErr(err)
	}
	return []byte(res.Data), nil
}
