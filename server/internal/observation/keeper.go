package observation

import (
	"context"
	"crypto/rand"
	"fmt"
	"regexp"
	"sync"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// Observer is an engine session as the keeper drives it: whole snapshots of a browsing context,
// without budgets (Since, Cursor and MaxBytes are never passed on).
type Observer interface {
	// DefaultContext is the context an ObserveRequest without ContextID observes.
	DefaultContext() string
	Observe(ctx context.Context, req page.ObserveRequest) (*page.Snapshot, error)
}

// EpochReader is what an Observer may also offer: a context's current document epoch without an
// observation. Without it, continuing a cursor costs a one-node observe to learn the epoch.
type EpochReader interface {
	ContextEpoch(contextID string) (string, error)
}

// Bounds of what a session keeps.
const (
	// PerContext is how many recent observations of one browsing context are kept.
	PerContext = 4
	// PerSession is how many are kept across all the contexts of a session.
	PerSession = 12
	// forgotten is how many dropped observations are remembered by id and epoch, so that a since
	// or cursor naming one still gets the right refusal (observation_stale for another epoch).
	forgotten = 64
)

// Bounds of ObserveRequest.MaxBytes (the spec's ObserveRequest.max_bytes).
const (
	MinBytes = 2048
	MaxBytes = 16 << 20
)

// Node changes of a delta (the spec's NodeChange values).
const (
	ChangeAdded   = "added"
	ChangeChanged = "changed"
	ChangeRemoved = "removed"
)

// kept is one kept observation.
type kept struct {
	id        string
	contextID string
	epoch     string
	// mode, within and maxNodes are the options it observed with (what a since compares with).
	mode, within string
	maxNodes     int
	url, title   string
	truncated    bool
	since        string
	contexts     []page.ContextInfo
	// tree is the whole observed tree (what a later since compares with); answer is what the
	// observe answers: tree, or the delta against since, cut into parts by max_bytes.
	tree   []page.Node
	answer *parts
	seq    uint64
}

// tombstone is a dropped observation: enough to refuse it precisely.
type tombstone struct{ id, contextID, epoch string }

// Keeper keeps one session's observations and the key its cursors are sealed with. It is safe for
// concurrent use; the zero value is not: use [NewKeeper].
type Keeper struct {
	key []byte

	mu    sync.Mutex
	byCtx map[string][]*kept // newest last
	count int
	seq   uint64
	tombs [forgotten]tombstone
	next  int
}

// NewKeeper returns the keeper of one session, with a fresh random cursor key: a cursor is good
// only for the session whose keeper sealed it.
func NewKeeper() *Keeper {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails (Go 1.24+)
	return &Keeper{key: key, byCtx: make(map[string][]*kept)}
}

var (
	obsIDRe = regexp.MustCompile(`^ob_[A-Za-z0-9_-]{1,64}$`)
	ctxIDRe = regexp.MustCompile(`^ctx_[A-Za-z0-9_-]{1,64}$`)
	epIDRe  = regexp.MustCompile(`^ep_[A-Za-z0-9_-]{1,64}$`)
)

// Observe answers req through o: a fresh observation (whole, or the delta against req.Since),
// or the next part of a cut one (req.Cursor), under req.MaxBytes.
func (k *Keeper) Observe(ctx context.Context, o Observer, req page.ObserveRequest) (*page.Snapshot, error) {
	if req.MaxBytes != 0 && (req.MaxBytes < MinBytes || req.MaxBytes > MaxBytes) {
		return nil, fmt.Errorf("%w: max_bytes must be between %d and %d", page.ErrInvalidRequest, MinBytes, MaxBytes)
	}
	contextID := req.ContextID
	if contextID == "" {
		contextID = o.DefaultContext()
	}
	if req.Cursor != "" {
		if req.Since != "" || req.Within != "" || req.Mode != "" || req.MaxNodes != 0 {
			return nil, fmt.Errorf("%w: a cursor continues its observation: only context_id and max_bytes may accompany it", page.ErrInvalidRequest)
		}
		return k.continueCursor(ctx, o, contextID, req)
	}
	var base *kept
	if req.Since != "" {
		var err error
		if base, err = k.base(ctx, o, contextID, req.Since); err != nil {
			return nil, err
		}
		if req, err = likeBase(req, base); err != nil {
			return nil, err
		}
	}
	if req.Mode == "" {
		req.Mode = page.ModeInteractive
	}
	raw := req
	raw.Since, raw.Cursor, raw.MaxBytes = "", "", 0
	snap, err := o.Observe(ctx, raw)
	if err != nil {
		return nil, err
	}
	if base != nil && base.epoch != snap.EpochID {
		return nil, staleErr(base.id, base.epoch, snap.EpochID)
	}
	ob := &kept{id: pagekit.ObservationID(), contextID: snap.ContextID, epoch: snap.EpochID, mode: req.Mode, within: req.Within,
		maxNodes: req.MaxNodes, url: snap.URL, title: snap.Title, truncated: snap.Truncated, contexts: snap.Contexts, tree: snap.Nodes}
	tree := snap.Nodes
	if base != nil {
		ob.since, tree = base.id, Diff(base.tree, snap.Nodes)
	}
	if tree == nil {
		tree = []page.Node{}
	}
	ob.answer = newParts(tree)
	k.keep(ob)
	return k.part(ob, 0, req.MaxBytes, 1)
}

// likeBase gives a since request the options of the observation it compares with (a delta
// compares like with like), refusing options that differ.
func likeBase(req page.ObserveRequest, base *kept) (page.ObserveRequest, error) {
	if req.Mode == "" {
		req.Mode = base.mode
	}
	if req.Within == "" {
		req.Within = base.within
	}
	if req.MaxNodes == 0 {
		req.MaxNodes = base.maxNodes
	}
	if req.Mode != base.mode || req.Within != base.within || req.MaxNodes != base.maxNodes {
		return req, fmt.Errorf("%w: since compares like with like: %s observed with mode %s, within %q, max_nodes %d",
			page.ErrInvalidRequest, base.id, base.mode, base.within, base.maxNodes)
	}
	return req, nil
}

func staleErr(id, was, now string) error {
	return fmt.Errorf("%w: %s observed epoch %s; the context is now in %s", page.ErrObservationStale, id, was, now)
}

// base finds the observation a since names, of the given context.
func (k *Keeper) base(ctx context.Context, o Observer, contextID, id string) (*kept, error) {
	if !obsIDRe.MatchString(id) {
		return nil, fmt.Errorf("%w: since must be an observation id (ob_…)", page.ErrInvalidRequest)
	}
	ob, tomb := k.find(contextID, id)
	if ob != nil {
		return ob, nil
	}
	if tomb != nil {
		// Dropped: because its context moved on to another epoch (stale), or for room (gone).
		epoch, err := currentEpoch(ctx, o, contextID)
		if err != nil {
			return nil, err
		}
		if epoch != tomb.epoch {
			return nil, staleErr(id, tomb.epoch, epoch)
		}
	}
	return nil, notKept(id)
}

func notKept(id string) error {
	return fmt.Errorf("%w: %s is not among the recent observations of this context", page.ErrNoSuchObservation, id)
}

// find returns the kept observation id of a context or, when it was dropped, its tombstone.
func (k *Keeper) find(contextID, id string) (*kept, *tombstone) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, ob := range k.byCtx[contextID] {
		if ob.id == id {
			return ob, nil
		}
	}
	for i := range k.tombs {
		if t := k.tombs[i]; t.id == id && t.contextID == contextID {
			return nil, &t
		}
	}
	return nil, nil
}

// keep records ob, dropping its context's observations of other epochs and the oldest beyond the
// bounds.
func (k *Keeper) keep(ob *kept) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	ob.seq = k.seq
	var l []*kept
	for _, o := range k.byCtx[ob.contextID] {
		if o.epoch == ob.epoch {
			l = append(l, o)
		} else {
			k.dropLocked(o)
		}
	}
	l = append(l, ob)
	k.count++
	for len(l) > PerContext {
		k.dropLocked(l[0])
		l = l[1:]
	}
	k.byCtx[ob.contextID] = l
	for k.count > PerSession {
		k.evictOldestLocked()
	}
}

func (k *Keeper) dropLocked(o *kept) {
	k.tombs[k.next] = tombstone{id: o.id, contextID: o.contextID, epoch: o.epoch}
	k.next = (k.next + 1) % forgotten
	k.count--
}

func (k *Keeper) evictOldestLocked() {
	var oldest *kept
	for _, l := range k.byCtx {
		if len(l) > 0 && (oldest == nil || l[0].seq < oldest.seq) {
			oldest = l[0]
		}
	}
	if oldest == nil {
		k.count = 0
		return
	}
	k.dropLocked(oldest)
	l := k.byCtx[oldest.contextID][1:]
	if len(l) == 0 {
		delete(k.byCtx, oldest.contextID)
		return
	}
	k.byCtx[oldest.contextID] = l
}

// Forget drops what the keeper holds of a browsing context (it closed).
func (k *Keeper) Forget(contextID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, o := range k.byCtx[contextID] {
		k.dropLocked(o)
	}
	delete(k.byCtx, contextID)
}

// continueCursor answers the next part of the observation a cursor names.
func (k *Keeper) continueCursor(ctx context.Context, o Observer, contextID string, req page.ObserveRequest) (*page.Snapshot, error) {
	c, err := openCursor(k.key, req.Cursor)
	if err != nil {
		return nil, err
	}
	if c.contextID != contextID {
		return nil, fmt.Errorf("%w: the cursor continues an observation of another browsing context", page.ErrInvalidRequest)
	}
	epoch, err := currentEpoch(ctx, o, contextID)
	if err != nil {
		return nil, err
	}
	if epoch != c.epoch {
		return nil, staleErr(c.obsID, c.epoch, epoch)
	}
	ob, _ := k.find(contextID, c.obsID)
	if ob == nil {
		// Of this epoch (the cursor says so), but dropped for room.
		return nil, notKept(c.obsID)
	}
	if ob.epoch != c.epoch || c.offset > ob.answer.len() {
		return nil, errBadCursor
	}
	maxBytes := c.maxBytes
	if req.MaxBytes != 0 {
		maxBytes = req.MaxBytes
	}
	return k.part(ob, c.offset, maxBytes, c.part)
}

// currentEpoch is the document epoch a context is in now.
func currentEpoch(ctx context.Context, o Observer, contextID string) (string, error) {
	if er, ok := o.(EpochReader); ok {
		return er.ContextEpoch(contextID)
	}
	snap, err := o.Observe(ctx, page.ObserveRequest{ContextID: contextID, MaxNodes: 1})
	if err != nil {
		return "", err
	}
	return snap.EpochID, nil
}

// part makes the snapshot of part number part of ob, from its node number from.
func (k *Keeper) part(ob *kept, from, maxBytes, part int) (*page.Snapshot, error) {
	env := envelopeBytes(ob)
	nodes, size, next, done, err := ob.answer.cut(from, maxBytes, env)
	if err != nil {
		return nil, err
	}
	snap := &page.Snapshot{ContextID: ob.contextID, EpochID: ob.epoch, URL: ob.url, Title: ob.title, Nodes: nodes,
		ObservationID: ob.id, Since: ob.since, Truncated: ob.truncated, ApproxTokens: ApproxTokens(size), Contexts: ob.contexts}
	if !done {
		if part >= 1<<16-1 {
			return nil, fmt.Errorf("%w: this observation needs more than %d parts; raise max_bytes", page.ErrInvalidRequest, part)
		}
		snap.Continuation = &page.Continuation{
			Cursor: sealCursor(k.key, cursor{obsID: ob.id, contextID: ob.contextID, epoch: ob.epoch,
				offset: next, maxBytes: maxBytes, part: part + 1}),
			Part:           part,
			RemainingNodes: ob.answer.len() - next,
		}
	}
	return snap, nil
}

// ApproxTokens is the token estimate of n bytes of JSON (a model tokenizer averages about four
// bytes of such text per token).
func ApproxTokens(n int) int { return (n + 3) / 4 }
