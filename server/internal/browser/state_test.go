package browser

import (
	"bytes"
	"errors"
	pngpkg "image/png"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/page"
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
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, err := fresh.s.Extract(tctx(t), ExtractRequest{Kind: ExtractText, ContextID: ctxID})
			if err != nil {
				t.Fatalf("Extract %s: %v", ctxID, err)
			}
			if strings.Contains(res.Data.(string), want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tab %s shows %q, want %q", ctxID, res.Data, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if n := fx.otherHitCount() - otherHits; n != 0 {
		t.Errorf("the refused tab sent %d requests to its origin", n)
	}
}
