package browser

import (
	"fmt"

	"github.com/chromedp/cdproto/cdp"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// The handle registry. A node handle (nd_…) names one element of one
// document of one session: the element's index in the page agent's world of
// that frame, the frame's document generation and the tab's epoch. Handles
// are minted by pagekit.Minter, as the BiDi adapter's are.

// handleRec is what a handle stands for.
type handleRec struct {
	tab   *tab
	frame cdp.FrameID
	epoch string
	doc   uint64
	world uint64
	idx   int
}

type handleKey struct {
	frame cdp.FrameID
	world uint64
	idx   int
}

// registry is guarded by Session.mu.
type registry struct {
	mint  pagekit.Minter
	byID  map[string]*handleRec
	byKey map[handleKey]string
	stale map[string]struct{}
}

func (r *registry) init() {
	r.mint = pagekit.NewMinter()
	r.byID = make(map[string]*handleRec)
	r.byKey = make(map[handleKey]string)
	r.stale = make(map[string]struct{})
}

// issue returns the handle of the element (the same one for the same element
// of the same document and world).
func (r *registry) issue(t *tab, f *frameState, world uint64, idx int) string {
	k := handleKey{frame: f.id, world: world, idx: idx}
	if h, ok := r.byKey[k]; ok {
		return h
	}
	h := r.mint.Next()
	r.byID[h] = &handleRec{tab: t, frame: f.id, epoch: t.epoch, doc: f.doc, world: world, idx: idx}
	r.byKey[k] = h
	return h
}

// lookup returns the live record of a handle, or ErrStaleNodeHandle /
// ErrNoSuchNode.
func (r *registry) lookup(h string) (*handleRec, *frameState, error) {
	rec := r.byID[h]
	if rec == nil {
		if _, ok := r.stale[h]; ok {
			return nil, nil, fmt.Errorf("%w: the document it belonged to has changed", ErrStaleNodeHandle)
		}
		return nil, nil, fmt.Errorf("%w: %q is not a node handle of this session", page.ErrUnknownHandle, h)
	}
	t := rec.tab
	if t.closed {
		return nil, nil, fmt.Errorf("%w: its browsing context was closed", ErrStaleNodeHandle)
	}
	if t.epoch != rec.epoch {
		return nil, nil, fmt.Errorf("%w: the browsing context navigated since it was issued", ErrStaleNodeHandle)
	}
	f := t.frames[rec.frame]
	if f == nil || f.doc != rec.doc {
		return nil, nil, fmt.Errorf("%w: its frame's document has changed", ErrStaleNodeHandle)
	}
	if f.worldSerial != rec.world {
		return nil, nil, fmt.Errorf("%w: its document was replaced", ErrStaleNodeHandle)
	}
	return rec, f, nil
}

// purgeFrame retires the handles of documents that are gone: those of the
// tab's old epochs and those of the frame's old documents.
func (r *registry) purgeFrame(t *tab, f *frameState) {
	for h, rec := range r.byID {
		if rec.tab != t {
			continue
		}
		if rec.epoch != t.epoch || (rec.frame == f.id && rec.doc != f.doc) {
			r.retire(h, rec)
		}
	}
}

// purgeWorld retires the handles of a frame's replaced world.
func (r *registry) purgeWorld(t *tab, f *frameState, world uint64) {
	for h, rec := range r.byID {
		if rec.tab == t && rec.frame == f.id && rec.world == world {
			r.retire(h, rec)
		}
	}
}

func (r *registry) retire(h string, rec *handleRec) {
	delete(r.byID, h)
	delete(r.byKey, handleKey{frame: rec.frame, world: rec.world, idx: rec.idx})
	r.stale[h] = struct{}{}
}
