package browser

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFramesAndShadowDOM(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/frames.html")
	snap := b.observe("")
	frames := map[string]Node{}
	for _, n := range snap.Nodes {
		if n.Role == "iframe" {
			frames[n.Name] = n
		}
	}
	for _, name := range []string{"Same origin frame", "Cross origin frame", "Cross site frame"} {
		f, ok := frames[name]
		if !ok {
			t.Fatalf("no iframe %q in %+v", name, snap.Nodes)
		}
		in, ok := find(f.Children, func(n Node) bool { return n.Role == "textbox" && n.Name == "Frame input" })
		if !ok {
			t.Fatalf("iframe %q has no input: %+v", name, f.Children)
		}
		b.act(ActRequest{Action: ActionFill, NodeID: in.NodeID, Value: "hi " + name})
		btn, _ := find(f.Children, func(n Node) bool { return n.Role == "button" })
		b.act(ActRequest{Action: ActionClick, NodeID: btn.NodeID})
		// The frame's own text shows the click.
		res, err := b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Text: "clicked hi " + name, Exact: true}})
		if err != nil || len(res.Nodes) != 1 {
			t.Fatalf("click in %q did not land: %+v %v", name, res, err)
		}
		// within an iframe node reaches into its document.
		res, err = b.s.QueryNodes(tctx(t), QueryRequest{Query: Query{Role: "button", Within: f.NodeID}})
		if err != nil || len(res.Nodes) != 1 || res.Nodes[0].NodeID != btn.NodeID {
			t.Fatalf("within iframe %q: %+v %v", name, res, err)
		}
		sub, err := b.s.Observe(tctx(t), ObserveRequest{Within: f.NodeID})
		if err != nil || len(sub.Nodes) != 3 {
			t.Fatalf("observe within %q: %+v %v", name, sub, err)
		}
	}
	// Visible text covers same-origin frames only.
	txt := b.text("")
	if !strings.Contains(txt, "Child frame same") || strings.Contains(txt, "Child frame site") {
		t.Fatalf("page text %q", txt)
	}

	b.navigate("/shadow.html")
	in := b.query(Query{Label: "Shadow search"})
	b.act(ActRequest{Action: ActionFill, NodeID: in.NodeID, Value: "teapot"})
	b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Shadow go"}})
	b.waitText("searched teapot")
	snap = b.observe("full")
	if _, ok := find(snap.Nodes, func(n Node) bool { return strings.Contains(n.Name, "Slotted hint text") }); !ok {
		t.Fatalf("slotted content missing: %+v", snap.Nodes)
	}
	if _, ok := find(snap.Nodes, func(n Node) bool { return n.Name == "Closed secret" }); ok {
		t.Fatal("a closed shadow root was read")
	}
}

func TestDialogs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/dialogs.html")
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Alert"}})
	if len(res.Dialogs) != 1 || res.Dialogs[0].Type != "alert" || res.Dialogs[0].Message != "Hello alert" || res.Dialogs[0].Accepted {
		t.Fatalf("alert: %+v", res.Dialogs)
	}
	b.waitText("after alert")
	res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Confirm"}})
	if len(res.Dialogs) != 1 || res.Dialogs[0].Type != "confirm" {
		t.Fatalf("confirm: %+v", res.Dialogs)
	}
	b.waitText("cancelled")
	res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Prompt"}})
	if len(res.Dialogs) != 1 || res.Dialogs[0].Type != "prompt" {
		t.Fatalf("prompt: %+v", res.Dialogs)
	}
	b.waitText("no answer")
	b.ev.wait(t, func(e Event) bool { return e.Type == EventDialogHandled && e.Data["dialog_type"] == "prompt" })

	// beforeunload: dismissed during an act (the page stays) ...
	b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Arm leave warning"}})
	b.waitText("armed")
	res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "link", Name: "Leave"}})
	if res.Navigated {
		t.Fatalf("beforeunload was not dismissed: %+v", res)
	}
	if len(res.Dialogs) == 1 && res.Dialogs[0].Type != "beforeunload" {
		t.Fatalf("dialog %+v", res.Dialogs)
	}
	// ... and accepted by an explicit navigate.
	nav, err := b.s.Navigate(tctx(t), NavigateRequest{URL: fx.A + "/thanks.html"})
	if err != nil || !strings.HasSuffix(nav.URL, "/thanks.html") {
		t.Fatalf("navigate away: %+v %v", nav, err)
	}
}

func TestPopups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/popup.html")
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "link", Name: "Open in new tab"}})
	if len(res.NewContexts) != 1 || res.Navigated {
		t.Fatalf("target=_blank: %+v", res)
	}
	popup := res.NewContexts[0]
	ev := b.ev.wait(t, func(e Event) bool { return e.Type == EventContextOpened && e.ContextID == popup })
	if ev.Data["opener"] != b.s.DefaultContext() {
		t.Fatalf("opened event %+v", ev)
	}
	snap, err := b.s.Observe(tctx(t), ObserveRequest{ContextID: popup})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Contexts) != 2 {
		t.Fatalf("contexts %+v", snap.Contexts)
	}
	// The popup loads its page (wait on its document, not a timer).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(snap.URL, "/thanks.html") {
		if time.Now().After(deadline) {
			t.Fatalf("popup url %q", snap.URL)
		}
		snap, err = b.s.Observe(tctx(t), ObserveRequest{ContextID: popup})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := find(snap.Nodes, func(n Node) bool { return n.Role == "heading" && n.Name == "Thank you for your order" }); !ok {
		t.Fatalf("popup snapshot %+v", snap.Nodes)
	}

	res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Open shop window"}})
	if len(res.NewContexts) != 1 {
		t.Fatalf("window.open: %+v", res)
	}
	// A popup to a refused origin opens but loads nothing.
	res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "link", Name: "Open offsite"}})
	if len(res.NewContexts) != 1 {
		t.Fatalf("offsite popup: %+v", res)
	}
	b.ev.wait(t, func(e Event) bool { return e.Type == EventRequestBlocked && e.ContextID == res.NewContexts[0] })
	if n := fx.otherHitCount(); n != 0 {
		t.Fatalf("refused origin got %d requests", n)
	}
}

func TestActionability(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/overlay.html")
	_, err := b.s.Act(tctx(t), ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Covered button"}, Timeout: time.Second})
	var ate *ActionTimeoutError
	if !errors.As(err, &ate) || !strings.Contains(ate.Reason, "covered by another element (div#overlay)") {
		t.Fatalf("covered button: %v", err)
	}
	// A spinner that goes away is waited for.
	b.navigate("/overlay2.html")
	b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Button under spinner"}})
	b.waitText("b2 clicked")

	b.navigate("/slow.html")
	// An element that appears later is waited for (query resolved before acting).
	b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Appeared later"}})
	b.waitText("appeared clicked")
	// A disabled button is waited for until enabled.
	b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Late enabled"}})
	b.waitText("late clicked")
	b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Mover"}})
	b.waitText("mover clicked")

	// fill on a button is refused at once.
	_, err = b.s.Act(tctx(t), ActRequest{Action: ActionFill, Query: &Query{Role: "button", Name: "Mover"}, Value: "x"})
	if !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("fill on a button: %v", err)
	}
	if _, err := b.s.Act(tctx(t), ActRequest{Action: "teleport", Query: &Query{Role: "button"}}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("unknown action: %v", err)
	}
}

func TestKeysHoverFocusScroll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/nav.html")
	in := b.query(Query{Label: "Query"})
	b.act(ActRequest{Action: ActionFill, NodeID: in.NodeID, Value: "tea"})
	effect, _, err := b.s.ClassifyAction(tctx(t), ActRequest{Action: ActionPressKey, NodeID: in.NodeID, Key: "Enter"})
	if err != nil || effect != EffectFormSubmission {
		t.Fatalf("Enter in a form field: %q %v", effect, err)
	}
	res := b.act(ActRequest{Action: ActionPressKey, NodeID: in.NodeID, Key: "Enter"})
	if !res.Navigated || !strings.Contains(res.URL, "/thanks.html?q=tea") {
		t.Fatalf("Enter: %+v", res)
	}
	b.navigate("/shop.html")
	b.act(ActRequest{Action: ActionFocus, Query: &Query{Label: "Full name"}})
	b.act(ActRequest{Action: ActionPressKey, Key: "a"})
	b.act(ActRequest{Action: ActionPressKey, Key: "Shift+b"})
	n := b.query(Query{Label: "Full name"})
	if n.Value != "aB" || n.Focused == nil || !*n.Focused {
		t.Fatalf("typed %+v", n)
	}
	b.act(ActRequest{Action: ActionPressKey, Key: "Tab"})
	if n := b.query(Query{Label: "Email address"}); n.Focused == nil {
		t.Fatalf("Tab did not move focus: %+v", n)
	}
	b.act(ActRequest{Action: ActionClear, Query: &Query{Label: "Full name"}})
	if n := b.query(Query{Label: "Full name"}); n.Value != "" {
		t.Fatalf("clear: %+v", n)
	}
	b.act(ActRequest{Action: ActionHover, Query: &Query{Role: "button", Name: "Place order"}})
	b.act(ActRequest{Action: ActionScrollIntoView, Query: &Query{Role: "contentinfo"}})
	b.act(ActRequest{Action: ActionUncheck, Query: &Query{Role: "checkbox", Name: "Send me the newsletter"}})
	if _, err := b.s.Act(tctx(t), ActRequest{Action: ActionPressKey, Key: "Hyper+x"}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("bad key: %v", err)
	}
}

func TestUploadAndDownload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/upload.html")
	in := b.query(Query{Label: "Attachment"})
	effect, _, err := b.s.ClassifyAction(tctx(t), ActRequest{Action: ActionUploadFile, NodeID: in.NodeID, Files: []File{{Name: "a.txt"}}})
	if err != nil || effect != EffectFileUpload {
		t.Fatalf("classify upload: %q %v", effect, err)
	}
	res := b.act(ActRequest{Action: ActionUploadFile, NodeID: in.NodeID, Files: []File{
		{Name: "notes.txt", MediaType: "text/plain", Content: []byte("hello upload")},
		{Name: "../../etc/evil.txt", Content: []byte("x")},
	}})
	if res.Effect != EffectFileUpload {
		t.Fatalf("upload result %+v", res)
	}
	b.waitText("notes.txt:12:hello upload|evil.txt:1:x")

	b.navigate("/download.html")
	res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "link", Name: "Download report"}})
	if len(res.Downloads) != 1 || res.Navigated {
		t.Fatalf("download: %+v", res)
	}
	d := res.Downloads[0]
	if d.Name != "report.csv" || string(d.Content) != "order,total\n1001,31.50\n" || d.Size != int64(len(d.Content)) || !strings.HasPrefix(d.MediaType, "text/csv") {
		t.Fatalf("download %+v", d)
	}
	res = b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "link", Name: "Download big file"}})
	if len(res.Downloads) != 1 || res.Downloads[0].Content != nil || res.Downloads[0].Reason == "" {
		t.Fatalf("big download: %+v", res.Downloads)
	}
	b.ev.wait(t, func(e Event) bool { return e.Type == EventDownloadCompleted && e.Data["name"] == "big.bin" })
}

func TestExtract(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/table.html")
	ex := func(req ExtractRequest) any {
		t.Helper()
		res, err := b.s.Extract(tctx(t), req)
		if err != nil {
			t.Fatalf("extract %+v: %v", req, err)
		}
		return res.Data
	}
	tab := ex(ExtractRequest{Kind: ExtractTable, Query: &Query{TestID: "orders"}}).(*Table)
	if strings.Join(tab.Columns, "|") != "Order|Customer|Total" || len(tab.Rows) != 3 || tab.Rows[0][1] != "Ada Lovelace" || tab.Rows[2][0] != "Subtotal" || tab.Rows[2][2] != "$43.50" {
		t.Fatalf("orders table %+v", tab)
	}
	snap := b.observe("full")
	var tables []Node
	for _, n := range snap.Nodes {
		if n.Role == "table" {
			tables = append(tables, n)
		}
	}
	if len(tables) != 3 {
		t.Fatalf("tables %+v", snap.Nodes)
	}
	plain := ex(ExtractRequest{Kind: ExtractTable, NodeID: tables[1].NodeID}).(*Table)
	if strings.Join(plain.Columns, "|") != "column_1|column_2" || len(plain.Rows) != 2 {
		t.Fatalf("plain table %+v", plain)
	}
	thf := ex(ExtractRequest{Kind: ExtractTable, NodeID: tables[2].NodeID}).(*Table)
	if strings.Join(thf.Columns, "|") != "Name|Qty" || len(thf.Rows) != 1 {
		t.Fatalf("th-first table %+v", thf)
	}
	links := ex(ExtractRequest{Kind: ExtractLinks}).([]Link)
	if len(links) != 2 || links[0].Text != "Shop" || !strings.HasSuffix(links[0].URL, "/shop.html?ref=orders") || !strings.HasPrefix(links[0].NodeID, "nd_") {
		t.Fatalf("links %+v", links)
	}
	attrs := ex(ExtractRequest{Kind: ExtractAttributes, Query: &Query{TestID: "orders"}}).(map[string]string)
	if attrs["id"] != "orders" {
		t.Fatalf("attributes %+v", attrs)
	}

	b.navigate("/shop.html")
	b.act(ActRequest{Action: ActionFill, Query: &Query{Label: "Full name"}, Value: "Ada"})
	b.act(ActRequest{Action: ActionCheck, Query: &Query{Label: "I accept the terms"}})
	schema := json.RawMessage(`{"type":"object","required":["name","total","terms"],"properties":{
		"name":{"type":"string","minLength":1},"total":{"type":"number"},"terms":{"type":"boolean"},
		"prices":{"type":"array","items":{"type":"number"}}}}`)
	data := ex(ExtractRequest{Kind: ExtractSchema, Schema: schema, Fields: map[string]Query{
		"name": {Label: "Full name"}, "total": {Text: "$31.50", Exact: true}, "terms": {Label: "I accept the terms"},
		"prices": {Text: "$", Exact: false},
	}}).(map[string]any)
	if data["name"] != "Ada" || data["total"] != 31.5 || data["terms"] != true {
		t.Fatalf("schema data %#v", data)
	}
	_, err := b.s.Extract(tctx(t), ExtractRequest{Kind: ExtractSchema, Schema: json.RawMessage(`{"type":"object","required":["missing"]}`), Fields: map[string]Query{"missing": {Label: "No such label"}}})
	var se *SchemaError
	if !errors.As(err, &se) || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("invalid data: %v", err)
	}
	_, err = b.s.Extract(tctx(t), ExtractRequest{Kind: ExtractSchema, Schema: json.RawMessage(`{"$ref":"file:///etc/passwd"}`), Fields: map[string]Query{"x": {Label: "Full name"}}})
	if !errors.As(err, &se) {
		t.Fatalf("schema with a file reference: %v", err)
	}
}
