package firefox

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/waitfor"
)

const frameChild = `<!doctype html><title>Child</title><p id="who"></p>
<label>Frame input <input id="fin" name="fin"></label>
<button id="fbtn" onclick="document.getElementById('out').textContent='clicked ' + document.getElementById('fin').value">Frame button</button>
<p id="out"></p><a href="/thanks">Frame link</a>
<script>document.getElementById('who').textContent = 'Child frame ' + new URLSearchParams(location.search).get('who');</script>`

// frameSite serves a page with three iframes of the same child: same origin, cross origin (another
// port) and cross site (localhost instead of 127.0.0.1), and returns the page's URL and the origins
// a session must allow.
func frameSite(t *testing.T) (string, []string) {
	t.Helper()
	html := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(body))
	}
	child := http.NewServeMux()
	child.HandleFunc("GET /frame-child", func(w http.ResponseWriter, r *http.Request) { html(w, frameChild) })
	child.HandleFunc("GET /thanks", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<!doctype html><title>Thanks</title><h1>Thank you</h1>`)
	})
	cross := httptest.NewServer(child)
	t.Cleanup(cross.Close)
	var site string
	mux := http.NewServeMux()
	mux.Handle("GET /frame-child", child)
	mux.Handle("GET /thanks", child)
	mux.HandleFunc("GET /frames", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<!doctype html><title>Frames</title><h1>Frames page</h1><button>Top button</button>
<iframe title="Same origin frame" src="/frame-child?who=same" width="400" height="200"></iframe>
<iframe title="Cross origin frame" src="`+cross.URL+`/frame-child?who=cross" width="400" height="200"></iframe>
<iframe title="Cross site frame" src="`+site+`/frame-child?who=site" width="400" height="200"></iframe>`)
	})
	top := httptest.NewServer(mux)
	t.Cleanup(top.Close)
	site = strings.Replace(top.URL, "127.0.0.1", "localhost", 1)
	return top.URL + "/frames", []string{top.URL, cross.URL, site}
}

// frameNodes waits until the snapshot shows the three iframes with their documents' nodes (a
// frame's document loads after the page's) and returns the snapshot and the iframes by name.
func frameNodes(t *testing.T, ctx context.Context, s *Session) (*page.Snapshot, map[string]page.Node) {
	t.Helper()
	var snap *page.Snapshot
	frames := map[string]page.Node{}
	waitfor.Until(t, 15*time.Second, "the frames' documents in the snapshot", func() (bool, string) {
		var err error
		if snap, err = s.Observe(ctx, page.ObserveRequest{}); err != nil {
			t.Fatal(err)
		}
		for _, n := range snap.Nodes {
			if n.Role == "iframe" {
				frames[n.Name] = n
			}
		}
		for _, name := range []string{"Same origin frame", "Cross origin frame", "Cross site frame"} {
			if _, ok := findNode(frames[name].Children, "button", "Frame button"); !ok {
				return false, name + " has no button yet"
			}
		}
		return true, ""
	})
	return snap, frames
}

func findNode(ns []page.Node, role, name string) (page.Node, bool) {
	for _, n := range ns {
		if n.Role == role && (name == "" || n.Name == name) {
			return n, true
		}
		if c, ok := findNode(n.Children, role, name); ok {
			return c, true
		}
	}
	return page.Node{}, false
}

// TestPortFrames: as on Chromium (TestFramesAndShadowDOM), observe stitches same-origin,
// cross-origin and cross-site frames' nodes under their iframe nodes, with handles that fill and
// click land in the frame; a query finds text in a frame; within an iframe node reaches into its
// document; and no BiDi id of a frame (its browsing context, realm) reaches the answers.
func TestPortFrames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	u, origins := frameSite(t)
	ev := &events{}
	s := portSession(t, ctx, ev, origins...)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: u}); err != nil {
		t.Fatal(err)
	}
	snap, frames := frameNodes(t, ctx, s)
	seen := []any{snap}
	for i, name := range []string{"Same origin frame", "Cross origin frame", "Cross site frame"} {
		f := frames[name]
		in, ok := findNode(f.Children, "textbox", "Frame input")
		if !ok {
			t.Fatalf("iframe %q has no input: %+v", name, f.Children)
		}
		btn, _ := findNode(f.Children, "button", "Frame button")
		for _, req := range []page.ActRequest{
			{Action: page.ActionFill, NodeID: in.NodeID, Value: "hi " + name},
			{Action: page.ActionClick, NodeID: btn.NodeID},
		} {
			res, err := s.Act(ctx, req)
			if err != nil {
				t.Fatalf("%s in %q: %v", req.Action, name, err)
			}
			if res.Navigated || res.EpochID != snap.EpochID {
				t.Fatalf("%s in %q: %+v", req.Action, name, res)
			}
			seen = append(seen, res)
		}
		// The frame's own text shows the click.
		res, err := s.QueryNodes(ctx, page.QueryRequest{Query: page.Query{Text: "clicked hi " + name, Exact: true}})
		if err != nil || len(res.Nodes) != 1 {
			sub, _ := s.Observe(ctx, page.ObserveRequest{Within: f.NodeID})
			t.Fatalf("click in %q did not land: %+v %v; %+v", name, res, err, sub)
		}
		// within an iframe node reaches into its document.
		res, err = s.QueryNodes(ctx, page.QueryRequest{Query: page.Query{Role: "button", Within: f.NodeID}})
		if err != nil || len(res.Nodes) != 1 || res.Nodes[0].NodeID != btn.NodeID {
			t.Fatalf("within iframe %q: %+v %v", name, res, err)
		}
		sub, err := s.Observe(ctx, page.ObserveRequest{Within: f.NodeID})
		if err != nil || len(sub.Nodes) != 3 || sub.EpochID != snap.EpochID || !strings.HasSuffix(sub.URL, "/frames") {
			t.Fatalf("observe within %q: %+v %v", name, sub, err)
		}
		_, origin, err := s.ClassifyAction(ctx, page.ActRequest{Action: page.ActionClick, NodeID: btn.NodeID})
		if err != nil || origin != origins[i] {
			t.Fatalf("classify in %q: origin %q %v, want %s", name, origin, err, origins[i])
		}
		// extract reads a frame's node in its own document, as the CDP adapter does.
		ex, err := s.Extract(ctx, page.ExtractRequest{Kind: page.ExtractText, NodeID: btn.NodeID})
		if err != nil || ex.EpochID != snap.EpochID || ex.Data != "Frame button" {
			t.Fatalf("extract text of a node in %q: %+v %v", name, ex, err)
		}
		png, err := s.Screenshot(ctx, page.ScreenshotRequest{NodeID: btn.NodeID})
		if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
			t.Fatalf("screenshot of a node in %q: %d bytes, %v", name, len(png), err)
		}
		seen = append(seen, res, sub)
	}
	noRawBiDi(t, seen, ev)
}

// TestPortFrameHandlesGoStaleWithTheirFrame: as on Chromium, a link followed inside a frame
// changes only that frame's document — not a navigation of the tab, its handles stale, the top
// document's handles still good.
func TestPortFrameHandlesGoStaleWithTheirFrame(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	u, origins := frameSite(t)
	s := portSession(t, ctx, &events{}, origins...)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: u}); err != nil {
		t.Fatal(err)
	}
	snap, frames := frameNodes(t, ctx, s)
	top, ok := findNode(snap.Nodes, "button", "Top button")
	if !ok {
		t.Fatalf("no top button: %+v", snap.Nodes)
	}
	link, ok := findNode(frames["Cross site frame"].Children, "link", "Frame link")
	if !ok {
		t.Fatal("no link in the cross-site frame")
	}
	res, err := s.Act(ctx, page.ActRequest{Action: page.ActionClick, NodeID: link.NodeID})
	if err != nil || res.Navigated {
		t.Fatalf("a frame navigation is not a context navigation: %+v %v", res, err)
	}
	waitfor.Until(t, 10*time.Second, "the frame's handle to go stale", func() (bool, string) {
		_, _, err := s.ClassifyAction(ctx, page.ActRequest{Action: page.ActionClick, NodeID: link.NodeID})
		return errors.Is(err, page.ErrStaleNodeHandle), "classify: " + errString(err)
	})
	if _, _, err := s.ClassifyAction(ctx, page.ActRequest{Action: page.ActionClick, NodeID: top.NodeID}); err != nil {
		t.Fatalf("top handle went stale with the frame: %v", err)
	}
	// The frame's new document is in the next snapshot.
	after, err := s.Observe(ctx, page.ObserveRequest{})
	if err != nil || after.EpochID != snap.EpochID {
		t.Fatalf("observe after the frame navigated: %+v %v", after, err)
	}
	waitfor.Until(t, 10*time.Second, "the frame's new document in the snapshot", func() (bool, string) {
		after, err := s.Observe(ctx, page.ObserveRequest{})
		if err != nil {
			t.Fatal(err)
		}
		_, ok := findNode(after.Nodes, "heading", "Thank you")
		return ok, "no heading yet"
	})
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}
