package browser

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"

	bappage "github.com/originweave/bap/server/internal/page"
)

// maxShotHeight bounds a full-page screenshot (CSS pixels): Chromium's
// compositor refuses larger surfaces.
const maxShotHeight = 16384

// Screenshot returns a PNG of a browsing context ("" for the default one):
// its viewport, the whole page (FullPage, up to 16384 CSS pixels high), or
// the box of one node (NodeID, scrolled into view first; in any frame).
func (s *Session) Screenshot(ctx context.Context, req bappage.ScreenshotRequest) ([]byte, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	if req.FullPage && req.NodeID != "" {
		return nil, fmt.Errorf("%w: give full_page or node_id, not both", ErrInvalidRequest)
	}
	// OptimizeForSpeed encodes the PNG with Chromium's fast compression: the same pixels in about
	// half the time and about 1.5 times the bytes (docs/benchmarks.md, "Screenshots"). An evidence
	// screenshot is bound by its digest, not by its size.
	params := page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng, OptimizeForSpeed: ptr(true)}
	var t *tab
	if req.NodeID != "" {
		tg, err := s.resolveTarget(ctx, ActRequest{NodeID: req.NodeID, ContextID: req.ContextID})
		if err != nil {
			return nil, err
		}
		t = tg.t
		clip, err := s.nodeClip(ctx, tg)
		if err != nil {
			return nil, err
		}
		params.Clip, params.CaptureBeyondViewport = clip, ptr(true)
	} else {
		if t, err = s.readyTab(ctx, req.ContextID); err != nil {
			return nil, err
		}
		if req.FullPage {
			m, err := call(ctx, t.page.sess, page.GetLayoutMetrics, cdp.Empty{})
			if err != nil {
				return nil, s.mapErr(err)
			}
			if m.CSSContentSize != nil && m.CSSContentSize.Width > 0 && m.CSSContentSize.Height > 0 {
				params.Clip = &page.Viewport{Width: math.Ceil(m.CSSContentSize.Width),
					Height: math.Min(math.Ceil(m.CSSContentSize.Height), maxShotHeight), Scale: 1}
				params.CaptureBeyondViewport = ptr(true)
			}
		}
	}
	s.bringToFront(ctx, t)
	res, err := call(ctx, t.page.sess, page.CaptureScreenshot, params)
	if err != nil {
		return nil, s.mapErr(err)
	}
	return res.Data, nil
}

// nodeClip is the box of a node in document coordinates of its tab: its
// box in its frame, plus the offsets of the frames above it, plus the
// page's scroll.
func (s *Session) nodeClip(ctx context.Context, tg *actTarget) (*page.Viewport, error) {
	var r struct {
		St string  `json:"st"`
		X  float64 `json:"x"`
		Y  float64 `json:"y"`
		W  float64 `json:"w"`
		H  float64 `json:"h"`
	}
	err := s.inFrame(ctx, tg.t, tg.f, func(w *world) error {
		if err := s.checkWorld(tg, w); err != nil {
			return err
		}
		return s.eval(ctx, w, agentCall("box", tg.rec.idx), false, &r)
	})
	if err != nil {
		return nil, err
	}
	switch r.St {
	case "ok":
	case "hidden":
		return nil, &ActionTimeoutError{Reason: "the node has no visible box"}
	default:
		return nil, fmt.Errorf("%w: the node is no longer in the document", ErrStaleNodeHandle)
	}
	x, y, _, err := s.toTopViewport(ctx, tg, r.X, r.Y, false)
	if err != nil {
		return nil, err
	}
	m, err := call(ctx, tg.t.page.sess, page.GetLayoutMetrics, cdp.Empty{})
	if err != nil {
		return nil, s.mapErr(err)
	}
	if m.CSSVisualViewport != nil {
		x += m.CSSVisualViewport.PageX
		y += m.CSSVisualViewport.PageY
	}
	return &page.Viewport{X: math.Floor(x), Y: math.Floor(y), Width: math.Ceil(r.W), Height: math.Min(math.Ceil(r.H), maxShotHeight), Scale: 1}, nil
}
