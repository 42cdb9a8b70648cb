package observation

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/originweave/bap/server/internal/page"
)

// parts is an answer's tree and, made on the first cut, the same nodes flattened in document
// order for paging.
type parts struct {
	tree []page.Node

	once sync.Once
	flat []flatNode
}

func newParts(tree []page.Node) *parts { return &parts{tree: tree} }

// flatNode is one node of an answer in document order: its own fields (no children) and the
// index of its parent (-1 at the top).
type flatNode struct {
	n      page.Node
	parent int
	size   int // bytes of n's JSON on the wire
}

func (p *parts) nodes() []flatNode {
	p.once.Do(func() { p.flat = flatten(p.tree, -1, nil) })
	return p.flat
}

func (p *parts) len() int { return len(p.nodes()) }

func flatten(ns []page.Node, parent int, out []flatNode) []flatNode {
	for i := range ns {
		own := ns[i]
		own.Children = nil
		out = append(out, flatNode{n: own, parent: parent, size: WireSize([]page.Node{own}) - 2})
		out = flatten(ns[i].Children, len(out)-1, out)
	}
	return out
}

// WireSize is the size of nodes' JSON as the HTTP API writes it (a page.Node's url is the wire's
// href: one byte more on every link).
func WireSize(nodes []page.Node) int {
	b, _ := json.Marshal(nodes)
	return len(b) + links(nodes)
}

func links(ns []page.Node) int {
	n := 0
	for i := range ns {
		if ns[i].URL != "" {
			n++
		}
		n += links(ns[i].Children)
	}
	return n
}

// envelopeBytes bounds the bytes of an observe answer besides its nodes: the other fields, with
// the longest values they can take.
func envelopeBytes(ob *kept) int {
	env := map[string]any{
		"context_id": ob.contextID, "epoch_id": ob.epoch, "url": ob.url, "title": ob.title,
		"observation_id": ob.id, "since": ob.id, "approx_tokens": 99999999, "truncated": true,
		"nodes":        []page.Node{},
		"continuation": map[string]any{"cursor": "oc_" + strings.Repeat("A", cursorLen(ob)), "part": 99999, "remaining_nodes": 99999999},
	}
	b, _ := json.Marshal(env)
	return len(b) + 16 // slack for the transport's own encoding
}

// cut returns the part of the answer from node number from that fits maxBytes (0: no cap) beside
// an envelope of env bytes, its wire size, and where the next part starts (done at the end). A
// part after the first repeats the ancestors of its first node, marked Repeated, so that the
// parts merge back into the whole tree.
func (p *parts) cut(from, maxBytes, env int) (nodes []page.Node, size, next int, done bool, err error) {
	if from == 0 {
		size = WireSize(p.tree)
		if maxBytes == 0 || size <= maxBytes-env {
			return p.tree, size, 0, true, nil
		}
	}
	out := p.nodes()
	if from >= len(out) {
		return []page.Node{}, 2, len(out), true, nil
	}
	budget := maxBytes - env
	if budget <= 0 {
		return nil, 0, 0, false, fmt.Errorf("%w: max_bytes %d leaves no room for nodes beside this page's url and title", page.ErrInvalidRequest, maxBytes)
	}
	// Each node costs its own JSON and a comma; a node with children in the part its
	// `,"children":[]`; a repeated ancestor its `,"repeated":true` too. That bounds the part's
	// JSON from above, so the check below fails only on what the estimate cannot see.
	const kids, repeated = len(`,"children":[]`), len(`,"repeated":true`)
	used := 2
	open := map[int]bool{}
	for a := out[from].parent; a >= 0; a = out[a].parent {
		used += out[a].size + 1 + kids + repeated
		open[a] = true
	}
	to := from
	for to < len(out) {
		cost := out[to].size + 1
		if par := out[to].parent; par >= 0 && !open[par] {
			cost += kids
		}
		if used+cost > budget {
			break
		}
		used += cost
		open[out[to].parent] = true
		to++
	}
	for to > from {
		nodes = buildPart(out, from, to)
		if size = WireSize(nodes); size <= budget {
			return nodes, size, to, to == len(out), nil
		}
		to = from + (to-from)*9/10
	}
	return nil, 0, 0, false, fmt.Errorf("%w: max_bytes %d is too small for the node at position %d of this observation and its ancestors", page.ErrInvalidRequest, maxBytes, from)
}

// treeNode builds a part's tree before it becomes []page.Node.
type treeNode struct {
	n    page.Node
	kids []*treeNode
}

func (t *treeNode) nodes() []page.Node {
	if len(t.kids) == 0 {
		return nil
	}
	out := make([]page.Node, len(t.kids))
	for i, k := range t.kids {
		out[i] = k.n
		out[i].Children = k.nodes()
	}
	return out
}

// buildPart returns the tree of out[from:to] under copies of the ancestors of out[from], marked
// Repeated.
func buildPart(out []flatNode, from, to int) []page.Node {
	root := &treeNode{}
	made := make(map[int]*treeNode, to-from+8)
	var chain []int
	for a := out[from].parent; a >= 0; a = out[a].parent {
		chain = append(chain, a)
	}
	at := func(i int) *treeNode {
		if i < 0 {
			return root
		}
		return made[i]
	}
	for i := len(chain) - 1; i >= 0; i-- {
		a := chain[i]
		t := &treeNode{n: out[a].n}
		t.n.Repeated = true
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

// Merge appends a part to the tree of the parts before it: the part's Repeated nodes stand for
// the last nodes already there (its first node's ancestors), the others are new. Merging every
// part of an observation in order gives its whole tree.
func Merge(into, part []page.Node) ([]page.Node, error) {
	for i, n := range part {
		if !n.Repeated {
			if repeats(part[i:]) {
				return into, fmt.Errorf("a repeated node below or after a new one")
			}
			into = append(into, part[i:]...)
			return into, nil
		}
		if i != 0 || len(into) == 0 {
			return into, fmt.Errorf("a repeated node %q that is not the first node of its list", n.Role)
		}
		last := &into[len(into)-1]
		if !sameOwn(last, &n) {
			return into, fmt.Errorf("a repeated %q node is not the last %q node of the parts before", n.Role, last.Role)
		}
		kids, err := Merge(last.Children, n.Children)
		if err != nil {
			return into, err
		}
		last.Children = kids
	}
	return into, nil
}

func repeats(ns []page.Node) bool {
	for i := range ns {
		if ns[i].Repeated || repeats(ns[i].Children) {
			return true
		}
	}
	return false
}
