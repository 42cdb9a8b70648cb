package observation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/page"
)

// canned is an Observer of a page the test describes: a context, its epoch and its tree. It is
// the input of these unit tests; the keeper over real browsers is tested in package browser and
// in the end-to-end suite.
type canned struct {
	ctxID, epoch string
	tree         []page.Node
	observed     []page.ObserveRequest
}

func (c *canned) DefaultContext() string { return c.ctxID }

func (c *canned) Observe(_ context.Context, req page.ObserveRequest) (*page.Snapshot, error) {
	c.observed = append(c.observed, req)
	if req.ContextID != "" && req.ContextID != c.ctxID {
		return nil, page.ErrNoSuchContext
	}
	var tree []page.Node
	b, _ := json.Marshal(c.tree)
	_ = json.Unmarshal(b, &tree)
	return &page.Snapshot{ContextID: c.ctxID, EpochID: c.epoch, URL: "https://shop.example/", Title: "Shop", Nodes: tree}, nil
}

// withEpoch is a canned page that also tells its epoch without observing.
type withEpoch struct{ *canned }

func (w withEpoch) ContextEpoch(string) (string, error) { return w.epoch, nil }

func catalog(n int) []page.Node {
	items := make([]page.Node, n)
	for i := range items {
		items[i] = page.Node{Role: "listitem", Children: []page.Node{
			{NodeID: fmt.Sprintf("nd_link%04d", i), Role: "link", Name: fmt.Sprintf("Product %d", i), URL: fmt.Sprintf("https://shop.example/p/%d", i)},
			{NodeID: fmt.Sprintf("nd_btn%04d", i), Role: "button", Name: fmt.Sprintf("Add %d <to cart>", i)},
			{Role: "text", Name: "in stock"},
		}}
	}
	return []page.Node{{Role: "heading", Name: "Catalog", Level: 1}, {Role: "main", NodeID: "nd_main", Children: []page.Node{{Role: "list", Children: items}}}}
}

func deep(depth int) []page.Node {
	n := page.Node{NodeID: "nd_leaf", Role: "button", Name: strings.Repeat("x", 40)}
	for i := range depth {
		n = page.Node{Role: "group", Name: fmt.Sprintf("level %d", i), Children: []page.Node{n, {Role: "text", Name: strings.Repeat("after ", 12)}}}
	}
	return []page.Node{n}
}

// wireBytes is the size of a snapshot as the HTTP API writes it.
func wireBytes(t *testing.T, s *page.Snapshot) int {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return len(b) + links(s.Nodes)
}

func count(ns []page.Node, onlyNew bool) int {
	n := 0
	for i := range ns {
		if !onlyNew || !ns[i].Repeated {
			n++
		}
		n += count(ns[i].Children, onlyNew)
	}
	return n
}

// TestCutAndContinue pages trees through max_bytes: every part fits the cap, says its number and
// what remains, and the parts merge back into the whole tree; a tree that fits is one part.
func TestCutAndContinue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tree     []page.Node
		maxBytes int
		minParts int
	}{
		{"catalog at the smallest cap", catalog(300), MinBytes, 20},
		{"catalog at 16 KiB", catalog(300), 16 << 10, 2},
		{"catalog that fits", catalog(3), 16 << 10, 1},
		{"no cap", catalog(300), 0, 1},
		{"deep tree", deep(20), MinBytes, 2},
		{"empty page", []page.Node{}, MinBytes, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &canned{ctxID: "ctx_a", epoch: "ep_1", tree: tc.tree}
			k := NewKeeper()
			req := page.ObserveRequest{MaxBytes: tc.maxBytes}
			var merged []page.Node
			parts, id, remaining := 0, "", count(tc.tree, false)
			for {
				snap, err := k.Observe(context.Background(), withEpoch{o}, req)
				if err != nil {
					t.Fatalf("part %d: %v", parts+1, err)
				}
				parts++
				if tc.maxBytes > 0 && wireBytes(t, snap) > tc.maxBytes {
					t.Fatalf("part %d is %d bytes, over %d", parts, wireBytes(t, snap), tc.maxBytes)
				}
				if snap.ApproxTokens != ApproxTokens(WireSize(snap.Nodes)) {
					t.Fatalf("part %d: approx_tokens %d for %d bytes", parts, snap.ApproxTokens, WireSize(snap.Nodes))
				}
				if id == "" {
					id = snap.ObservationID
				} else if snap.ObservationID != id {
					t.Fatalf("part %d of %s says %s", parts, id, snap.ObservationID)
				}
				if merged, err = Merge(merged, snap.Nodes); err != nil {
					t.Fatalf("part %d: %v", parts, err)
				}
				remaining -= count(snap.Nodes, true)
				if snap.Continuation == nil {
					break
				}
				if snap.Continuation.Part != parts || snap.Continuation.RemainingNodes != remaining || remaining < 1 {
					t.Fatalf("part %d: continuation %+v, %d nodes remaining", parts, snap.Continuation, remaining)
				}
				req = page.ObserveRequest{Cursor: snap.Continuation.Cursor}
			}
			if remaining != 0 || parts < tc.minParts {
				t.Fatalf("%d parts, %d nodes never returned", parts, remaining)
			}
			if !reflect.DeepEqual(merged, tc.tree) && (len(merged) != 0 || len(tc.tree) != 0) {
				g, _ := json.Marshal(merged)
				t.Fatalf("the parts merge into %.300s…", g)
			}
			if len(o.observed) != 1 {
				t.Fatalf("the page was observed %d times for one observation", len(o.observed))
			}
		})
	}
}

// TestCutTooSmall refuses a cap that leaves no room for a node and its ancestors.
func TestCutTooSmall(t *testing.T) {
	o := &canned{ctxID: "ctx_a", epoch: "ep_1", tree: []page.Node{{Role: "text", Name: strings.Repeat("long ", 1000)}}}
	if _, err := NewKeeper().Observe(context.Background(), o, page.ObserveRequest{MaxBytes: MinBytes}); !errors.Is(err, page.ErrInvalidRequest) {
		t.Fatalf("%v, want ErrInvalidRequest", err)
	}
}

// TestMergeRefuses refuses parts that do not continue the tree before them.
func TestMergeRefuses(t *testing.T) {
	into := []page.Node{{Role: "list", Children: []page.Node{{Role: "text", Name: "a"}}}}
	for name, part := range map[string][]page.Node{
		"nothing before":     nil,
		"another node":       {{Role: "main", Repeated: true}},
		"repeated not first": {{Role: "text", Name: "b"}, {Role: "list", Repeated: true}},
	} {
		before := into
		if name == "nothing before" {
			before, part = nil, []page.Node{{Role: "list", Repeated: true}}
		}
		if _, err := Merge(before, part); err == nil {
			t.Errorf("%s: merged", name)
		}
	}
}

func TestDiff(t *testing.T) {
	yes := true
	base := []page.Node{
		{Role: "heading", Name: "Cart", Level: 1},
		{Role: "list", Children: []page.Node{
			{NodeID: "nd_a", Role: "button", Name: "A"},
			{NodeID: "nd_b", Role: "button", Name: "B"},
			{Role: "text", Name: "two items"},
		}},
	}
	for _, tc := range []struct {
		name string
		cur  []page.Node
		want []page.Node
	}{
		{"same", base, []page.Node{}},
		{"changed state", []page.Node{base[0], {Role: "list", Children: []page.Node{
			{NodeID: "nd_a", Role: "button", Name: "A", Focused: &yes}, base[1].Children[1], base[1].Children[2]}}},
			[]page.Node{{Role: "list", Children: []page.Node{{NodeID: "nd_a", Role: "button", Name: "A", Focused: &yes, Change: ChangeChanged}}}}},
		{"added and removed", []page.Node{base[0], {Role: "list", Children: []page.Node{
			base[1].Children[0], {NodeID: "nd_c", Role: "button", Name: "C", Children: []page.Node{{Role: "text", Name: "new"}}}, base[1].Children[2]}}},
			[]page.Node{{Role: "list", Children: []page.Node{
				{NodeID: "nd_c", Role: "button", Name: "C", Change: ChangeAdded, Children: []page.Node{{Role: "text", Name: "new"}}},
				{NodeID: "nd_b", Role: "button", Name: "B", Change: ChangeRemoved}}}}},
		{"text changed", []page.Node{base[0], {Role: "list", Children: []page.Node{
			base[1].Children[0], base[1].Children[1], {Role: "text", Name: "three items"}}}},
			[]page.Node{{Role: "list", Children: []page.Node{{Role: "text", Name: "three items", Change: ChangeChanged}}}}},
		{"moved", []page.Node{base[0], {Role: "list", Children: []page.Node{base[1].Children[1], base[1].Children[2]}}, base[1].Children[0]},
			[]page.Node{{Role: "list", Children: []page.Node{{NodeID: "nd_a", Role: "button", Name: "A", Change: ChangeRemoved}}},
				{NodeID: "nd_a", Role: "button", Name: "A", Change: ChangeAdded}}},
		{"all gone", []page.Node{}, []page.Node{
			{Role: "heading", Name: "Cart", Level: 1, Change: ChangeRemoved}, {Role: "list", Change: ChangeRemoved}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Diff(base, tc.cur)
			if !reflect.DeepEqual(got, tc.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tc.want)
				t.Fatalf("got  %s\nwant %s", g, w)
			}
		})
	}
}

// TestSinceAndRefusals: a delta of the same epoch holds only what changed (and pages like any
// answer); since and cursor are refused precisely across epochs, contexts and sessions, for
// observations no longer kept, and with options that do not match.
func TestSinceAndRefusals(t *testing.T) {
	ctx := context.Background()
	o := &canned{ctxID: "ctx_a", epoch: "ep_1", tree: catalog(200)}
	k := NewKeeper()
	base, err := k.Observe(ctx, o, page.ObserveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	whole := wireBytes(t, base)
	cut, err := k.Observe(ctx, o, page.ObserveRequest{MaxBytes: MinBytes})
	if err != nil || cut.Continuation == nil {
		t.Fatalf("cut: %v %+v", err, cut)
	}

	// One button's name changes: the delta is that button under its unchanged ancestors.
	o.tree[1].Children[0].Children[7].Children[1].Name = "Added to cart"
	delta, err := k.Observe(ctx, o, page.ObserveRequest{Since: base.ObservationID})
	if err != nil {
		t.Fatal(err)
	}
	if delta.Since != base.ObservationID || count(delta.Nodes, false) != 4 || wireBytes(t, delta)*20 > whole {
		t.Fatalf("delta of %d bytes (whole %d): %+v", wireBytes(t, delta), whole, delta.Nodes)
	}
	if got := o.observed[len(o.observed)-1]; got.Mode != page.ModeInteractive || got.Since != "" || got.MaxBytes != 0 || got.Cursor != "" {
		t.Fatalf("the engine was asked %+v", got)
	}
	again, err := k.Observe(ctx, o, page.ObserveRequest{Since: delta.ObservationID, MaxBytes: MinBytes})
	if err != nil || len(again.Nodes) != 0 || again.Continuation != nil {
		t.Fatalf("nothing changed since the delta: %v %+v", err, again)
	}

	other := NewKeeper()
	if _, err := other.Observe(ctx, o, page.ObserveRequest{MaxBytes: MinBytes}); err != nil {
		t.Fatal(err)
	}
	forged := []byte(cut.Continuation.Cursor)
	forged[10] ^= 'A' ^ 'B'
	if forged[10] != 'A' && forged[10] != 'B' {
		forged[10] = 'A'
	}
	refused := func(name string, k *Keeper, o Observer, req page.ObserveRequest, want error) {
		t.Helper()
		if _, err := k.Observe(ctx, o, req); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	refused("forged cursor", k, o, page.ObserveRequest{Cursor: string(forged)}, page.ErrInvalidRequest)
	refused("another session's cursor", other, o, page.ObserveRequest{Cursor: cut.Continuation.Cursor}, page.ErrInvalidRequest)
	refused("cursor of another context", k, o, page.ObserveRequest{ContextID: "ctx_b", Cursor: cut.Continuation.Cursor}, page.ErrInvalidRequest)
	refused("cursor with a mode", k, o, page.ObserveRequest{Cursor: cut.Continuation.Cursor, Mode: page.ModeFull}, page.ErrInvalidRequest)
	refused("max_bytes too small", k, o, page.ObserveRequest{MaxBytes: MinBytes - 1}, page.ErrInvalidRequest)
	refused("max_bytes too large", k, o, page.ObserveRequest{MaxBytes: MaxBytes + 1}, page.ErrInvalidRequest)
	refused("since of another mode", k, o, page.ObserveRequest{Since: base.ObservationID, Mode: page.ModeFull}, page.ErrInvalidRequest)
	refused("since of another within", k, o, page.ObserveRequest{Since: base.ObservationID, Within: "nd_main"}, page.ErrInvalidRequest)
	refused("since not an id", k, o, page.ObserveRequest{Since: "nd_main"}, page.ErrInvalidRequest)
	refused("since never made", k, o, page.ObserveRequest{Since: "ob_nevermade00"}, page.ErrNoSuchObservation)
	refused("since of another context", k, o, page.ObserveRequest{ContextID: "ctx_b", Since: base.ObservationID}, page.ErrNoSuchObservation)

	fullBase, err := k.Observe(ctx, o, page.ObserveRequest{Mode: page.ModeFull})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Observe(ctx, o, page.ObserveRequest{Since: fullBase.ObservationID}); err != nil || o.observed[len(o.observed)-1].Mode != page.ModeFull {
		t.Fatalf("a since of a full observation observes in full: %v %+v", err, o.observed[len(o.observed)-1])
	}

	// Room: the oldest of a context go beyond PerContext; a since on one is not found (same epoch).
	for range PerContext {
		if _, err := k.Observe(ctx, o, page.ObserveRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	refused("since dropped for room", k, o, page.ObserveRequest{Since: base.ObservationID}, page.ErrNoSuchObservation)
	kept, err := k.Observe(ctx, o, page.ObserveRequest{MaxBytes: MinBytes})
	if err != nil {
		t.Fatal(err)
	}

	// A new document: since and cursor of the old one are stale, through either way of reading
	// the epoch, and the old epoch's observations are dropped at the next observe.
	o.epoch = "ep_2"
	refused("since across epochs", k, o, page.ObserveRequest{Since: kept.ObservationID}, page.ErrObservationStale)
	refused("cursor across epochs", k, o, page.ObserveRequest{Cursor: kept.Continuation.Cursor}, page.ErrObservationStale)
	refused("cursor across epochs (epoch reader)", k, withEpoch{o}, page.ObserveRequest{Cursor: kept.Continuation.Cursor}, page.ErrObservationStale)
	if _, err := k.Observe(ctx, o, page.ObserveRequest{}); err != nil {
		t.Fatal(err)
	}
	refused("since of a dropped epoch", k, o, page.ObserveRequest{Since: kept.ObservationID}, page.ErrObservationStale)
	k.mu.Lock()
	n := k.count
	k.mu.Unlock()
	if n != 1 {
		t.Fatalf("the keeper holds %d observations after the epoch changed, want 1", n)
	}
}

// TestKeeperBounds: across many contexts a session keeps at most PerSession observations, and a
// closed context's are forgotten.
func TestKeeperBounds(t *testing.T) {
	k := NewKeeper()
	for i := range 3 * PerSession {
		o := &canned{ctxID: fmt.Sprintf("ctx_%d", i%5), epoch: "ep_1", tree: catalog(2)}
		if _, err := k.Observe(context.Background(), o, page.ObserveRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	held := func() (total int) {
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, l := range k.byCtx {
			if len(l) > PerContext {
				t.Fatalf("a context keeps %d", len(l))
			}
			total += len(l)
		}
		if total != k.count {
			t.Fatalf("count %d, held %d", k.count, total)
		}
		return total
	}
	if n := held(); n != PerSession {
		t.Fatalf("the session keeps %d observations, want %d", n, PerSession)
	}
	k.Forget("ctx_0")
	if n := held(); n >= PerSession {
		t.Fatalf("after a context closed the session keeps %d", n)
	}
}

// FuzzOpenCursor: a cursor is untrusted input. Whatever the bytes, openCursor does not panic and
// refuses with ErrInvalidRequest everything but what sealCursor made with the same key (sealing
// what it read gives the same cursor back).
func FuzzOpenCursor(f *testing.F) {
	key := []byte("0123456789abcdef0123456789abcdef")
	valid := sealCursor(key, cursor{obsID: "ob_0123456789", contextID: "ctx_abc", epoch: "ep_xyz", offset: 40, maxBytes: 4096, part: 2})
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(valid + "A")
	f.Add(sealCursor([]byte("another session's key, 32 bytes!"), cursor{obsID: "ob_x", contextID: "ctx_y", epoch: "ep_z", offset: 1, maxBytes: 2048, part: 2}))
	f.Add(sealCursor(key, cursor{obsID: "ob_x", contextID: "ctx_y", epoch: "nd_z", offset: 1, maxBytes: 2048, part: 2}))
	f.Add(sealCursor(key, cursor{obsID: "ob_x", contextID: "ctx_y", epoch: "ep_z", offset: 1, maxBytes: 1, part: 2}))
	f.Add("oc_")
	f.Add("oc_AAAA")
	f.Add("oc_" + strings.Repeat("A", 600))
	f.Add("ob_0123456789")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := openCursor(key, s)
		if err != nil {
			if !errors.Is(err, page.ErrInvalidRequest) {
				t.Fatalf("error %v is not ErrInvalidRequest", err)
			}
			return
		}
		if again := sealCursor(key, c); again != s {
			t.Fatalf("opened %q, which sealCursor does not make (%q)", s, again)
		}
	})
}
