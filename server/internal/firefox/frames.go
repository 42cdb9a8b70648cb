package firefox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// The tab's frames, same- and cross-origin, are browsing contexts of their own under the tab
// (browsingContext.getTree), each with its own sandbox for the page agent. A snapshot stitches
// each frame's nodes under its iframe node, a query runs in every frame, and an action in a frame
// maps the agent's point through each iframe's box to the tab's viewport, as the CDP adapter does
// with its frame targets. None of the frames' ids leave the adapter: a frame's nodes carry node
// handles like any other, which name the frame's document (handles.go).

// frameTree is the tab's browsing contexts below the tab, by parent, in document order.
type frameTree struct {
	kids   map[bidi.BrowsingContextBrowsingContext][]bidi.BrowsingContextBrowsingContext
	parent map[bidi.BrowsingContextBrowsingContext]bidi.BrowsingContextBrowsingContext
}

// tree reads the tab's frame tree.
func (s *Session) tree(ctx context.Context) (frameTree, error) {
	t := frameTree{kids: map[bidi.BrowsingContextBrowsingContext][]bidi.BrowsingContextBrowsingContext{},
		parent: map[bidi.BrowsingContextBrowsingContext]bidi.BrowsingContextBrowsingContext{}}
	res, err := s.e.c.BrowsingContextGetTree(ctx, bidi.BrowsingContextGetTreeParameters{Root: s.top})
	if err != nil {
		return t, s.mapErr(fmt.Errorf("firefox: reading the frame tree: %w", err))
	}
	var walk func(parent bidi.BrowsingContextBrowsingContext, list bidi.BrowsingContextInfoList)
	walk = func(parent bidi.BrowsingContextBrowsingContext, list bidi.BrowsingContextInfoList) {
		for _, c := range list {
			t.kids[parent] = append(t.kids[parent], c.Context)
			t.parent[c.Context] = parent
			walk(c.Context, c.Children)
		}
	}
	for _, c := range res.Contexts {
		walk(c.Context, c.Children)
	}
	return t, nil
}

// chain is frame and its ancestors up to the tab, frame first.
func (t frameTree) chain(frame, top bidi.BrowsingContextBrowsingContext) []bidi.BrowsingContextBrowsingContext {
	out := []bidi.BrowsingContextBrowsingContext{frame}
	for cur := frame; cur != top; {
		p, ok := t.parent[cur]
		if !ok {
			break
		}
		out = append(out, p)
		cur = p
	}
	return out
}

// ownersJS lists, in the agent's registry of a document, its iframe and frame elements (open
// shadow roots included) with their windows, which BiDi serializes as their browsing contexts:
// [token, index, window, index, window, …]; null where the agent is not installed.
const ownersJS = `(() => { const b = globalThis.__bap; if (b === undefined) return null; const out = [globalThis.__bapDoc];
  const walk = (root) => { for (const e of root.querySelectorAll('iframe, frame')) out.push(b.reg(e), e.contentWindow);
    for (const h of root.querySelectorAll('*')) if (h.shadowRoot) walk(h.shadowRoot); };
  walk(document); return out; })()`

// owners maps the child contexts of frame, showing document doc, to the agent index of their
// iframe elements there. A document other than doc answers page.ErrStaleNodeHandle.
func (s *Session) owners(ctx context.Context, frame bidi.BrowsingContextBrowsingContext, doc string) (map[bidi.BrowsingContextBrowsingContext]int, error) {
	depth := int64(1)
	res, err := s.e.c.ScriptEvaluate(ctx, bidi.ScriptEvaluateParameters{
		Expression: ownersJS, Target: bidi.ScriptTarget{Context: frame, Sandbox: agentSandbox},
		ResultOwnership: bidi.ScriptResultOwnershipNone, SerializationOptions: &bidi.ScriptSerializationOptions{MaxObjectDepth: &depth},
	})
	if err != nil {
		if frame != s.top && bidi.IsCode(err, bidi.ErrorCodeNoSuchFrame) {
			return nil, fmt.Errorf("%w: the frame is gone", page.ErrStaleNodeHandle)
		}
		return nil, s.mapErr(fmt.Errorf("firefox: finding the frames: %w", err))
	}
	if res.Type == "exception" {
		return nil, scriptException(res.ExceptionDetails)
	}
	stale := fmt.Errorf("%w: the frame's document changed", page.ErrStaleNodeHandle)
	if res.Result == nil || res.Result.Type != "array" {
		return nil, stale
	}
	var list []bidi.ScriptRemoteValue
	if err := json.Unmarshal(res.Result.Value, &list); err != nil {
		return nil, fmt.Errorf("firefox: finding the frames: %w", err)
	}
	if len(list) == 0 {
		return nil, stale
	}
	var token string
	if list[0].Type != "string" || json.Unmarshal(list[0].Value, &token) != nil || token != doc {
		return nil, stale
	}
	out := map[bidi.BrowsingContextBrowsingContext]int{}
	for i := 1; i+1 < len(list); i += 2 {
		var idx int
		var win struct {
			Context bidi.BrowsingContextBrowsingContext `json:"context"`
		}
		if list[i].Type != "number" || json.Unmarshal(list[i].Value, &idx) != nil ||
			list[i+1].Type != "window" || json.Unmarshal(list[i+1].Value, &win) != nil || win.Context == "" {
			continue // an iframe without a browsing context (not attached yet)
		}
		out[win.Context] = idx
	}
	return out, nil
}

// snapFrame snapshots the document of frame (doc "": whichever it shows) and, stitched under their
// iframe nodes, the frames inside it. It returns the nodes, the agent's result and the document it
// ran in.
func (s *Session) snapFrame(ctx context.Context, t frameTree, frame bidi.BrowsingContextBrowsingContext, doc string, opts map[string]any) ([]page.Node, snapResult, string, error) {
	var res snapResult
	ran, err := s.agentAt(ctx, frame, doc, &res, "snapshot", opts)
	if err != nil {
		return nil, res, "", err
	}
	if res.Stale {
		return nil, res, "", fmt.Errorf("%w: the within node is no longer in the document", page.ErrStaleNodeHandle)
	}
	sub := map[int][]page.Node{}
	if kids := t.kids[frame]; len(kids) > 0 {
		own, err := s.owners(ctx, frame, ran)
		if err != nil {
			return nil, res, "", err
		}
		within, _ := opts["within"].(int)
		childOpts := map[string]any{"mode": opts["mode"], "max": opts["max"]}
		// One frame after the other: Firefox answers concurrent script.evaluate calls to the
		// frames of a tab an order of magnitude slower than the same calls in turn (a page with
		// three frames: 62 ms an observe in parallel, 6 ms in turn).
		for _, k := range kids {
			idx, ok := own[k]
			if !ok || (res.Wf != 0 && idx != within) {
				continue
			}
			nodes, _, _, err := s.snapFrame(ctx, t, k, "", childOpts)
			if err != nil {
				// A frame that navigates or goes away while it is read is left out, as on
				// Chromium: the snapshot is the tab's, and the frame's next one will show it.
				s.debug("frame snapshot", err)
				continue
			}
			sub[idx] = nodes
		}
	}
	if res.Wf != 0 {
		return sub[opts["within"].(int)], res, ran, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return pagekit.Nodes(res.N, func(idx int) string { return s.docs.issue(ran, idx) }, sub), res, ran, nil
}

// framesFor lists the frames a query runs in, in tree order: frame (where the within node is, or
// the tab) first, then the frames below it whose iframe lies inside the within node (all of them
// without one), each with the within index to use there.
func (s *Session) framesFor(ctx context.Context, t frameTree, frame bidi.BrowsingContextBrowsingContext, doc string, within int) []bidi.BrowsingContextBrowsingContext {
	out := []bidi.BrowsingContextBrowsingContext{frame}
	kids := t.kids[frame]
	if len(kids) == 0 {
		return out
	}
	var inside map[bidi.BrowsingContextBrowsingContext]bool
	if within != 0 {
		own, err := s.owners(ctx, frame, doc)
		if err != nil {
			return out
		}
		inside = map[bidi.BrowsingContextBrowsingContext]bool{}
		for k, idx := range own {
			var ok bool
			if _, err := s.agentAt(ctx, frame, doc, &ok, "contains", within, idx); err == nil && ok {
				inside[k] = true
			}
		}
	}
	var walk func(f bidi.BrowsingContextBrowsingContext)
	walk = func(f bidi.BrowsingContextBrowsingContext) {
		out = append(out, f)
		for _, k := range t.kids[f] {
			walk(k)
		}
	}
	for _, k := range kids {
		if inside == nil || inside[k] {
			walk(k)
		}
	}
	return out
}

// toTop maps the point (x, y) of the viewport of the frame showing doc to the tab's viewport,
// adding each iframe's offset up the chain. With hit, it also checks in each parent document that
// the point lands in the iframe, and names what covers it when it does not.
func (s *Session) toTop(ctx context.Context, doc string, x, y float64, hit bool) (float64, float64, string, error) {
	frame := s.frameOf(doc)
	if frame == s.top {
		return x, y, "", nil
	}
	t, err := s.tree(ctx)
	if err != nil {
		return 0, 0, "", err
	}
	chain := t.chain(frame, s.top)
	if chain[len(chain)-1] != s.top {
		return 0, 0, "", fmt.Errorf("%w: the frame is no longer in the tab", page.ErrStaleNodeHandle)
	}
	for i := 0; i+1 < len(chain); i++ {
		child, parent := chain[i], chain[i+1]
		var fb struct {
			St  string  `json:"st"`
			X   float64 `json:"x"`
			Y   float64 `json:"y"`
			Cov string  `json:"cov"`
		}
		pdoc, err := s.agentAt(ctx, parent, "", nil, "info")
		if err != nil {
			return 0, 0, "", err
		}
		own, err := s.owners(ctx, parent, pdoc)
		if err != nil {
			return 0, 0, "", err
		}
		idx, ok := own[child]
		if !ok {
			return 0, 0, "", fmt.Errorf("%w: the frame is no longer in the document", page.ErrStaleNodeHandle)
		}
		args := []any{idx}
		if hit {
			args = append(args, x, y)
		}
		if _, err := s.agentAt(ctx, parent, pdoc, &fb, "frameBox", args...); err != nil {
			return 0, 0, "", err
		}
		if fb.St != "ok" {
			return 0, 0, "", fmt.Errorf("%w: the frame is no longer in the document", page.ErrStaleNodeHandle)
		}
		if hit && fb.Cov != "" {
			return 0, 0, fb.Cov, nil
		}
		x += fb.X
		y += fb.Y
	}
	return x, y, "", nil
}

// debug logs what the adapter leaves out (a frame that went away) at debug level.
func (s *Session) debug(msg string, err error) {
	if s.e.drv != nil {
		s.e.drv.log.Debug(msg, "err", err)
	}
}

// inputKey keys the browsing context an act's input goes to in its context.Context.
type inputKey struct{}

// inputTo is ctx with the act's input going to frame: the frame of the node it acts on, so that
// input reaches a frame of another site, which Firefox runs in a process of its own (input sent
// to the tab reaches only the tab's process). Points are then in the frame's viewport.
func inputTo(ctx context.Context, frame bidi.BrowsingContextBrowsingContext) context.Context {
	return context.WithValue(ctx, inputKey{}, frame)
}

// inputFrame is the browsing context input goes to (inputTo), else top.
func inputFrame(ctx context.Context, top bidi.BrowsingContextBrowsingContext) bidi.BrowsingContextBrowsingContext {
	if f, ok := ctx.Value(inputKey{}).(bidi.BrowsingContextBrowsingContext); ok && f != "" {
		return f
	}
	return top
}
