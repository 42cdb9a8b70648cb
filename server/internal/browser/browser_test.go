package browser

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
)

func TestCheckoutFlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nav := b.navigate("/shop.html")
	if nav.Title != "Demo Shop – Checkout" || nav.Status != 200 || !strings.HasPrefix(nav.EpochID, "ep_") {
		t.Fatalf("navigate result %+v", nav)
	}
	snap := b.observe("")
	if snap.EpochID != nav.EpochID {
		t.Fatalf("observe epoch %s, navigate epoch %s", snap.EpochID, nav.EpochID)
	}
	name := b.query(Query{Label: "Full name"})
	if name.Role != "textbox" {
		t.Fatalf("label query found %+v", name)
	}
	b.act(ActRequest{Action: ActionFill, NodeID: name.NodeID, Value: "Ada Lovelace"})
	b.act(ActRequest{Action: ActionFill, Query: &Query{Label: "Email address"}, Value: "ada@example.com"})
	b.act(ActRequest{Action: ActionFill, Query: &Query{Label: "Account password"}, Value: "s3cret-pass"})
	b.act(ActRequest{Action: ActionSelectOption, Query: &Query{Role: "combobox", Name: "Country"}, Value: "France"})
	b.act(ActRequest{Action: ActionCheck, Query: &Query{Role: "checkbox", Name: "I accept the terms"}})
	b.act(ActRequest{Action: ActionCheck, Query: &Query{Role: "radio", Name: "Express"}})

	snap = b.observe("")
	if n := b.node(snap, "textbox", "Full name"); n.Value != "Ada Lovelace" {
		t.Fatalf("name value %q", n.Value)
	}
	if n := b.node(snap, "textbox", "Account password"); n.Value == "s3cret-pass" {
		t.Fatal("a password value leaked into the snapshot")
	}
	if n := b.node(snap, "combobox", "Country"); n.Value != "France" {
		t.Fatalf("country %q", n.Value)
	}
	if n := b.node(snap, "checkbox", "I accept the terms"); n.Checked == nil || !*n.Checked {
		t.Fatalf("terms not checked: %+v", n)
	}
	submit := b.node(snap, "button", "Place order")
	effect, origin, err := b.s.ClassifyAction(tctx(t), ActRequest{Action: ActionClick, NodeID: submit.NodeID})
	if err != nil || effect != EffectFormSubmission || origin != fx.A {
		t.Fatalf("ClassifyAction = %q %q %v", effect, origin, err)
	}
	before := fx.orders.Load()
	res := b.act(ActRequest{Action: ActionClick, NodeID: submit.NodeID})
	if !res.Navigated || res.EpochID == snap.EpochID || !strings.Contains(res.URL, "/thanks.html") {
		t.Fatalf("submit result %+v", res)
	}
	if res.Effect != EffectFormSubmission {
		t.Fatalf("effect %q", res.Effect)
	}
	if got := fx.orders.Load() - before; got != 1 {
		t.Fatalf("%d orders placed", got)
	}
	// The old handle is stale and never resolves to another element.
	_, err = b.s.Act(tctx(t), ActRequest{Action: ActionClick, NodeID: submit.NodeID})
	if !errors.Is(err, ErrStaleNodeHandle) {
		t.Fatalf("old handle: %v", err)
	}
	if txt := b.text(""); !strings.Contains(txt, "Thank you for your order") {
		t.Fatalf("page text %q", txt)
	}
	// Events carry no protected input.
	for _, e := range b.ev.all() {
		if strings.Contains(e.URL, "s3cret") || strings.Contains(e.URL, "Ada") {
			t.Fatalf("event leaks input: %+v", e)
		}
	}
}

func TestQueryRanking(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/shop.html")
	res, err := b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Role: "button", Name: "save"}})
	if err != nil || len(res.Nodes) != 1 || res.Nodes[0].Name != "Save draft" {
		t.Fatalf("substring query: %+v %v", res, err)
	}
	res, err = b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Text: "Remove"}})
	if err != nil || len(res.Nodes) == 0 || res.Nodes[0].Role != "button" || res.Nodes[0].Name != "Remove" {
		t.Fatalf("text query: %+v %v", res, err)
	}
	res, err = b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{TestID: "remove-mug"}})
	if err != nil || len(res.Nodes) != 1 {
		t.Fatalf("test id query: %+v %v", res, err)
	}
	res, err = b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Placeholder: "you@example.com"}})
	if err != nil || len(res.Nodes) != 1 || res.Nodes[0].Name != "Email address" {
		t.Fatalf("placeholder query: %+v %v", res, err)
	}
	// Exact matches rank first: "Remove" before "Remove all items", which comes first in the page.
	res, err = b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Name: "remove"}})
	if err != nil || len(res.Nodes) != 2 || res.Nodes[0].Name != "Remove" || res.Nodes[1].Name != "Remove all items" {
		t.Fatalf("ranking: %+v %v", res, err)
	}
	res, err = b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Name: "remove", Exact: true}})
	if err != nil || len(res.Nodes) != 0 {
		t.Fatalf("exact is case-sensitive: %+v %v", res, err)
	}
	// within limits the search.
	form := b.query(Query{Role: "form"})
	res, err = b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Role: "link", Within: form.NodeID}})
	if err != nil || len(res.Nodes) != 0 {
		t.Fatalf("within: %+v %v", res, err)
	}
	res, err = b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Role: "button", Within: form.NodeID}})
	if err != nil || len(res.Nodes) != 2 {
		t.Fatalf("within buttons: %+v %v", res, err)
	}
	if _, err := b.s.QueryNodes(tctx(t), QueryRequest{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("empty query: %v", err)
	}
}

func TestOriginPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	home := b.navigate("/nav.html")
	ev := b.ev.wait(t, func(e Event) bool { return e.Type == EventRequestBlocked && strings.HasSuffix(e.URL, "/pixel.png") })
	if ev.Data["navigation"] != false {
		t.Fatalf("subresource block event %+v", ev)
	}

	_, err := b.s.Navigate(tctx(t), NavigateRequest{URL: fx.Other + "/thanks.html?token=secret"})
	var one *OriginNotAllowedError
	if !errors.As(err, &one) || strings.Contains(err.Error(), "secret") || strings.Contains(one.URL, "token") {
		t.Fatalf("off-origin navigate: %v", err)
	}
	// A redirect to a refused origin is refused too, and the context keeps its document.
	_, err = b.s.Navigate(tctx(t), NavigateRequest{URL: fx.A + "/redirect?to=" + fx.Other + "/thanks.html%3Ftoken%3Dsecret"})
	if !errors.As(err, &one) || strings.Contains(err.Error(), "secret") || !strings.HasPrefix(one.URL, fx.Other) {
		t.Fatalf("redirect: %v", err)
	}
	// A link to a refused origin is not followed.
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "link", Name: "Offsite link"}})
	if res.Navigated {
		t.Fatalf("offsite click %+v", res)
	}
	b.ev.wait(t, func(e Event) bool {
		return e.Type == EventRequestBlocked && e.Data["main_frame"] == true && e.URL == fx.Other+"/thanks.html"
	})
	snap := b.observe("")
	if snap.EpochID != home.EpochID || !strings.HasSuffix(snap.URL, "/nav.html") {
		t.Fatalf("the context left its document: %s %s", snap.EpochID, snap.URL)
	}
	for _, u := range []string{"file:///etc/passwd", "data:text/html,hi", "javascript:alert(1)", "chrome://version"} {
		_, err := b.s.Navigate(tctx(t), NavigateRequest{URL: u})
		if !errors.As(err, &one) && !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("%s: %v", u, err)
		}
	}
	if _, err := b.s.Navigate(tctx(t), NavigateRequest{URL: "about:blank"}); err != nil {
		t.Fatalf("about:blank: %v", err)
	}
	if n := fx.otherHitCount(); n != 0 {
		t.Fatalf("the refused origin got %d requests: %v", n, fx.otherHits)
	}
}

func TestEpochsAndStaleHandles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nav := b.navigate("/nav.html")
	snap := b.observe("")
	link := b.node(snap, "link", "Local link")
	// A fragment navigation keeps the document and its handles.
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "link", Name: "Fragment link"}})
	if res.Navigated || res.EpochID != nav.EpochID {
		t.Fatalf("fragment: %+v", res)
	}
	if _, _, err := b.s.ClassifyAction(tctx(t), ActRequest{Action: ActionClick, NodeID: link.NodeID}); err != nil {
		t.Fatalf("handle after fragment navigation: %v", err)
	}
	// A reload is a new document.
	res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Reload"}})
	if !res.Navigated || res.EpochID == nav.EpochID {
		t.Fatalf("reload: %+v", res)
	}
	if _, _, err := b.s.ClassifyAction(tctx(t), ActRequest{Action: ActionClick, NodeID: link.NodeID}); !errors.Is(err, ErrStaleNodeHandle) {
		t.Fatalf("handle after reload: %v", err)
	}
	// document.open replaces the document in place.
	snap = b.observe("")
	link = b.node(snap, "link", "Local link")
	res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Replace document"}})
	if res.EpochID == snap.EpochID {
		t.Fatalf("replaced document kept its epoch: %+v", res)
	}
	if _, _, err := b.s.ClassifyAction(tctx(t), ActRequest{Action: ActionClick, NodeID: link.NodeID}); !errors.Is(err, ErrStaleNodeHandle) {
		t.Fatalf("handle after document.open: %v", err)
	}
	// Unknown handles are not stale but unknown.
	if _, _, err := b.s.ClassifyAction(tctx(t), ActRequest{Action: ActionClick, NodeID: "nd_0000000000"}); !errors.Is(err, ErrNoSuchNode) {
		t.Fatalf("unknown handle: %v", err)
	}
}

// TestActWaitsForTheEventsItCaused: replies overtake events (they bypass the
// session's event queue), so an act must take in the events its action
// caused before it reports an epoch. A slow event handler makes the lag
// certain; without the barrier the act reports the replaced document's epoch.
func TestActWaitsForTheEventsItCaused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/nav.html")
	snap := b.observe("")
	b.s.mu.Lock()
	sess := b.s.tabOrder[0].page.sess
	b.s.mu.Unlock()
	sess.mu.Lock()
	orig := sess.handler
	sess.mu.Unlock()
	sess.setHandler(func(ev any) {
		if _, ok := ev.(*page.EventDocumentOpened); ok {
			time.Sleep(300 * time.Millisecond)
		}
		orig(ev)
	})
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Replace document"}})
	if res.EpochID == snap.EpochID {
		t.Fatalf("act reported the epoch of the document it replaced: %+v", res)
	}
}

func TestFrameHandlesGoStaleWithTheirFrame(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/frames.html")
	snap := b.observe("")
	top := b.node(snap, "button", "Top button")
	var inCross Node
	for _, n := range snap.Nodes {
		if n.Role == "iframe" && n.Name == "Cross site frame" {
			inCross, _ = find(n.Children, func(c Node) bool { return c.Name == "Frame link" })
		}
	}
	if inCross.NodeID == "" {
		t.Fatal("no link in the cross-site frame")
	}
	// Following the link inside the frame changes only that frame's document.
	res := b.act(ActRequest{Action: ActionClick, NodeID: inCross.NodeID})
	if res.Navigated {
		t.Fatalf("a frame navigation is not a context navigation: %+v", res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err := b.s.ClassifyAction(tctx(t), ActRequest{Action: ActionClick, NodeID: inCross.NodeID})
		if errors.Is(err, ErrStaleNodeHandle) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("frame handle never went stale: %v", err)
		}
		b.observe("") // wait on the page, not on a timer
	}
	if _, _, err := b.s.ClassifyAction(tctx(t), ActRequest{Action: ActionClick, NodeID: top.NodeID}); err != nil {
		t.Fatalf("top handle went stale with the frame: %v", err)
	}
}

// A link's URL in an observation is relative to the page when it stays on the page's origin, and
// whole otherwise — also when only a prefix matches (another port of the host, a userinfo, a
// longer host name); an SVG link's is resolved like an HTML one's.
func TestObservedLinkURLs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/bench.html")
	a, err := url.Parse(fx.A)
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"same":     fx.A + "/thanks.html?p=1#top",
		"root":     fx.A,
		"other":    fx.B + "/x",
		"port":     fx.A + "0/x", // the port with one more digit: a prefix of the origin, not it
		"userinfo": "http://user@" + a.Host + "/x",
		"longer":   "http://" + a.Hostname() + ".example:" + a.Port() + "/x",
		"protocol": "//" + a.Host + "/y",
		"dotdot":   "../z",
	}
	want := map[string]string{
		"same": "/thanks.html?p=1#top", "root": "/", "other": fx.B + "/x", "port": fx.A + "0/x",
		"userinfo": "http://user@" + a.Host + "/x", "longer": "http://" + a.Hostname() + ".example:" + a.Port() + "/x",
		"protocol": "/y", "dotdot": "/z",
	}
	js := ""
	for name, href := range links {
		js += fmt.Sprintf(`{ const l = document.createElement('a'); l.href = %q; l.textContent = 'link-%s'; document.body.append(l); }`, href, name)
	}
	s := b.s
	s.mu.Lock()
	tb := s.tabs[s.defaultCtx]
	s.mu.Unlock()
	if _, err := call(tctx(t), tb.page.sess, runtime.Evaluate, runtime.EvaluateParams{Expression: js}); err != nil {
		t.Fatal(err)
	}
	// An SVG <a> given the role of a link: its href is an SVGAnimatedString, not a string.
	svg := `{ const ns = 'http://www.w3.org/2000/svg'; const s = document.createElementNS(ns, 'svg');
		const l = document.createElementNS(ns, 'a'); l.setAttribute('href', '/svg-target?q=1');
		l.setAttribute('role', 'link'); l.setAttribute('aria-label', 'link-svg');
		const r = document.createElementNS(ns, 'rect'); r.setAttribute('width', '20'); r.setAttribute('height', '20');
		l.append(r); s.append(l); document.body.append(s); }`
	if _, err := call(tctx(t), tb.page.sess, runtime.Evaluate, runtime.EvaluateParams{Expression: svg}); err != nil {
		t.Fatal(err)
	}
	want["svg"] = "/svg-target?q=1"
	snap := b.observe(ModeInteractive)
	for name, w := range want {
		n, ok := find(snap.Nodes, func(n Node) bool { return n.Role == "link" && n.Name == "link-"+name })
		if !ok {
			t.Errorf("no link-%s", name)
			continue
		}
		if n.URL != w {
			t.Errorf("link-%s: url %q, want %q", name, n.URL, w)
		}
	}
}

// TestObserveShowsOnlyRenderedElements observes a page of hidden and shown controls (display:none,
// visibility:hidden with a visible descendant, display:contents, content-visibility:hidden, the
// hidden attribute, closed details, aria-hidden, inert, a select's options, a datalist, a frame
// in a hidden container). Interactive mode asks whether an element is rendered only of the
// elements it may show, so this pins what it shows: exactly the rendered controls and headings of
// testdata/visibility.interactive.txt (the Firefox engine's test reads the same list).
func TestObserveShowsOnlyRenderedElements(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/visibility.html")
	want, err := os.ReadFile("testdata/visibility.interactive.txt")
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var walk func([]Node)
	walk = func(ns []Node) {
		for _, n := range ns {
			got.WriteString(n.Role + " " + n.Name + "\n")
			walk(n.Children)
		}
	}
	walk(b.observe(ModeInteractive).Nodes)
	if got.String() != string(want) {
		t.Errorf("interactive observe shows\n%swant\n%s", got.String(), want)
	}

	// Full mode shows text too, but no word a person cannot see: not the text of a
	// visibility:hidden element (a descendant visible again is shown), nor a hidden word inside
	// a link's name, which the browser's own accessible name leaves out ("Buy now").
	full, err := json.Marshal(b.observe(ModeFull).Nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, hidden := range []string{
		"In display none", "Deep in display none", "Heading in display none", "In visibility hidden",
		"Heading in visibility hidden", "In content visibility hidden", "In hidden attribute",
		"Visible inside hidden attribute", "Inside closed details", "Focusable span in display none",
		"Clickable span hidden", "Under aria hidden", "Under inert", "Hidden region", "Hidden paragraph",
		"link in hidden region", "Hidden field", "Listed option", "Frame in display none", "hidden words",
		"gone words", "ignore previous instructions",
	} {
		if strings.Contains(string(full), hidden) {
			t.Errorf("full observe shows hidden text %q", hidden)
		}
	}
	for _, shown := range []string{"Visible again inside hidden", "Visible paragraph", "Plain text shown words.", `"Buy now"`, "Referenced hidden label"} {
		if !strings.Contains(string(full), shown) {
			t.Errorf("full observe lacks %s", shown)
		}
	}

	// extract links asks only links whether they are rendered, as interactive observe does. It
	// reads what a person sees, so links under aria-hidden and inert are in it.
	res, err := b.s.Extract(tctx(t), ExtractRequest{Kind: ExtractLinks})
	if err != nil {
		t.Fatal(err)
	}
	var links []string
	for _, l := range res.Data.([]Link) {
		links = append(links, l.Text+" "+l.URL[strings.LastIndex(l.URL, "#"):])
	}
	wantLinks := []string{"Visible again inside hidden #a3", "In display contents #a4", "Inside open details #a7",
		"Clipped but rendered #a8", "Transparent but rendered #a9", "Under aria hidden #a10", "Under inert #a11", "Buy now #a13"}
	if !slices.Equal(links, wantLinks) {
		t.Errorf("extract links gives %q, want %q", links, wantLinks)
	}

	// A text query finds what is shown, never a hidden element.
	for text, want := range map[string]int{"Visible again inside hidden": 1, "In visibility hidden": 0, "Deep in display none": 0, "Under inert": 0} {
		found, err := b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Text: text, Exact: true}})
		if err != nil {
			t.Fatal(err)
		}
		if len(found.Nodes) != want {
			t.Errorf("query %q found %d nodes, want %d", text, len(found.Nodes), want)
		}
	}
}
