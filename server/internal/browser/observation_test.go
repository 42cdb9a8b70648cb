package browser

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/originweave/bap/server/internal/page"
)

// handles collects every node handle of a tree.
func handles(ns []Node, into map[string]bool) map[string]bool {
	for _, n := range ns {
		if n.NodeID != "" {
			into[n.NodeID] = true
		}
		handles(n.Children, into)
	}
	return into
}

// TestObserveMaxBytesPages pages the heavy page through max_bytes: every part
// fits, carries the explicit marker and a cursor until the last, and the
// parts together hand out every handle the whole observation has.
func TestObserveMaxBytesPages(t *testing.T) {
	b := setup(t)
	b.navigate("/big.html")
	whole := b.observe(ModeInteractive)
	if whole.ObservationID == "" || whole.ApproxTokens == 0 || whole.Continuation != nil {
		t.Fatalf("whole observe: id %q tokens %d continuation %+v", whole.ObservationID, whole.ApproxTokens, whole.Continuation)
	}
	want := handles(whole.Nodes, map[string]bool{})

	for _, maxBytes := range []int{minObserveBytes, 16 << 10, 64 << 10} {
		got := map[string]bool{}
		req := ObserveRequest{Mode: ModeInteractive, MaxBytes: maxBytes}
		var obsID string
		for part := 1; ; part++ {
			snap, err := b.s.Observe(tctx(t), req)
			if err != nil {
				t.Fatalf("max_bytes %d part %d: %v", maxBytes, part, err)
			}
			body, _ := json.Marshal(snap)
			if len(body) > maxBytes {
				t.Fatalf("max_bytes %d part %d: %d bytes", maxBytes, part, len(body))
			}
			nodes, _ := json.Marshal(snap.Nodes)
			if snap.ApproxTokens != approxTokens(len(nodes)) {
				t.Fatalf("approx_tokens %d for %d bytes of nodes", snap.ApproxTokens, len(nodes))
			}
			if part == 1 {
				obsID = snap.ObservationID
			} else if snap.ObservationID != obsID {
				t.Fatalf("part %d of observation %s says %s", part, obsID, snap.ObservationID)
			}
			handles(snap.Nodes, got)
			if snap.Continuation == nil {
				break
			}
			if snap.Continuation.Part != part || snap.Continuation.RemainingNodes < 1 {
				t.Fatalf("continuation %+v at part %d", snap.Continuation, part)
			}
			req = ObserveRequest{Cursor: snap.Continuation.Cursor}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("max_bytes %d: the parts hand out %d handles, the whole observation %d", maxBytes, len(got), len(want))
		}
	}
}

// TestObserveSince observes, clicks, and asks for what changed: a small delta
// with the clicked button, nothing more when nothing changed, and a stable
// refusal once the document has changed.
func TestObserveSince(t *testing.T) {
	b := setup(t)
	b.navigate("/big.html")
	base := b.observe(ModeInteractive)
	full, _ := json.Marshal(base)
	btn, ok := find(base.Nodes, func(n Node) bool { return n.Role == "button" && n.Name == "Add to cart" })
	if !ok {
		t.Fatal("no Add to cart button")
	}
	if _, err := b.s.Act(tctx(t), ActRequest{Action: ActionClick, NodeID: btn.NodeID}); err != nil {
		t.Fatal(err)
	}
	delta, err := b.s.Observe(tctx(t), ObserveRequest{Mode: ModeInteractive, Since: base.ObservationID})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := json.Marshal(delta)
	if delta.Since != base.ObservationID || delta.ObservationID == base.ObservationID {
		t.Fatalf("delta since %q id %q, base %q", delta.Since, delta.ObservationID, base.ObservationID)
	}
	if len(d)*20 > len(full) {
		t.Fatalf("delta after one click is %d bytes, the full observe %d (more than 5%%)", len(d), len(full))
	}
	if n, ok := find(delta.Nodes, func(n Node) bool { return n.NodeID == btn.NodeID }); !ok || n.Change != ChangeChanged || n.Focused == nil || !*n.Focused {
		t.Fatalf("the clicked button in the delta: %+v (found %v); delta %s", n, ok, d)
	}

	again, err := b.s.Observe(tctx(t), ObserveRequest{Mode: ModeInteractive, Since: delta.ObservationID})
	if err != nil || len(again.Nodes) != 0 {
		t.Fatalf("nothing changed since the delta: %v, %+v", err, again.Nodes)
	}

	// A cursor of this epoch, for after the navigation.
	cut, err := b.s.Observe(tctx(t), ObserveRequest{MaxBytes: minObserveBytes})
	if err != nil || cut.Continuation == nil {
		t.Fatalf("cut observe: %v %+v", err, cut)
	}
	b.navigate("/shop.html")
	for _, req := range []ObserveRequest{{Since: base.ObservationID}, {Cursor: cut.Continuation.Cursor}} {
		if _, err := b.s.Observe(tctx(t), req); !errors.Is(err, page.ErrObservationStale) {
			t.Fatalf("%+v across epochs: %v, want ErrObservationStale", req, err)
		}
	}
	if _, err := b.s.Observe(tctx(t), ObserveRequest{Since: "ob_nevermade00"}); !errors.Is(err, page.ErrNoSuchObservation) {
		t.Fatalf("unknown since: %v", err)
	}
}

// TestObserveCursorSealed refuses a cursor altered in any byte, one of
// another session, and a cursor mixed with a fresh observation's options.
func TestObserveCursorSealed(t *testing.T) {
	b := setup(t)
	other := setup(t)
	b.navigate("/big.html")
	other.navigate("/big.html")
	cut, err := b.s.Observe(tctx(t), ObserveRequest{MaxBytes: minObserveBytes})
	if err != nil || cut.Continuation == nil {
		t.Fatalf("cut observe: %v %+v", err, cut)
	}
	c := cut.Continuation.Cursor
	flipped := []byte(c)
	flipped[len(flipped)/2] ^= 1
	if flipped[len(flipped)/2] == '_' || flipped[len(flipped)/2] == '-' {
		flipped[len(flipped)/2] = 'A'
	}
	for name, tc := range map[string]struct {
		s   *Session
		req ObserveRequest
	}{
		"altered":         {b.s, ObserveRequest{Cursor: string(flipped)}},
		"other session":   {other.s, ObserveRequest{Cursor: c}},
		"with since":      {b.s, ObserveRequest{Cursor: c, Since: cut.ObservationID}},
		"with mode":       {b.s, ObserveRequest{Cursor: c, Mode: ModeFull}},
		"max_bytes small": {b.s, ObserveRequest{Cursor: c, MaxBytes: 100}},
	} {
		if _, err := tc.s.Observe(tctx(t), tc.req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
	if _, err := b.s.Observe(tctx(t), ObserveRequest{Cursor: c}); err != nil {
		t.Fatalf("the untouched cursor: %v", err)
	}
}

func TestDiffNodes(t *testing.T) {
	yes := true
	base := []Node{
		{Role: "heading", Name: "Cart", Level: 1},
		{Role: "list", Children: []Node{
			{NodeID: "nd_a", Role: "button", Name: "A"},
			{NodeID: "nd_b", Role: "button", Name: "B"},
			{Role: "text", Name: "two items"},
		}},
	}
	for _, tc := range []struct {
		name string
		cur  []Node
		want []Node
	}{
		{"same", base, []Node{}},
		{"changed state", []Node{base[0], {Role: "list", Children: []Node{
			{NodeID: "nd_a", Role: "button", Name: "A", Focused: &yes}, base[1].Children[1], base[1].Children[2]}}},
			[]Node{{Role: "list", Children: []Node{{NodeID: "nd_a", Role: "button", Name: "A", Focused: &yes, Change: ChangeChanged}}}}},
		{"added and removed", []Node{base[0], {Role: "list", Children: []Node{
			base[1].Children[0], {NodeID: "nd_c", Role: "button", Name: "C", Children: []Node{{Role: "text", Name: "new"}}}, base[1].Children[2]}}},
			[]Node{{Role: "list", Children: []Node{
				{NodeID: "nd_c", Role: "button", Name: "C", Change: ChangeAdded, Children: []Node{{Role: "text", Name: "new"}}},
				{NodeID: "nd_b", Role: "button", Name: "B", Change: ChangeRemoved}}}}},
		{"text changed", []Node{base[0], {Role: "list", Children: []Node{
			base[1].Children[0], base[1].Children[1], {Role: "text", Name: "three items"}}}},
			[]Node{{Role: "list", Children: []Node{{Role: "text", Name: "three items", Change: ChangeChanged}}}}},
		{"moved", []Node{base[0], {Role: "list", Children: []Node{base[1].Children[1], base[1].Children[2]}}, base[1].Children[0]},
			[]Node{{Role: "list", Children: []Node{{NodeID: "nd_a", Role: "button", Name: "A", Change: ChangeRemoved}}},
				{NodeID: "nd_a", Role: "button", Name: "A", Change: ChangeAdded}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := diffNodes(base, tc.cur)
			if !reflect.DeepEqual(got, tc.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tc.want)
				t.Fatalf("got  %s\nwant %s", g, w)
			}
		})
	}
}

// FuzzOpenCursor: a cursor is untrusted input. Whatever the bytes, openCursor
// does not panic, and it accepts only what sealCursor made with the same key
// (re-sealing what it read gives the same cursor back).
func FuzzOpenCursor(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	valid := sealCursor(key, cursor{obsID: "ob_0123456789", contextID: "ctx_abc", offset: 40, maxBytes: 4096, part: 2})
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(sealCursor([]byte("another session's key, 32 bytes!"), cursor{obsID: "ob_x", contextID: "ctx_y", offset: 1, maxBytes: 2048, part: 1}))
	f.Add("oc_")
	f.Add("oc_AAAA")
	f.Add("ob_0123456789")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := openCursor(key, s)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v is not ErrInvalidRequest", err)
			}
			return
		}
		if again := sealCursor(key, c); again != s {
			t.Fatalf("opened %q, which sealCursor does not make (%q)", s, again)
		}
	})
}
