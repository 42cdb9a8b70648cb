package browser

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// Observation budgets and deltas (issue #25): every observe is kept, a few per
// browsing context, so that a later observe can answer only what changed
// since (Since) and a snapshot cut by MaxBytes can be continued (Cursor).

// keptObservations is how many recent observations a session keeps per
// browsing context for Since and Cursor.
const keptObservations = 4

// Bounds of ObserveRequest.MaxBytes (the spec's ObserveRequest.max_bytes).
const (
	minObserveBytes = 2048
	maxObserveBytes = 16 << 20
)

// Node changes of a delta (the spec's NodeChange values).
const (
	ChangeAdded   = "added"
	ChangeChanged = "changed"
	ChangeRemoved = "removed"
)

// observation is one kept observe.
type observation struct {
	id        string
	contextID string
	epoch     string
	url       string
	title     string
	truncated bool
	since     string
	// tree is the whole observed tree (what a later Since compares with).
	tree []Node
	// outTree is what the observe answers: tree, or the delta against since.
	outTree []Node
	// out is outTree flattened in document order for paging (made once, on
	// the first answer cut by max_bytes).
	flatOnce sync.Once
	out      []flatNode
}

func (ob *observation) flat() []flatNode {
	ob.flatOnce.Do(func() { ob.out = flatten(ob.outTree, -1, nil) })
	return ob.out
}

// observations are a session's kept observations and the key its cursors are sealed with.
type observations struct {
	mu    sync.Mutex
	key   []byte
	byCtx map[string][]*observation // newest last
}

func (o *observations) init() {
	if o.key == nil {
		o.key = make([]byte, 32)
		_, _ = rand.Read(o.key) // crypto/rand.Read never fails (Go 1.24+)
		o.byCtx = make(map[string][]*observation)
	}
}

func (o *observations) keep(ob *observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	l := append(o.byCtx[ob.contextID], ob)
	if len(l) > keptObservations {
		l = append(l[:0:0], l[len(l)-keptObservations:]...)
	}
	o.byCtx[ob.contextID] = l
}

func (o *observations) find(contextID, id string) *observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ob := range o.byCtx[contextID] {
		if ob.id == id {
			return ob
		}
	}
	return nil
}

// forget drops the observations of a closed context.
func (o *observations) forget(contextID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.byCtx, contextID)
}

func (o *observations) sealKey() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.init()
	return o.key
}

func newObservationID() string { return pagekit.ObservationID() }

// flatNode is one node of an answer in document order: its own fields
// (Children nil) and the index of its parent (-1 at the top).
type flatNode struct {
	n      Node
	parent int
	size   int // bytes of n's JSON
}

func flatten(ns []Node, parent int, out []flatNode) []flatNode {
	for i := range ns {
		own := ns[i]
		own.Children = nil
		b, _ := json.Marshal(own)
		out = append(out, flatNode{n: own, parent: parent, size: len(b)})
		out = flatten(ns[i].Children, len(out)-1, out)
	}
	return out
}

// treeNode builds a part's tree before it becomes []Node.
type treeNode struct {
	n    Node
	kids []*treeNode
}

func (t *treeNode) nodes() []Node {
	if len(t.kids) == 0 {
		return nil
	}
	out := make([]Node, len(t.kids))
	for i, k := range t.kids {
		out[i] = k.n
		out[i].Children = k.nodes()
	}
	return out
}

// buildPart returns the tree of out[from:to], under copies of the ancestors of out[from].
func buildPart(out []flatNode, from, to int) []Node {
	root := &treeNode{}
	made := make(map[int]*treeNode, to-from+8)
	var chain []int
	for p := out[from].parent; p >= 0; p = out[p].parent {
		chain = append(chain, p)
	}
	at := func(p int) *treeNode {
		if p < 0 {
			return root
		}
		return made[p]
	}
	for i := len(chain) - 1; i >= 0; i-- {
		a := chain[i]
		t := &treeNode{n: out[a].n}
		par := at(out[a].parent)
		par.kids = append(par.kids, t)
		made[a] = t
	}
	for i := from; i < to; i++ {
		t := &treeNode{n: out[i].n}
		par := at(out[i].parent)
		par.kids = append(par.kids, t)
		made[i] = t
	}
	return root.nodes()
}

// approxTokens is the token estimate of n bytes of JSON (a model tokenizer
// averages about four bytes of such text per token).
func approxTokens(n int) int { return (n + 3) / 4 }

// envelopeBytes bounds the bytes of an observe response besides its nodes
// (the fields the transport adds, with their longest values).
func envelopeBytes(ob *observation) int {
	env := map[string]any{
		"context_id": ob.contextID, "epoch_id": ob.epoch, "url": ob.url, "title": ob.title,
		"observation_id": ob.id, "since": ob.id, "approx_tokens": 99999999, "truncated": true,
		"nodes":        []Node{},
		"continuation": map[string]any{"cursor": "oc_" + strings.Repeat("A", cursorChars), "part": 99999999, "remaining_nodes": 99999999},
	}
	b, _ := json.Marshal(env)
	return len(b) + 64 // slack for the transport's own encoding
}

// cursorChars is the longest cursor's length after its oc_ prefix.
const cursorChars = 256

// part cuts the answer from its node number from to what fits maxBytes (0:
// no cap) and says where the next part starts (done when it is the end).
func (ob *observation) part(from, maxBytes int) (nodes []Node, wire []byte, next int, done bool, err error) {
	if from == 0 {
		// The whole answer, when it fits.
		wire, _ = json.Marshal(ob.outTree)
		if maxBytes == 0 || len(wire) <= maxBytes-envelopeBytes(ob) {
			return ob.outTree, wire, 0, true, nil
		}
	}
	out := ob.flat()
	if from >= len(out) {
		return []Node{}, []byte("[]"), len(out), true, nil
	}
	budget := maxBytes - envelopeBytes(ob)
	if budget <= 0 {
		return nil, nil, 0, false, fmt.Errorf("%w: max_bytes %d leaves no room for nodes beside this page's url and title", ErrInvalidRequest, maxBytes)
	}
	// Estimate: each node's JSON plus its share of brackets and commas; the
	// ancestors of the first node are repeated for context.
	const perNode = len(`,"children":[]`) + 1
	used := 2
	for p := out[from].parent; p >= 0; p = out[p].parent {
		used += out[p].size + perNode
	}
	to := from
	for to < len(out) && used+out[to].size+perNode <= budget {
		used += out[to].size + perNode
		to++
	}
	for to > from {
		nodes = buildPart(out, from, to)
		b, _ := json.Marshal(nodes)
		if len(b) <= budget {
			return nodes, b, to, to == len(out), nil
		}
		to = from + (to-from)*9/10 // the estimate was short: retry smaller
	}
	return nil, nil, 0, false, fmt.Errorf("%w: max_bytes %d is too small for the node at position %d of this observation and its ancestors", ErrInvalidRequest, maxBytes, from)
}

// Cursors: "oc_" + base64url(payload || HMAC-SHA256(session key, payload)[:16]),
// payload = version 1, offset u32, max_bytes u32, part u16, len+observation id, len+context id.
// The key is the session's own random key, so a cursor is only good for the
// session that issued it, and the context it names is checked against the
// request's.

const cursorMAC = 16

type cursor struct {
	obsID     string
	contextID string
	offset    int
	maxBytes  int
	part      int
}

func sealCursor(key []byte, c cursor) string {
	p := []byte{1}
	p = binary.BigEndian.AppendUint32(p, uint32(c.offset))
	p = binary.BigEndian.AppendUint32(p, uint32(c.maxBytes))
	p = binary.BigEndian.AppendUint16(p, uint16(c.part))
	p = append(p, byte(len(c.obsID)))
	p = append(p, c.obsID...)
	p = append(p, byte(len(c.contextID)))
	p = append(p, c.contextID...)
	m := hmac.New(sha256.New, key)
	m.Write(p)
	p = m.Sum(p)[:len(p)+cursorMAC]
	return "oc_" + base64.RawURLEncoding.EncodeToString(p)
}

var (
	obsIDRe = regexp.MustCompile(`^ob_[A-Za-z0-9_-]{1,64}$`)
	ctxIDRe = regexp.MustCompile(`^ctx_[A-Za-z0-9_-]{1,64}$`)
)

// openCursor checks a cursor's seal and reads it. Any cursor this session did
// not issue, or altered in any byte, is refused.
func openCursor(key []byte, s string) (cursor, error) {
	bad := fmt.Errorf("%w: cursor is not a continuation cursor of this session", ErrInvalidRequest)
	if len(s) < 4 || len(s) > 3+cursorChars || s[:3] != "oc_" {
		return cursor{}, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(s[3:])
	if err != nil || len(raw) < 1+4+4+2+1+1+cursorMAC {
		return cursor{}, bad
	}
	p, mac := raw[:len(raw)-cursorMAC], raw[len(raw)-cursorMAC:]
	m := hmac.New(sha256.New, key)
	m.Write(p)
	if !hmac.Equal(mac, m.Sum(nil)[:cursorMAC]) || p[0] != 1 {
		return cursor{}, bad
	}
	c := cursor{
		offset:   int(binary.BigEndian.Uint32(p[1:5])),
		maxBytes: int(binary.BigEndian.Uint32(p[5:9])),
		part:     int(binary.BigEndian.Uint16(p[9:11])),
	}
	rest := p[11:]
	str := func() (string, bool) {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return "", false
		}
		v := string(rest[1 : 1+int(rest[0])])
		rest = rest[1+int(rest[0]):]
		return v, true
	}
	var ok1, ok2 bool
	c.obsID, ok1 = str()
	c.contextID, ok2 = str()
	if !ok1 || !ok2 || len(rest) != 0 || !obsIDRe.MatchString(c.obsID) || !ctxIDRe.MatchString(c.contextID) ||
		c.maxBytes < minObserveBytes || c.maxBytes > maxObserveBytes || c.part < 1 {
		return cursor{}, bad
	}
	return c, nil
}

// answer makes the snapshot of part number part of ob, starting at from.
func (s *Session) answer(ob *observation, from, maxBytes, part int) (*Snapshot, error) {
	nodes, wire, next, done, err := ob.part(from, maxBytes)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{ContextID: ob.contextID, EpochID: ob.epoch, URL: ob.url, Title: ob.title, Nodes: nodes,
		ObservationID: ob.id, Since: ob.since, Truncated: ob.truncated, ApproxTokens: approxTokens(len(wire))}
	if !done {
		if part >= 1<<16-1 {
			return nil, fmt.Errorf("%w: this observation needs more than %d parts; raise max_bytes", ErrInvalidRequest, part)
		}
		snap.Continuation = &page.Continuation{
			Cursor:         sealCursor(s.obs.sealKey(), cursor{obsID: ob.id, contextID: ob.contextID, offset: next, maxBytes: maxBytes, part: part + 1}),
			Part:           part,
			RemainingNodes: len(ob.flat()) - next,
		}
	}
	return snap, nil
}

// diffNodes returns the delta from old to cur: the nodes added, changed or
// removed (Node.Change), under their unchanged ancestors. A node is the same
// node in both when it has the same handle, or, without a handle, the same
// role and rank among its parent's unhandled children of that role, under the
// same parent.
func diffNodes(old, cur []Node) []Node {
	type oldRec struct {
		n      *Node
		parent string
	}
	oldAt := make(map[string]oldRec)
	var index func(ns []Node, parent string)
	index = func(ns []Node, parent string) {
		keys := nodeKeys(ns, parent)
		for i := range ns {
			oldAt[keys[i]] = oldRec{n: &ns[i], parent: parent}
			index(ns[i].Children, keys[i])
		}
	}
	index(old, "")
	newParent := make(map[string]string)
	var indexNew func(ns []Node, parent string)
	indexNew = func(ns []Node, parent string) {
		keys := nodeKeys(ns, parent)
		for i := range ns {
			newParent[keys[i]] = parent
			indexNew(ns[i].Children, keys[i])
		}
	}
	indexNew(cur, "")

	removedUnder := func(oldKids []Node, parent string) []Node {
		var out []Node
		keys := nodeKeys(oldKids, parent)
		for i := range oldKids {
			if p, ok := newParent[keys[i]]; !ok || p != parent {
				r := oldKids[i]
				r.Children, r.Change = nil, ChangeRemoved
				out = append(out, r)
			}
		}
		return out
	}
	var walk func(ns []Node, parent string, oldKids []Node) []Node
	walk = func(ns []Node, parent string, oldKids []Node) []Node {
		var out []Node
		keys := nodeKeys(ns, parent)
		for i := range ns {
			o, ok := oldAt[keys[i]]
			if !ok || o.parent != parent {
				out = append(out, markAdded(ns[i]))
				continue
			}
			sub := walk(ns[i].Children, keys[i], o.n.Children)
			n := ns[i]
			n.Children = sub
			if !sameOwn(o.n, &ns[i]) {
				n.Change = ChangeChanged
			} else if len(sub) == 0 {
				continue
			}
			out = append(out, n)
		}
		return append(out, removedUnder(oldKids, parent)...)
	}
	out := walk(cur, "", old)
	if out == nil {
		out = []Node{}
	}
	return out
}

func markAdded(n Node) Node {
	n.Change = ChangeAdded
	return n
}

// nodeKeys names each node of a sibling list for diffNodes.
func nodeKeys(ns []Node, parent string) []string {
	keys := make([]string, len(ns))
	rank := make(map[string]int)
	for i := range ns {
		if ns[i].NodeID != "" {
			keys[i] = ns[i].NodeID
			continue
		}
		r := rank[ns[i].Role]
		rank[ns[i].Role] = r + 1
		keys[i] = parent + "/" + ns[i].Role + "#" + strconv.Itoa(r)
	}
	return keys
}

// sameOwn compares two nodes' own fields (not their children).
func sameOwn(a, b *Node) bool {
	x, y := *a, *b
	x.Children, y.Children, x.Change, y.Change = nil, nil, "", ""
	return reflect.DeepEqual(x, y)
}
