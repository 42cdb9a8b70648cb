package historychain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Entry is one history event as the chain sees it: every column of agent_task_event but the
// digests themselves.
type Entry struct {
	Tenant    string
	TaskID    string
	Seq       int64
	EventID   string
	Type      string
	Time      time.Time // stored to the microsecond: finer digits are not part of the event
	Actor     string
	Cause     string
	CommandID string          // "" when the event has no command
	Data      json.RawMessage // a JSON object
}

// Canonical is the bytes the chain links: a canonical JSON object (CanonicalJSON) of the event's
// columns, with a version so that the form can change without two forms ever colliding.
func (e *Entry) Canonical() ([]byte, error) {
	data, err := CanonicalJSON(e.Data)
	if err != nil {
		return nil, fmt.Errorf("event %d data: %w", e.Seq, err)
	}
	if len(data) == 0 || data[0] != '{' {
		return nil, fmt.Errorf("event %d data: not a JSON object", e.Seq)
	}
	// The members in key order (actor, cause, command_id, data, event_id, event_type,
	// occurred_at, seq, task_id, tenant_id, v), written directly: this runs for every event a
	// command appends.
	var b bytes.Buffer
	b.Grow(len(data) + 256)
	b.WriteString(`{"actor":`)
	writeString(&b, e.Actor)
	b.WriteString(`,"cause":`)
	writeString(&b, e.Cause)
	b.WriteString(`,"command_id":`)
	if e.CommandID == "" {
		b.WriteString("null")
	} else {
		writeString(&b, e.CommandID)
	}
	b.WriteString(`,"data":`)
	b.Write(data)
	b.WriteString(`,"event_id":`)
	writeString(&b, e.EventID)
	b.WriteString(`,"event_type":`)
	writeString(&b, e.Type)
	b.WriteString(`,"occurred_at":`)
	writeString(&b, FormatTime(e.Time))
	b.WriteString(`,"seq":`)
	b.WriteString(strconv.FormatInt(e.Seq, 10))
	b.WriteString(`,"task_id":`)
	writeString(&b, e.TaskID)
	b.WriteString(`,"tenant_id":`)
	writeString(&b, e.Tenant)
	b.WriteString(`,"v":1}`)
	return b.Bytes(), nil
}

// FormatTime is an event's time as the chain hashes it: UTC, to the microsecond (PostgreSQL's
// timestamptz precision), always six fractional digits.
func FormatTime(t time.Time) string {
	return t.UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.000000Z")
}

// CanonicalJSON rewrites one JSON value in the chain's canonical form, so that a value and the
// same value read back from PostgreSQL's jsonb (which reorders keys, drops whitespace and may
// respell numbers) give the same bytes. Unlike the idempotency fingerprints' canonical form, which
// lives as long as one key's retention, this one must give the same bytes in every release and
// under every Go version for as long as a history is kept, so it spells strings and numbers
// itself:
//   - object members sorted by key (by bytes of UTF-8, which is code point order); of duplicate
//     keys the last one counts, as in jsonb;
//   - no whitespace;
//   - strings with the fewest escapes (writeString);
//   - numbers exact, in their shortest decimal spelling: digits when the value is an integer of at
//     most 21 digits, otherwise digits, "e" and the exponent (1.50 → 15e-1,
//     1e+20 → 100000000000000000000, 1000000000000000000000 → 1e21, -0 → 0).
func CanonicalJSON(raw []byte) ([]byte, error) { return canonical(raw) }

// maxDepth bounds nesting: a canonical form is computed for the server's own event data, and for
// bundles handed to `bap bundle verify`, which may be hostile.
const maxDepth = 200

// writeString writes s as a JSON string with the chain's own escapes, so that no library's
// choices (which differ between versions) move a digest: '"' and '\\' are escaped, as are
// control characters (\n, \r and \t by name, the others as \u00xx); every other character is
// written as it is, in UTF-8. Invalid UTF-8 cannot reach here: the JSON decoder has replaced it
// with U+FFFD already.
func writeString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// canonicalNumber spells a JSON number's exact value in one way (see CanonicalJSON).
func canonicalNumber(s string) (string, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > 1_000_000 || e < -1_000_000 {
			return "", fmt.Errorf("canonical JSON: number %q out of range", s)
		}
		mant, exp = s[:i], e
	}
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		exp -= len(mant) - i - 1
		mant = mant[:i] + mant[i+1:]
	}
	mant = strings.TrimLeft(mant, "0")
	if mant == "" {
		return "0", nil
	}
	for strings.HasSuffix(mant, "0") {
		mant = mant[:len(mant)-1]
		exp++
	}
	var out string
	if exp >= 0 && len(mant)+exp <= 21 {
		out = mant + strings.Repeat("0", exp)
	} else {
		out = mant + "e" + strconv.Itoa(exp)
	}
	if neg {
		out = "-" + out
	}
	return out, nil
}
