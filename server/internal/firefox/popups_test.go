package firefox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/waitfor"
)

// TestPortPopups: as on Chromium (TestPopups), a tab the page opens — a target=_blank link,
// window.open — is a context of the session: in the act's new_contexts, a context.opened event
// naming its opener, every snapshot's contexts; it is observed and acted on by its ctx_ id or by
// its nodes' handles; a popup to a refused origin opens but loads nothing; a popup the page
// closes is a context.closed event and its id then refused; no BiDi id reaches the answers.
func TestPortPopups(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := newSite(t)
	srv := servePage(t, `<!doctype html><title>Popups</title>
<a href="`+st.shop.URL+`/thanks" target="_blank">Open in new tab</a>
<button onclick="window.w = window.open('`+st.shop.URL+`/checkout', 'shopwin')">Open shop window</button>
<button onclick="window.w.close()">Close shop window</button>
<a href="`+st.other.URL+`/thanks" target="_blank">Open offsite</a>
<iframe title="Opener frame" srcdoc="<button onclick=&quot;window.open('`+st.shop.URL+`/thanks')&quot;>Open from frame</button>"></iframe>`)
	ev := &events{}
	s := portSession(t, ctx, ev, srv.URL, st.shop.URL)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	var seen []any
	act := func(req page.ActRequest) *page.ActResult {
		t.Helper()
		res, err := s.Act(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.Action, err)
		}
		seen = append(seen, res)
		return res
	}
	opened := func(id string) page.Event {
		t.Helper()
		var got page.Event
		waitfor.True(t, 10*time.Second, "context.opened of "+id, func() bool {
			for _, e := range ev.all() {
				if e.Type == page.EventContextOpened && e.ContextID == id {
					got = e
					return true
				}
			}
			return false
		})
		return got
	}

	res := act(page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "link", Name: "Open in new tab"}})
	if len(res.NewContexts) != 1 || res.Navigated || !strings.HasPrefix(res.NewContexts[0], "ctx_") {
		t.Fatalf("target=_blank: %+v", res)
	}
	popup := res.NewContexts[0]
	if e := opened(popup); e.Data["opener"] != s.DefaultContext() {
		t.Fatalf("opened event %+v", e)
	}
	var snap *page.Snapshot
	waitfor.Until(t, 10*time.Second, "the popup's page", func() (bool, string) {
		var err error
		if snap, err = s.Observe(ctx, page.ObserveRequest{ContextID: popup}); err != nil {
			t.Fatal(err)
		}
		return strings.HasSuffix(snap.URL, "/thanks"), snap.URL
	})
	seen = append(seen, snap)
	if snap.ContextID != popup || len(snap.Contexts) != 2 || snap.Contexts[1].ContextID != popup || snap.Contexts[1].Opener != s.DefaultContext() {
		t.Fatalf("popup snapshot: %+v", snap)
	}
	if _, ok := findNode(snap.Nodes, "heading", "Thank you"); !ok {
		t.Fatalf("popup snapshot %+v", snap.Nodes)
	}
	if !waitfor.Holds(t, 0, func() bool {
		for _, e := range ev.all() {
			if e.Type == page.EventNavigationCommitted && e.ContextID == popup && e.EpochID == snap.EpochID {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no navigation.committed of the popup's epoch %s: %+v", snap.EpochID, ev.all())
	}

	// A frame's window.open: the tab holding the frame (here the popup, showing the page with
	// the frame) is the opener.
	if _, err := s.Navigate(ctx, page.NavigateRequest{ContextID: popup, URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the frame's button", func() (bool, string) {
		q, err := s.QueryNodes(ctx, page.QueryRequest{ContextID: popup, Query: page.Query{Role: "button", Name: "Open from frame"}})
		if err != nil {
			t.Fatal(err)
		}
		return len(q.Nodes) == 1, "no button yet"
	})
	fromFrame := act(page.ActRequest{Action: page.ActionClick, ContextID: popup, Query: &page.Query{Role: "button", Name: "Open from frame"}})
	if len(fromFrame.NewContexts) != 1 || fromFrame.ContextID != popup {
		t.Fatalf("window.open in a frame of the popup: %+v", fromFrame)
	}
	if e := opened(fromFrame.NewContexts[0]); e.Data["opener"] != popup {
		t.Fatalf("opened event of a frame's popup %+v, want the popup %s as its opener", e, popup)
	}

	// window.open: a tab acted on by its nodes' handles alone, and navigated by its id.
	res = act(page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "button", Name: "Open shop window"}})
	if len(res.NewContexts) != 1 || res.NewContexts[0] == popup {
		t.Fatalf("window.open: %+v", res)
	}
	shop := res.NewContexts[0]
	opened(shop)
	var q *page.QueryResult
	waitfor.Until(t, 10*time.Second, "the shop window's form", func() (bool, string) {
		var err error
		q, err = s.QueryNodes(ctx, page.QueryRequest{ContextID: shop, Query: page.Query{Label: "Full name"}})
		if err != nil {
			t.Fatal(err)
		}
		return len(q.Nodes) == 1, "no field yet"
	})
	act(page.ActRequest{Action: page.ActionFill, NodeID: q.Nodes[0].NodeID, Value: "Grace Hopper"})
	click := act(page.ActRequest{Action: page.ActionClick, ContextID: shop, Query: &page.Query{Role: "button", Name: "Place order"}})
	if click.ContextID != shop || !click.Navigated || st.orders.Load() != 1 || *st.buyer.Load() != "Grace Hopper" {
		t.Fatalf("order in the shop window: %+v (orders %d)", click, st.orders.Load())
	}
	if _, err := s.Act(ctx, page.ActRequest{Action: page.ActionClick, ContextID: popup, NodeID: q.Nodes[0].NodeID}); err == nil {
		t.Fatal("a node of one tab was acted on in another")
	}
	nav, err := s.Navigate(ctx, page.NavigateRequest{ContextID: popup, URL: st.shop.URL + "/checkout"})
	if err != nil || nav.ContextID != popup {
		t.Fatalf("navigate the popup: %+v %v", nav, err)
	}
	if _, err := s.Navigate(ctx, page.NavigateRequest{ContextID: popup, URL: st.other.URL + "/"}); !errors.As(err, new(*page.OriginNotAllowedError)) {
		t.Fatalf("navigate the popup elsewhere: %v", err)
	}

	// The page closes the shop window.
	act(page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "button", Name: "Close shop window"}})
	waitfor.True(t, 10*time.Second, "context.closed of the shop window", func() bool {
		for _, e := range ev.all() {
			if e.Type == page.EventContextClosed && e.ContextID == shop {
				return true
			}
		}
		return false
	})
	if _, err := s.Observe(ctx, page.ObserveRequest{ContextID: shop}); !errors.Is(err, page.ErrNoSuchContext) {
		t.Fatalf("observe a closed tab: %v", err)
	}

	// A tab nobody read since it loaded shows its URL in the contexts.
	waitfor.Until(t, 10*time.Second, "the frame's popup's URL in the contexts", func() (bool, string) {
		top, err := s.Observe(ctx, page.ObserveRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range top.Contexts {
			if c.ContextID == fromFrame.NewContexts[0] {
				return strings.HasSuffix(c.URL, "/thanks") && c.Opener == popup, c.URL
			}
		}
		return false, "not in the contexts"
	})

	// A popup to a refused origin opens but loads nothing.
	res = act(page.ActRequest{Action: page.ActionClick, Query: &page.Query{Role: "link", Name: "Open offsite"}})
	if len(res.NewContexts) != 1 {
		t.Fatalf("offsite popup: %+v", res)
	}
	waitfor.True(t, 10*time.Second, "the offsite popup's request refused", func() bool {
		for _, e := range ev.all() {
			if e.Type == page.EventRequestBlocked && strings.HasPrefix(e.URL, st.other.URL) {
				return true
			}
		}
		return false
	})
	if n := st.otherHits.Load(); n != 0 {
		t.Fatalf("refused origin got %d requests", n)
	}
	top, err := s.Observe(ctx, page.ObserveRequest{})
	if err != nil || len(top.Contexts) != 4 || top.ContextID != s.DefaultContext() {
		t.Fatalf("contexts after the shop window closed: %+v %v", top, err)
	}
	noRawBiDi(t, append(seen, top), ev)
}
