package historychain

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
)

// Size is the length of a digest and of a public hash, in bytes.
const Size = sha256.Size

// Genesis is the prev_digest (and the previous public hash) of a task's first chained event.
var Genesis = make([]byte, Size)

// Chain links events for one key. Not safe for concurrent use: one per goroutine, or guard it.
type Chain struct{ mac hash.Hash }

// New returns a chain keyed with key (the server key's audit-chain derivation).
func New(key []byte) *Chain { return &Chain{mac: hmac.New(sha256.New, key)} }

// Link is the digest of an event whose canonical bytes are canonical and whose predecessor's
// digest is prev: HMAC-SHA256(key, canonical ‖ prev).
func (c *Chain) Link(canonical, prev []byte) []byte {
	c.mac.Reset()
	c.mac.Write(canonical)
	c.mac.Write(prev)
	return c.mac.Sum(nil)
}

// PublicLink is the public hash through an event: SHA-256(prev ‖ canonical), where prev is the
// public hash through the event before it (Genesis for the first). Anyone can recompute it.
func PublicLink(prev, canonical []byte) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(canonical)
	return h.Sum(nil)
}
