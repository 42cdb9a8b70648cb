package browser

import (
	"errors"
	"strings"
	"testing"
)

// A secret is typed only into a field of a document of one of its origins (issue #17): aimed at
// the same field in a cross-origin iframe it is refused before any input, and the field stays
// empty; where it is typed, observations read the reference, never the value.
func TestSecretFillOnlyOnItsOrigins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.navigate("/frames.html")
	snap := b.observe("")
	inFrame := func(title, role, name string) Node {
		for _, n := range snap.Nodes {
			if n.Role == "iframe" && n.Name == title {
				if c, ok := find(n.Children, func(c Node) bool { return c.Role == role && c.Name == name }); ok {
					return c
				}
			}
		}
		t.Fatalf("no %s %q in frame %q", role, name, title)
		return Node{}
	}
	const canary = "canary-Pw-7f3a9"
	fill := func(nodeID string) (*ActResult, error) {
		return b.s.Act(tctx(t), ActRequest{Action: ActionFill, NodeID: nodeID, Value: canary, SecretRef: "sec_test1",
			SecretOrigins: []string{fx.A}, Timeout: 10e9})
	}
	crossInput := inFrame("Cross origin frame", "textbox", "Frame input")
	_, err := fill(crossInput.NodeID)
	var so *SecretOriginError
	if !errors.As(err, &so) || so.Origin != fx.B {
		t.Fatalf("a secret of %s into a field of %s: %v", fx.A, fx.B, err)
	}
	if got := b.text(crossInput.NodeID); got != "" {
		t.Fatalf("the cross-origin field holds %q after a refused secret fill", got)
	}

	sameInput, sameButton := inFrame("Same origin frame", "textbox", "Frame input"), inFrame("Same origin frame", "button", "Frame button")
	res, err := fill(sameInput.NodeID)
	if err != nil || res.Origin != fx.A {
		t.Fatalf("a secret into a field of its origin: %v %+v", err, res)
	}
	after := b.observe("")
	var seen bool
	var walk func([]Node)
	walk = func(ns []Node) {
		for _, n := range ns {
			if n.NodeID == sameInput.NodeID {
				seen = true
				if n.Value != "[secret sec_test1]" {
					t.Fatalf("the filled field observes as %q, want the reference", n.Value)
				}
			}
			if strings.Contains(n.Value, canary) || strings.Contains(n.Name, canary) {
				t.Fatalf("an observation holds the secret: %+v", n)
			}
			walk(n.Children)
		}
	}
	walk(after.Nodes)
	if !seen {
		t.Fatal("the filled field is not in the observation")
	}
	if got := b.text(sameInput.NodeID); got != "[secret sec_test1]" {
		t.Fatalf("the filled field reads as %q, want the reference", got)
	}
	attrs, err := b.s.Extract(tctx(t), ExtractRequest{Kind: ExtractAttributes, NodeID: sameInput.NodeID})
	if err != nil || attrs.Data.(map[string]string)["value"] != "[secret sec_test1]" {
		t.Fatalf("the filled field's attributes: %+v %v, want the reference as its value", attrs, err)
	}
	b.act(ActRequest{Action: ActionClick, NodeID: sameButton.NodeID})
	b.waitText("clicked " + canary) // the page received the value
	// A secret never fills anything but a text field.
	if _, err := b.s.Act(tctx(t), ActRequest{Action: ActionFill, NodeID: sameButton.NodeID, Value: canary, SecretRef: "sec_test1",
		SecretOrigins: []string{fx.A}, Timeout: 10e9}); err == nil {
		t.Fatal("a secret filled a button")
	}
}
