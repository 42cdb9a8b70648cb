package observation

import (
	"reflect"
	"strconv"

	"github.com/originweave/bap/server/internal/page"
)

// Diff returns the delta from old to cur: the nodes added, changed or removed (Node.Change), under
// their unchanged ancestors. A node is the same node in both when it has the same handle, or,
// without a handle, the same role and rank among its parent's unhandled children of that role,
// under the same parent. An added node comes with its whole subtree; a changed one lists only
// what changed below it; a removed one comes without children.
func Diff(old, cur []page.Node) []page.Node {
	type oldRec struct {
		n      *page.Node
		parent string
	}
	oldAt := make(map[string]oldRec)
	var index func(ns []page.Node, parent string)
	index = func(ns []page.Node, parent string) {
		keys := nodeKeys(ns, parent)
		for i := range ns {
			oldAt[keys[i]] = oldRec{n: &ns[i], parent: parent}
			index(ns[i].Children, keys[i])
		}
	}
	index(old, "")
	newParent := make(map[string]string)
	var indexNew func(ns []page.Node, parent string)
	indexNew = func(ns []page.Node, parent string) {
		keys := nodeKeys(ns, parent)
		for i := range ns {
			newParent[keys[i]] = parent
			indexNew(ns[i].Children, keys[i])
		}
	}
	indexNew(cur, "")

	removedUnder := func(oldKids []page.Node, parent string) []page.Node {
		var out []page.Node
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
	var walk func(ns []page.Node, parent string, oldKids []page.Node) []page.Node
	walk = func(ns []page.Node, parent string, oldKids []page.Node) []page.Node {
		var out []page.Node
		keys := nodeKeys(ns, parent)
		for i := range ns {
			o, ok := oldAt[keys[i]]
			if !ok || o.parent != parent {
				n := ns[i]
				n.Change = ChangeAdded
				out = append(out, n)
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
		out = []page.Node{}
	}
	return out
}

// nodeKeys names each node of a sibling list for Diff.
func nodeKeys(ns []page.Node, parent string) []string {
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

// sameOwn compares two nodes' own fields (not their children, change or repetition).
func sameOwn(a, b *page.Node) bool {
	x, y := *a, *b
	x.Children, y.Children, x.Change, y.Change, x.Repeated, y.Repeated = nil, nil, "", "", false, false
	return reflect.DeepEqual(x, y)
}
