package ids

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Prefix is the type prefix of an identifier, underscore included ("tsk_").
type Prefix string

// The prefixes of CONTRACT "Identifiers".
const (
	// Task prefixes task ids.
	Task Prefix = "tsk_"
	// BrowserSession prefixes browser session ids.
	BrowserSession Prefix = "bs_"
	// BrowsingContext prefixes browsing context ids (a tab or frame tree).
	BrowsingContext Prefix = "ctx_"
	// DocumentEpoch prefixes document epoch ids; a context gets a new epoch
	// whenever its document changes.
	DocumentEpoch Prefix = "ep_"
	// NodeHandle prefixes node handles, valid in one session and one epoch.
	NodeHandle Prefix = "nd_"
	// Approval prefixes approval ids.
	Approval Prefix = "apr_"
	// Artifact prefixes artifact ids.
	Artifact Prefix = "art_"
	// Checkpoint prefixes checkpoint ids.
	Checkpoint Prefix = "chk_"
	// Command prefixes command ids.
	Command Prefix = "cmd_"
	// Receipt prefixes receipt ids.
	Receipt Prefix = "rcp_"
	// Event prefixes event ids.
	Event Prefix = "evt_"
	// Reconciliation prefixes reconciliation ids.
	Reconciliation Prefix = "rec_"
	// Handoff prefixes the ids of human handoffs of tasks.
	Handoff Prefix = "ho_"
	// Secret prefixes the ids of tenants' secrets (secret references).
	Secret Prefix = "sec_"
)

// BodyLen is the length of the part of a generated id after its prefix.
const BodyLen = 26

// MaxBodyLen is the longest part after the prefix that [Valid] accepts.
const MaxBodyLen = 64

// ErrTimeOutOfRange is returned by [Generate] for a time before the Unix
// epoch or after the 48-bit millisecond range (year 10889).
var ErrTimeOutOfRange = errors.New("ids: time outside the 48-bit millisecond range")

// alphabet is Crockford's base32 alphabet in lower case; its characters are
// in ascending byte order, so the encoding preserves numeric order.
const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

const maxMillis = 1<<48 - 1

// AllPrefixes returns every prefix of CONTRACT "Identifiers". The caller owns
// the returned slice.
func AllPrefixes() []Prefix {
	return []Prefix{
		Task, BrowserSession, BrowsingContext, DocumentEpoch, NodeHandle, Approval,
		Artifact, Checkpoint, Command, Receipt, Event, Reconciliation,
	}
}

// String returns the prefix itself.
func (p Prefix) String() string { return string(p) }

// New returns a new id with prefix p, from the current time and crypto/rand.
// It is safe for concurrent use. Ids made in the same millisecond are unique
// (80 random bits) but not ordered among themselves.
func New(p Prefix) string {
	// crypto/rand.Reader never fails (Go 1.24+), and time.Now is within range
	// until the year 10889.
	return must(Generate(p, time.Now(), rand.Reader))
}

// must returns id, or panics with err: an id that cannot be made is a broken process, not a
// request's failure.
func must(id string, err error) string {
	if err != nil {
		panic(fmt.Sprintf("ids: %v", err))
	}
	return id
}

// Generate returns an id with prefix p whose timestamp is now (truncated to
// the millisecond) and whose 80 random bits are read from entropy. It exists
// so that tests can fix time and randomness; production code calls [New].
func Generate(p Prefix, now time.Time, entropy io.Reader) (string, error) {
	ms := now.UnixMilli()
	if ms < 0 || ms > maxMillis {
		return "", fmt.Errorf("%w: %s", ErrTimeOutOfRange, now.UTC().Format(time.RFC3339Nano))
	}
	var b [16]byte
	b[0] = byte(ms >> 40)
	b[1] = byte(ms >> 32)
	b[2] = byte(ms >> 24)
	b[3] = byte(ms >> 16)
	b[4] = byte(ms >> 8)
	b[5] = byte(ms)
	if _, err := io.ReadFull(entropy, b[6:]); err != nil {
		return "", fmt.Errorf("ids: reading entropy: %w", err)
	}
	var sb strings.Builder
	sb.Grow(len(p) + BodyLen)
	sb.WriteString(string(p))
	sb.WriteString(encode(b))
	return sb.String(), nil
}

// encode returns the 26-character Crockford base32 form of the 128-bit
// big-endian value b (two leading zero bits pad it to 130 bits).
func encode(b [16]byte) string {
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	var out [BodyLen]byte
	for i := BodyLen - 1; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// Valid reports whether s is p followed by 1 to [MaxBodyLen] characters of
// [A-Za-z0-9_-], that is whether s matches ^<p>[A-Za-z0-9_-]{1,64}$. It
// checks syntax only: a valid id may name nothing. An empty prefix is never
// valid.
func Valid(p Prefix, s string) bool {
	if p == "" {
		return false
	}
	body, ok := strings.CutPrefix(s, string(p))
	if !ok || len(body) == 0 || len(body) > MaxBodyLen {
		return false
	}
	for i := range len(body) {
		if !bodyByte(body[i]) {
			return false
		}
	}
	return true
}

// PrefixOf returns the prefix of [AllPrefixes] that s is a [Valid] id of.
func PrefixOf(s string) (Prefix, bool) {
	for _, p := range AllPrefixes() {
		if Valid(p, s) {
			return p, true
		}
	}
	return "", false
}

func bodyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}
