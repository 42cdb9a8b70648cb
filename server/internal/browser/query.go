package browser

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/pagekit"
)

type queryArgs struct {
	pagekit.QueryArgs
	// AX is the browser's view of the elements a first walk asked about.
	AX map[int]axState `json:"ax,omitempty"`
}

type queryResult struct {
	N     []rec `json:"n"`
	Stale bool  `json:"stale"`
	Ask   []int `json:"ask"`
}

// match is one query match with where it was found.
type match struct {
	node  Node
	score float64
	order int // frame order, then document order
	rec   *handleRec
}

func validQuery(q Query) error { return pagekit.ValidQuery(q) }

// QueryNodes finds the nodes matching the query in every frame of the
// browsing context (or within a node), best match first: exact matches
// before case-insensitive ones, then substring matches; interactive nodes
// before others; then document order.
func (s *Session) QueryNodes(ctx context.Context, req QueryRequest) (*QueryResult, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := validQuery(req.Query); err != nil {
		return nil, err
	}
	t, err := s.readyTab(ctx, req.ContextID)
	if err != nil {
		return nil, err
	}
	s.waitDocument(ctx, t)
	limit := req.Limit
	if limit <= 0 {
		limit = 50
	}
	ms, epoch, err := s.query(ctx, t, req.Query, limit)
	if err != nil {
		return nil, err
	}
	out := &QueryResult{EpochID: epoch, Nodes: make([]Node, 0, len(ms))}
	for _, m := range ms {
		out.Nodes = append(out.Nodes, m.node)
	}
	return out, nil
}

// query runs the query in the tab's frames and returns the ranked matches.
func (s *Session) query(ctx context.Context, t *tab, q Query, limit int) ([]match, string, error) {
	for attempt := 0; ; attempt++ {
		ms, epoch, err := s.queryOnce(ctx, t, q, limit)
		if errors.Is(err, errWorldGone) && attempt < 3 && q.Within == "" {
			s.waitDocument(ctx, t)
			continue
		}
		if errors.Is(err, errWorldGone) {
			return nil, "", fmt.Errorf("%w: the document changed during the query", ErrStaleNodeHandle)
		}
		return ms, epoch, err
	}
}

func (s *Session) queryOnce(ctx context.Context, t *tab, q Query, limit int) ([]match, string, error) {
	args := queryArgs{QueryArgs: pagekit.NewQueryArgs(q, limit)}
	s.mu.Lock()
	epoch := t.epoch
	var frames []*frameState
	var withinFrame *frameState
	if q.Within != "" {
		r, f, err := s.reg.lookup(q.Within)
		if err != nil {
			s.mu.Unlock()
			return nil, "", err
		}
		if r.tab != t {
			s.mu.Unlock()
			return nil, "", fmt.Errorf("%w: the within node belongs to another browsing context", ErrNoSuchNode)
		}
		withinFrame = f
		args.Within = r.idx
	}
	// Frames in tree order, the main frame (or the within node's frame) first.
	if withinFrame != nil {
		frames = t.subtreeLocked(withinFrame)
	} else {
		frames = t.subtreeLocked(t.main)
	}
	s.mu.Unlock()
	if withinFrame != nil {
		frames = s.framesWithin(ctx, t, withinFrame, args.Within, frames)
	}

	var mu sync.Mutex
	var all []match
	var firstErr error
	var wg sync.WaitGroup
	for fi, f := range frames {
		wg.Go(func() {
			a := args
			if f != withinFrame {
				a.Within = 0
			}
			err := s.inFrame(ctx, t, f, func(w *world) error {
				var res queryResult
				err := s.withAX(ctx, w, func(ax map[int]axState) ([]int, error) {
					res = queryResult{}
					a.AX = ax
					err := s.eval(ctx, w, agentCall("query", a), false, &res)
					return res.Ask, err
				})
				if err != nil {
					return err
				}
				if res.Stale {
					return fmt.Errorf("%w: the within node is no longer in the document", ErrStaleNodeHandle)
				}
				s.mu.Lock()
				defer s.mu.Unlock()
				if f.doc != w.doc || f.worldSerial != w.serial {
					return errWorldGone
				}
				for i := range res.N {
					r := res.N[i]
					r.C = nil
					n := s.convertLocked(t, f, w, []rec{r}, nil)[0]
					hr := s.reg.byID[n.NodeID]
					mu.Lock()
					all = append(all, match{node: n, score: r.Sc, order: fi<<20 | i, rec: hr})
					mu.Unlock()
				}
				return nil
			})
			if err != nil && f == frames[0] {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			} else if err != nil {
				s.b.log.Debug("query in a frame", "err", err)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, "", firstErr
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].score != all[j].score {
			return all[i].score > all[j].score
		}
		return all[i].order < all[j].order
	})
	if len(all) > limit {
		all = all[:limit]
	}
	s.mu.Lock()
	cur := t.epoch
	s.mu.Unlock()
	if cur != epoch {
		return nil, "", errWorldGone
	}
	return all, epoch, nil
}

// framesWithin keeps, of the descendants of the within node's frame, those
// whose iframe element lies inside the within node (frames[0] is the within
// frame itself).
func (s *Session) framesWithin(ctx context.Context, t *tab, wf *frameState, within int, frames []*frameState) []*frameState {
	keep := map[*frameState]bool{wf: true}
	out := []*frameState{wf}
	for _, f := range frames[1:] {
		s.mu.Lock()
		parent := t.frames[f.parent]
		s.mu.Unlock()
		if parent == nil {
			continue
		}
		if parent != wf {
			if keep[parent] {
				keep[f] = true
				out = append(out, f)
			}
			continue
		}
		ok := false
		_ = s.inFrame(ctx, t, wf, func(w *world) error {
			owner, err := s.frameOwner(ctx, w, f)
			if err != nil {
				return err
			}
			return s.eval(ctx, w, agentCall("contains", within, owner), false, &ok)
		})
		if ok {
			keep[f] = true
			out = append(out, f)
		}
	}
	return out
}
