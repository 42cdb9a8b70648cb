package browser

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/pagekit"
)

// rec is the agent's compact record of one element (see agent.js).
type rec = pagekit.Record

type snapResult struct {
	U     string `json:"u"`
	T     string `json:"t"`
	N     []rec  `json:"n"`
	Tr    bool   `json:"tr"`
	Wf    int    `json:"wf"`
	Stale bool   `json:"stale"`
	// Ask lists the elements whose role, name and states the agent wants
	// from the browser's accessibility tree (see ax.go).
	Ask []int `json:"ask"`
}

type snapOpts struct {
	Mode   string `json:"mode"`
	Max    int    `json:"max"`
	Within int    `json:"within,omitempty"`
	// AX is the browser's view of the elements a first walk asked about.
	AX map[int]axState `json:"ax,omitempty"`
}

const defaultMaxNodes = 5000

// Observe returns a compact snapshot of the browsing context: the
// accessibility-relevant nodes (roles, names, values, states) with a handle
// on every node an action can target, through same- and cross-origin
// iframes and open shadow roots.
func (s *Session) Observe(ctx context.Context, req ObserveRequest) (*Snapshot, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	t, err := s.readyTab(ctx, req.ContextID)
	if err != nil {
		return nil, err
	}
	mode := req.Mode
	switch mode {
	case "":
		mode = ModeInteractive
	case ModeInteractive, ModeFull:
	default:
		return nil, fmt.Errorf("%w: mode must be interactive or full", ErrInvalidRequest)
	}
	maxNodes := req.MaxNodes
	if maxNodes <= 0 {
		maxNodes = defaultMaxNodes
	}
	if req.MaxBytes != 0 || req.Since != "" || req.Cursor != "" {
		// Fail closed: nothing here would honour them (a cap silently ignored drops nothing
		// visibly but overflows the caller's context).
		return nil, fmt.Errorf("%w: max_bytes, since and cursor are answered by the session's observation keeper, not by the engine", ErrInvalidRequest)
	}
	s.waitDocument(ctx, t)

	for attempt := 0; ; attempt++ {
		snap, err := s.observeOnce(ctx, t, req.Within, snapOpts{Mode: mode, Max: maxNodes})
		if errors.Is(err, errWorldGone) && attempt < 3 && req.Within == "" {
			s.waitDocument(ctx, t)
			continue
		}
		if errors.Is(err, errWorldGone) {
			return nil, fmt.Errorf("%w: the document changed during observe", ErrStaleNodeHandle)
		}
		if err != nil {
			return nil, err
		}
		n := 0
		snap.Nodes, snap.Truncated = trimNodes(snap.Nodes, maxNodes, &n, snap.Truncated)
		return snap, nil
	}
}

// ContextEpoch is the current document epoch of a browsing context ("" for the default one),
// without observing it (observation.EpochReader: what continuing a cursor checks).
func (s *Session) ContextEpoch(contextID string) (string, error) {
	_, end, err := s.begin(context.Background())
	if err != nil {
		return "", err
	}
	defer end()
	t, err := s.tab(contextID)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return t.epoch, nil
}

func (s *Session) observeOnce(ctx context.Context, t *tab, within string, opts snapOpts) (*Snapshot, error) {
	s.mu.Lock()
	epoch := t.epoch
	root := t.main
	if within != "" {
		r, f, err := s.reg.lookup(within)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if r.tab != t {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: the within node belongs to another browsing context", ErrNoSuchNode)
		}
		root, opts.Within = f, r.idx
	}
	s.mu.Unlock()

	nodes, res, err := s.snapFrame(ctx, t, root, opts)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{ContextID: t.id, EpochID: epoch, URL: res.U, Title: res.T, Nodes: nodes, Truncated: res.Tr}
	if root != t.main {
		var inf struct {
			U string `json:"u"`
			T string `json:"t"`
		}
		if err := s.inFrame(ctx, t, t.main, func(w *world) error { return s.eval(ctx, w, agentCall("info"), false, &inf) }); err == nil {
			snap.URL, snap.Title = inf.U, inf.T
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.epoch != epoch {
		return nil, errWorldGone
	}
	snap.Contexts = s.contextsLocked()
	if snap.Nodes == nil {
		snap.Nodes = []Node{}
	}
	return snap, nil
}

// snapFrame snapshots frame f and, stitched under their iframe nodes, the
// frames inside it.
func (s *Session) snapFrame(ctx context.Context, t *tab, f *frameState, opts snapOpts) ([]Node, snapResult, error) {
	var nodes []Node
	var res snapResult
	err := s.inFrame(ctx, t, f, func(w *world) error {
		err := s.withAX(ctx, w, func(ax map[int]axState) ([]int, error) {
			res = snapResult{}
			o := opts
			o.AX = ax
			err := s.evalJSON(ctx, w, agentCall("snapshot", o), &res)
			return res.Ask, err
		})
		if err != nil {
			return err
		}
		if res.Stale {
			return fmt.Errorf("%w: the within node is no longer in the document", ErrStaleNodeHandle)
		}
		s.mu.Lock()
		kids := t.childFramesLocked(f)
		s.mu.Unlock()
		sub := s.snapChildren(ctx, t, w, kids, opts, res.Wf != 0)

		s.mu.Lock()
		defer s.mu.Unlock()
		if f.doc != w.doc || f.worldSerial != w.serial {
			return errWorldGone
		}
		if res.Wf != 0 {
			nodes = sub[opts.Within]
			return nil
		}
		nodes = s.convertLocked(t, f, w, res.N, sub)
		return nil
	})
	return nodes, res, err
}

// withAX runs an agent walk (snapshot or query) and, when it asks for the
// browser's view of some elements, runs it again with that view.
func (s *Session) withAX(ctx context.Context, w *world, run func(ax map[int]axState) (ask []int, err error)) error {
	ask, err := run(nil)
	if err != nil || len(ask) == 0 {
		return err
	}
	states, err := s.axStates(ctx, w, ask)
	if err != nil || len(states) == 0 {
		return err
	}
	_, err = run(states)
	return err
}

// snapChildren snapshots the child frames in parallel, keyed by the index
// of their iframe element in the parent world. With onlyWithin, only the
// frame whose iframe is opts.Within is taken.
func (s *Session) snapChildren(ctx context.Context, t *tab, pw *world, kids []*frameState, opts snapOpts, onlyWithin bool) map[int][]Node {
	out := make(map[int][]Node)
	if len(kids) == 0 {
		return out
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	childOpts := snapOpts{Mode: opts.Mode, Max: opts.Max}
	for _, k := range kids {
		wg.Go(func() {
			owner, err := s.frameOwner(ctx, pw, k)
			if err != nil {
				s.b.log.Debug("frame owner", "err", err)
				return
			}
			if onlyWithin && owner != opts.Within {
				return
			}
			nodes, _, err := s.snapFrame(ctx, t, k, childOpts)
			if err != nil {
				s.b.log.Debug("frame snapshot", "err", err)
				return
			}
			mu.Lock()
			out[owner] = nodes
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// convertLocked turns agent records into nodes with handles.
func (s *Session) convertLocked(t *tab, f *frameState, w *world, rs []rec, frames map[int][]Node) []Node {
	return pagekit.Nodes(rs, func(idx int) string { return s.reg.issue(t, f, w.serial, idx) }, frames)
}

// trimNodes keeps the first max nodes in document order.
func trimNodes(ns []Node, limit int, n *int, truncated bool) ([]Node, bool) {
	return pagekit.TrimNodes(ns, limit, n, truncated)
}

// readyTab returns the tab once it is set up.
func (s *Session) readyTab(ctx context.Context, ctxID string) (*tab, error) {
	t, err := s.tab(ctxID)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.ready:
		return t, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waitDocument waits (a bounded time) until the main document of the tab
// has been parsed, so that an observe right after a navigation or a click
// sees the new page rather than a blank one.
func (s *Session) waitDocument(ctx context.Context, t *tab) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = s.waitFor(wctx, func() bool {
		m := t.main
		if t.closed || m == nil || m.loader == "" {
			return true
		}
		l := m.life[m.loader]
		return l["DOMContentLoaded"] || l["load"]
	})
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
