package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	pngpkg "image/png"
	"strings"
	"sync"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"

	"github.com/originweave/bap/server/internal/page"

	"github.com/originweave/bap/server/internal/waitfor"
)

// A session's cookies (HttpOnly too), local and session storage and URL survive an export into a
// fresh session, which gets a new epoch; the stand-in documents of the restore leave no events.
func TestExportRestoreState(t *testing.T) {
	old := setup(t)
	old.navigate("/signin")
	before := old.navigate("/account.html")
	old.waitText("local=3 items session=payment js=theme=dark")

	st, err := old.s.ExportState(tctx(t))
	if err != nil {
		t.Fatalf("ExportState: %v", err)
	}
	names := map[string]bool{}
	for _, c := range st.Cookies {
		names[c.Name] = true
		if c.Name == "sid" && !c.HTTPOnly {
			t.Errorf("sid lost its HttpOnly flag: %+v", c)
		}
	}
	if !names["sid"] || !names["theme"] {
		t.Fatalf("cookies = %+v, want sid and theme", st.Cookies)
	}
	if len(st.LocalStorage) != 1 || st.LocalStorage[0].Origin != fx.A || st.LocalStorage[0].Items["cart"] != "3 items" {
		t.Fatalf("local storage = %+v", st.LocalStorage)
	}
	if len(st.Contexts) != 1 || !st.Contexts[0].Primary || !strings.HasSuffix(st.Contexts[0].URL, "/account.html") ||
		len(st.Contexts[0].SessionStorage) != 1 || st.Contexts[0].SessionStorage[0].Items["step"] != "payment" {
		t.Fatalf("contexts = %+v", st.Contexts)
	}
	if st.Contexts[0].Width <= 0 || st.Contexts[0].Height <= 0 {
		t.Errorf("viewport not recorded: %+v", st.Contexts[0])
	}

	fresh := setup(t)
	res, err := fresh.s.RestoreState(tctx(t), st)
	if err != nil {
		t.Fatalf("RestoreState: %v", err)
	}
	if !strings.HasSuffix(res.URL, "/account.html") || res.EpochID == "" || res.EpochID == before.EpochID {
		t.Fatalf("restore result = %+v (old epoch %s)", res, before.EpochID)
	}
	if res.Cookies != 2 || res.Origins != 1 {
		t.Errorf("restored %d cookies, %d origins; want 2, 1", res.Cookies, res.Origins)
	}
	fresh.waitText("local=3 items session=payment js=theme=dark")
	fresh.navigate("/whoami")
	fresh.waitText("signed in: s3cret-session")
	for _, e := range fresh.ev.all() {
		if e.Type == EventNavigationCommitted && !strings.HasSuffix(e.URL, "/account.html") && !strings.HasSuffix(e.URL, "/whoami") {
			t.Errorf("restore leaked an event of its stand-in document: %+v", e)
		}
	}

	// A session that never signed in stays signed out: the state came from the checkpoint.
	other := setup(t)
	other.navigate("/whoami")
	other.waitText("signed out")
}

// A full-page screenshot covers the whole document; a node screenshot only that node's box.
func TestScreenshotFullPageAndNode(t *testing.T) {
	b := setup(t)
	b.navigate("/big.html")
	size := func(png []byte) (int, int) {
		t.Helper()
		cfg, err := pngpkg.DecodeConfig(bytes.NewReader(png))
		if err != nil {
			t.Fatalf("not a PNG: %v", err)
		}
		return cfg.Width, cfg.Height
	}
	view, err := b.s.Screenshot(tctx(t), ScreenshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := b.s.Screenshot(tctx(t), ScreenshotRequest{FullPage: true})
	if err != nil {
		t.Fatal(err)
	}
	vw, vh := size(view)
	fw, fh := size(full)
	if fh <= vh*2 || fw < vw-20 {
		t.Fatalf("full page %dx%d is not taller than the viewport %dx%d", fw, fh, vw, vh)
	}

	b.navigate("/shop.html")
	place := b.query(Query{Role: "button", Name: "Place order"})
	shot, err := b.s.Screenshot(tctx(t), ScreenshotRequest{NodeID: place.NodeID})
	if err != nil {
		t.Fatal(err)
	}
	nw, nh := size(shot)
	if nw <= 0 || nh <= 0 || nw >= vw/2 || nh >= vh/4 {
		t.Fatalf("node screenshot %dx%d is not a button's box (viewport %dx%d)", nw, nh, vw, vh)
	}
	if _, err := b.s.Screenshot(tctx(t), ScreenshotRequest{FullPage: true, NodeID: place.NodeID}); err == nil {
		t.Fatal("full_page with node_id was accepted")
	}
	b.navigate("/nav.html")
	if _, err := b.s.Screenshot(tctx(t), ScreenshotRequest{NodeID: place.NodeID}); !errors.Is(err, ErrStaleNodeHandle) {
		t.Fatalf("screenshot of a node of an old document: %v, want stale", err)
	}
}

// A screenshot is encoded for speed (screenshot.go) but loses nothing: its pixels are those of
// the browser's default PNG of the same viewport, bigger only for the faster compression.
func TestScreenshotIsLossless(t *testing.T) {
	b := setup(t)
	b.navigate("/table.html")
	fast, err := b.s.Screenshot(tctx(t), ScreenshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b.s.mu.Lock()
	tb := b.s.tabs[b.s.defaultCtx]
	b.s.mu.Unlock()
	res, err := call(tctx(t), tb.page.sess, cdppage.CaptureScreenshot, cdppage.CaptureScreenshotParams{Format: cdppage.CaptureScreenshotFormatPng})
	if err != nil {
		t.Fatal(err)
	}
	decode := func(name string, data []byte) image.Image {
		t.Helper()
		img, err := pngpkg.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		return img
	}
	a, d := decode("fast", fast), decode("default", res.Data)
	if a.Bounds() != d.Bounds() {
		t.Fatalf("fast screenshot is %v, the default one %v", a.Bounds(), d.Bounds())
	}
	for y := a.Bounds().Min.Y; y < a.Bounds().Max.Y; y++ {
		for x := a.Bounds().Min.X; x < a.Bounds().Max.X; x++ {
			r1, g1, b1, a1 := a.At(x, y).RGBA()
			r2, g2, b2, a2 := d.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 || a1 != a2 {
				t.Fatalf("pixel (%d,%d) differs: fast %v, default %v", x, y, a.At(x, y), d.At(x, y))
			}
		}
	}
	t.Logf("viewport %v: fast %d bytes, default %d bytes", a.Bounds(), len(fast), len(res.Data))
}

// Every tab of a checkpoint is reopened, each with its own session storage; a tab whose URL the
// policy refuses is left out and counted.
func TestRestoreReopensEveryTab(t *testing.T) {
	old := setup(t)
	old.navigate("/account.html")
	st, err := old.s.ExportState(tctx(t))
	if err != nil {
		t.Fatalf("ExportState: %v", err)
	}
	// A second and a third tab as a checkpoint records them: an allowed popup with its own
	// session storage, and one on an origin the policy refuses.
	st.Contexts = append(st.Contexts,
		page.ContextState{ContextID: "ctx_popup1", URL: fx.A + "/account.html",
			SessionStorage: []page.OriginStorage{{Origin: fx.A, Items: map[string]string{"step": "second-tab"}}}},
		page.ContextState{ContextID: "ctx_popup2", URL: fx.Other + "/account.html"})
	st.Contexts[0].SessionStorage = []page.OriginStorage{{Origin: fx.A, Items: map[string]string{"step": "first-tab"}}}

	fresh := setup(t)
	otherHits := fx.otherHitCount()
	res, err := fresh.s.RestoreState(tctx(t), st)
	if err != nil {
		t.Fatalf("RestoreState: %v", err)
	}
	if len(res.Contexts) != 1 || res.ContextsSkipped != 1 || res.ContextID != fresh.s.DefaultContext() {
		t.Fatalf("restore result = %+v", res)
	}
	// The restore's navigations are returned, not reported: the session is not recorded yet.
	committed := map[string]bool{}
	for _, e := range res.Events {
		if e.Type == EventNavigationCommitted {
			committed[e.ContextID] = true
		}
	}
	if !committed[res.ContextID] || !committed[res.Contexts[0].ContextID] {
		t.Errorf("restore events %+v lack a navigation of each tab", res.Events)
	}
	for _, e := range fresh.ev.all() {
		if e.Type == EventNavigationCommitted {
			t.Errorf("a navigation of the restore reached the session's callback: %+v", e)
		}
	}
	ctxs := fresh.s.Contexts()
	if len(ctxs) != 2 || ctxs[1].ContextID != res.Contexts[0].ContextID || !strings.HasSuffix(ctxs[1].URL, "/account.html") {
		t.Fatalf("contexts = %+v", ctxs)
	}
	for ctxID, want := range map[string]string{ctxs[0].ContextID: "session=first-tab", ctxs[1].ContextID: "session=second-tab"} {
		waitfor.Until(t, 10*time.Second, "tab "+ctxID+" shows "+want, func() (bool, string) {
			res, err := fresh.s.Extract(tctx(t), ExtractRequest{Kind: ExtractText, ContextID: ctxID})
			if err != nil {
				t.Fatalf("Extract %s: %v", ctxID, err)
			}
			return strings.Contains(res.Data.(string), want), fmt.Sprintf("it shows %q", res.Data)
		})
	}
	if n := fx.otherHitCount() - otherHits; n != 0 {
		t.Errorf("the refused tab sent %d requests to its origin", n)
	}
}

// stall holds a /stalled?id= answer: arrived closes when the request comes, release lets it go.
type stall struct {
	arrive           sync.Once
	arrived, release chan struct{}
}

// A checkpoint taken right after an act opened a popup keeps the popup: the act reports the popup
// once its tab is attached, before its first document commits, and the export waits for that
// document instead of recording the tab's empty URL (which the restore would leave out as not an
// allowed http(s) URL). This was TestCheckpointReopensEveryTab's flake on a loaded machine.
func TestExportWaitsForAnOpeningPopup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := strings.ReplaceAll(t.Name(), "/", "_")
	st := &stall{arrived: make(chan struct{}), release: make(chan struct{})}
	fx.stalls.Store(id, st)
	t.Cleanup(func() { fx.stalls.Delete(id) })
	b.navigate("/stalled-popup.html?id=" + id)
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Open statement"}})
	if len(res.NewContexts) != 1 {
		t.Fatalf("the click opened no popup: %+v", res)
	}
	select {
	case <-st.arrived:
	case <-tctx(t).Done():
		t.Fatal("the popup never asked for its page")
	}
	b.s.mu.Lock()
	opening := b.s.tabs[res.NewContexts[0]].openingLocked()
	b.s.mu.Unlock()
	if !opening {
		t.Fatal("a popup whose page has not answered yet is not opening")
	}

	// While the popup's page has not answered, an export does not go on without it: it is still
	// waiting when its deadline ends (before the fix it returned the popup with an empty URL).
	short, cancel := context.WithTimeout(tctx(t), 2*time.Second)
	early, err := b.s.ExportState(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		var urls []string
		if early != nil {
			for _, c := range early.Contexts {
				urls = append(urls, c.URL)
			}
		}
		t.Fatalf("ExportState while the popup opens: tabs %q, err %v; want it to wait", urls, err)
	}
	// Once the page answers, the export records the popup's page.
	close(st.release)
	got, err := b.s.ExportState(tctx(t))
	if err != nil {
		t.Fatalf("ExportState: %v", err)
	}
	var urls []string
	for _, c := range got.Contexts {
		urls = append(urls, c.URL)
	}
	if len(urls) != 2 || !strings.HasSuffix(urls[1], "/stalled?id="+id) {
		t.Fatalf("the checkpoint's tabs: %q, want the primary and the popup's page", urls)
	}
}
