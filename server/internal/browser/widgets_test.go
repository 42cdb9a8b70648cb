package browser

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Components as libraries build them (widgets.html): each case failed before actions were
// judged on the composed tree and states were read from the browser's accessibility tree.
func TestComponentWidgets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/widgets.html")

	snap := b.observe(ModeInteractive)
	terms := b.node(snap, "checkbox", "Accept the terms")
	if terms.Checked == nil || *terms.Checked {
		t.Fatalf("ElementInternals checkbox: %+v, want checked=false from the accessibility tree", terms)
	}
	b.node(snap, "button", "Save profile")
	b.node(snap, "checkbox", "Newsletter")
	b.node(snap, "radio", "Large")

	cases := []struct {
		name string
		req  ActRequest
		log  string
	}{
		// The hit test at the button's centre returns its host (the text is slotted): not a cover.
		{"slotted button", ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Save profile"}}, "saved;"},
		// Role and state from ElementInternals; the state changes a frame after the click.
		{"internals checkbox", ActRequest{Action: ActionCheck, Query: &Query{Role: "checkbox", Name: "Accept the terms"}}, "terms=true;"},
		// The native input lies under its styled box, inside its label.
		{"styled checkbox", ActRequest{Action: ActionCheck, Query: &Query{Role: "checkbox", Name: "Newsletter"}}, "news=true;"},
		// The radio is clipped away: its label is what a person clicks.
		{"btn-check radio", ActRequest{Action: ActionCheck, Query: &Query{Role: "radio", Name: "Large"}}, "size=l;"},
		// A custom select opens on a click; its option is clicked by name.
		{"custom select", ActRequest{Action: ActionSelectOption, Query: &Query{Role: "combobox", Name: "Country"}, Value: "Japan"}, "country=jp;"},
	}
	want := ""
	for _, c := range cases {
		b.act(c.req)
		want += c.log
		b.waitText(want)
	}
	snap = b.observe(ModeInteractive)
	for _, n := range []Node{b.node(snap, "checkbox", "Accept the terms"), b.node(snap, "checkbox", "Newsletter"), b.node(snap, "radio", "Large")} {
		if n.Checked == nil || !*n.Checked {
			t.Errorf("%s %q after check: %+v", n.Role, n.Name, n)
		}
	}
	// fill on a text field component's host types into the input of its shadow tree.
	b.act(ActRequest{Action: ActionFill, Query: &Query{Role: "textbox", Name: "City"}, Value: "Paris"})
	b.waitText("city=Paris")
	// Unchecking the internals checkbox reads its state from the browser again.
	b.act(ActRequest{Action: ActionUncheck, Query: &Query{Role: "checkbox", Name: "Accept the terms"}})
	b.waitText(want + "terms=false;")
}

// An act whose click submits a form inside an iframe returns after the frame's new document,
// so the site has processed the request by then (it once returned before the request left).
func TestActWaitsForASubframeSubmission(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/frame-form.html")
	before := fx.frameOrders.Load()
	res := b.act(ActRequest{Action: ActionClick, Query: &Query{Role: "button", Name: "Pay now"}})
	if got := fx.frameOrders.Load() - before; got != 1 {
		t.Fatalf("the act returned with %d frame orders processed, want 1 (%+v)", got, res)
	}
	if res.Navigated {
		t.Fatalf("the main frame did not navigate: %+v", res)
	}
}

// A hostile page nests its form's submit button in a checkbox's label, where the click that
// checks the box would land: the click would submit the form (a form_submission) while the
// approval rules judged a checkbox. The button covers the checkbox; nothing is submitted.
func TestCheckThroughALabelNeverClicksItsSubmitButton(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/widgets.html")
	before := fx.giftOrders.Load()
	// The checkbox is found first, without the act's short wait: on a loaded machine the query
	// alone could outlast it, and the act would time out for the wrong reason.
	box := b.query(Query{Role: "checkbox", Name: "Gift wrap"})
	_, err := b.s.Act(tctx(t), ActRequest{Action: ActionCheck, NodeID: box.NodeID, Timeout: 1500 * time.Millisecond})
	var ate *ActionTimeoutError
	if !errors.As(err, &ate) || !strings.Contains(ate.Reason, "covered by another element (button)") {
		t.Fatalf("check through a label holding a submit button: %v, want covered by the button (orders %d)", err, fx.giftOrders.Load()-before)
	}
	if got := fx.giftOrders.Load() - before; got != 0 {
		t.Fatalf("%d orders placed by checking a checkbox", got)
	}
}
