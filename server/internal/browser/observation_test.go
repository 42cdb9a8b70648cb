package browser

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/originweave/bap/server/internal/observation"
	"github.com/originweave/bap/server/internal/page"
)

// TestObservationKeeperOverCDP runs the engine-neutral observation keeper over the CDP adapter on
// the heavy page: max_bytes parts under the cap merge back into the whole observation, a delta
// after one click holds the clicked button and is at most 5% of the whole, a cursor of an earlier
// epoch is refused through the adapter's ContextEpoch, and the adapter itself refuses the budget
// fields it would not honour.
func TestObservationKeeperOverCDP(t *testing.T) {
	b := setup(t)
	k := observation.NewKeeper()
	var _ observation.EpochReader = b.s
	b.navigate("/big.html")
	whole, err := k.Observe(tctx(t), b.s, ObserveRequest{})
	if err != nil || whole.ObservationID == "" || whole.ApproxTokens == 0 || whole.Continuation != nil {
		t.Fatalf("whole observe: %v %+v", err, whole)
	}
	full, _ := json.Marshal(whole)

	const maxBytes = 16 << 10
	var merged []Node
	req := ObserveRequest{MaxBytes: maxBytes}
	var cursor string
	parts := 0
	for {
		snap, err := k.Observe(tctx(t), b.s, req)
		if err != nil {
			t.Fatalf("part %d: %v", parts+1, err)
		}
		parts++
		if body, _ := json.Marshal(snap); len(body) > maxBytes {
			t.Fatalf("part %d: %d bytes over %d", parts, len(body), maxBytes)
		}
		if merged, err = observation.Merge(merged, snap.Nodes); err != nil {
			t.Fatalf("part %d: %v", parts, err)
		}
		if snap.Continuation == nil {
			break
		}
		cursor = snap.Continuation.Cursor
		req = ObserveRequest{Cursor: cursor}
	}
	if parts < 3 || !reflect.DeepEqual(merged, whole.Nodes) {
		t.Fatalf("%d parts do not merge into the whole observation", parts)
	}

	btn, ok := find(whole.Nodes, func(n Node) bool { return n.Role == "button" && n.Name == "Add to cart" })
	if !ok {
		t.Fatal("no Add to cart button")
	}
	if _, err := b.s.Act(tctx(t), ActRequest{Action: ActionClick, NodeID: btn.NodeID}); err != nil {
		t.Fatal(err)
	}
	delta, err := k.Observe(tctx(t), b.s, ObserveRequest{Since: whole.ObservationID})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := json.Marshal(delta)
	if len(d)*20 > len(full) {
		t.Fatalf("the delta after one click is %d bytes, the whole observe %d (more than 5%%)", len(d), len(full))
	}
	if n, ok := find(delta.Nodes, func(n Node) bool { return n.NodeID == btn.NodeID }); !ok || n.Change != observation.ChangeChanged {
		t.Fatalf("the clicked button in the delta: %+v (found %v); delta %s", n, ok, d)
	}
	t.Logf("big.html: whole %d bytes, %d parts under %d, delta after a click %d bytes", len(full), parts, maxBytes, len(d))

	cut, err := k.Observe(tctx(t), b.s, ObserveRequest{MaxBytes: maxBytes})
	if err != nil || cut.Continuation == nil {
		t.Fatalf("cut observe: %v %+v", err, cut)
	}
	b.navigate("/shop.html")
	for _, req := range []ObserveRequest{{Since: whole.ObservationID}, {Cursor: cut.Continuation.Cursor}} {
		if _, err := k.Observe(tctx(t), b.s, req); !errors.Is(err, page.ErrObservationStale) {
			t.Fatalf("%+v across epochs: %v, want ErrObservationStale", req, err)
		}
	}
	for _, req := range []ObserveRequest{{MaxBytes: maxBytes}, {Since: whole.ObservationID}, {Cursor: cursor}} {
		if _, err := b.s.Observe(tctx(t), req); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("the adapter itself with %+v: %v, want ErrInvalidRequest", req, err)
		}
	}
}
