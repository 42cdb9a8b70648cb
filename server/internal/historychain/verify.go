package historychain

import (
	"bytes"
	"encoding/hex"
	"fmt"
)

// Event is a stored history event with its links (nil digests: an event from before the chain).
type Event struct {
	Entry
	PrevDigest []byte
	Digest     []byte
}

// Anchor is a stored anchor: the head it pins and the signed statement of it.
type Anchor struct {
	Seq           int64
	Digest        []byte
	HistorySHA256 []byte
	Statement     string // compact JWS
}

// Why a chain breaks at a seq.
const (
	// BreakMissing: the event of that seq is not there (a gap, or a tail the task or an anchor
	// says existed).
	BreakMissing = "missing"
	// BreakUnchained: the event carries no digest although events before it do.
	BreakUnchained = "unchained"
	// BreakLink: the event's prev_digest is not the digest of the event before it.
	BreakLink = "link_mismatch"
	// BreakDigest: the event's digest is not the keyed digest of its content (it was edited).
	BreakDigest = "digest_mismatch"
	// BreakAnchor: an anchor pins another digest or public hash at that seq than the history has.
	BreakAnchor = "anchor_mismatch"
	// BreakAnchorSignature: an anchor's statement does not verify, or says something else than
	// its row.
	BreakAnchorSignature = "anchor_signature"
)

// Break is where a chain first fails to verify.
type Break struct {
	Seq    int64
	Reason string
	Detail string
}

// AnchorCheck is the verdict on one anchor.
type AnchorCheck struct {
	Anchor
	KeyID string
	Valid bool
}

// Report is the outcome of Verify.
type Report struct {
	// Checked is how many events were read.
	Checked int
	// ChainedFrom is the first chained seq (1 unless the task began before the chain existed; 0
	// when no event is chained).
	ChainedFrom int64
	// HeadSeq, HeadDigest and HistorySHA256 are the last event's seq, digest and public hash.
	HeadSeq       int64
	HeadDigest    []byte
	HistorySHA256 []byte
	Anchors       []AnchorCheck
	// Break is nil when the chain is valid.
	Break *Break
}

// Valid reports whether the chain verified.
func (r *Report) Valid() bool { return r.Break == nil }

func (r *Report) breakAt(seq int64, reason, detail string) {
	if r.Break == nil || seq < r.Break.Seq {
		r.Break = &Break{Seq: seq, Reason: reason, Detail: detail}
	}
}

// Verify checks a task's events (in seq order) and anchors. With a key (the server's own check)
// every digest is recomputed; without one (an outsider's, on a bundle) the links and the public
// hash are, which the anchors' signatures pin. lastSeq is the seq the task itself says is its last
// (0 when unknown). keys verifies the anchors' signatures; nil skips that check, for a caller who
// verifies them elsewhere.
func Verify(key []byte, events []Event, lastSeq int64, anchors []Anchor, keys KeySet) *Report {
	r := &Report{}
	var chain *Chain
	if key != nil {
		chain = New(key)
	}
	type head struct{ digest, public []byte }
	heads := make(map[int64]head, len(anchors))
	want := make(map[int64]bool, len(anchors))
	for _, a := range anchors {
		want[a.Seq] = true
	}
	var prev, public []byte
	expected := int64(1)
	for i := range events {
		e := &events[i]
		r.Checked++
		if e.Seq != expected {
			r.breakAt(expected, BreakMissing, fmt.Sprintf("the next event is seq %d", e.Seq))
			break
		}
		expected++
		if e.Digest == nil {
			if prev != nil {
				r.breakAt(e.Seq, BreakUnchained, "events before it are chained")
				break
			}
			continue // from before the chain existed
		}
		if prev == nil {
			r.ChainedFrom, prev, public = e.Seq, Genesis, Genesis
		}
		if !bytes.Equal(e.PrevDigest, prev) {
			r.breakAt(e.Seq, BreakLink, "prev_digest is not the digest of the event before it")
		}
		canonical, err := e.Canonical()
		if err != nil {
			r.breakAt(e.Seq, BreakDigest, err.Error())
			break
		}
		if chain != nil && !bytes.Equal(chain.Link(canonical, e.PrevDigest), e.Digest) {
			r.breakAt(e.Seq, BreakDigest, "the digest is not that of the event's content")
		}
		prev = e.Digest
		public = PublicLink(public, canonical)
		r.HeadSeq, r.HeadDigest, r.HistorySHA256 = e.Seq, e.Digest, public
		if want[e.Seq] {
			heads[e.Seq] = head{e.Digest, public}
		}
	}
	last := expected - 1
	if r.Break == nil && lastSeq > last {
		r.breakAt(last+1, BreakMissing, fmt.Sprintf("the task's last seq is %d", lastSeq))
	}
	for _, a := range anchors {
		c := AnchorCheck{Anchor: a}
		switch h, ok := heads[a.Seq]; {
		case a.Seq > last:
			r.breakAt(last+1, BreakMissing, fmt.Sprintf("an anchor pins seq %d", a.Seq))
		case !ok:
			r.breakAt(a.Seq, BreakAnchor, "the anchor pins an event that is not chained")
		case !bytes.Equal(h.digest, a.Digest) || !bytes.Equal(h.public, a.HistorySHA256):
			r.breakAt(a.Seq, BreakAnchor, "the anchor pins another head than the history has")
		default:
			c.Valid = true
		}
		if keys != nil {
			st, kid, err := ParseStatement(a.Statement, keys)
			c.KeyID = kid
			switch {
			case err != nil:
				c.Valid = false
				r.breakAt(a.Seq, BreakAnchorSignature, err.Error())
			case len(events) > 0 && (st.TaskID != events[0].TaskID || st.Tenant != events[0].Tenant):
				c.Valid = false
				r.breakAt(a.Seq, BreakAnchorSignature, "the signed statement is of another task")
			case st.Seq != a.Seq || st.Digest != hex.EncodeToString(a.Digest) || st.HistorySHA256 != hex.EncodeToString(a.HistorySHA256):
				c.Valid = false
				r.breakAt(a.Seq, BreakAnchorSignature, "the signed statement pins another head than its row")
			}
		}
		r.Anchors = append(r.Anchors, c)
	}
	return r
}
