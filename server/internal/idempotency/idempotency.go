// Package idempotency holds the pure rules of BAP's Idempotency-Key handling: which keys are
// well-formed, how a request is reduced to a fingerprint, and what a second request with a known key
// gets. It imports no database or transport package; the app layer applies these rules inside the
// command's transaction.
package idempotency

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"strings"
)

// MaxKeyLength is the longest Idempotency-Key accepted (CONTRACT: 1–255 visible ASCII characters).
const MaxKeyLength = 255

// ErrInvalidKey reports an Idempotency-Key that is empty, too long or not visible ASCII.
var ErrInvalidKey = errors.New("Idempotency-Key must be 1–255 visible ASCII characters")

// ParseKey validates a raw Idempotency-Key header value. Surrounding optional whitespace is
// trimmed (RFC 9110 field values); an RFC 8941 sf-string form ("…") is accepted and unquoted, so
// clients following the IETF draft and clients sending a bare token both work.
func ParseKey(raw string) (string, error) {
	k := strings.Trim(raw, " \t")
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
		// An sf-string holds no bare '"' and no escape (BAP keys never need one): `""""` would
		// otherwise be the key `""`, which parses differently when sent again.
		if strings.ContainsAny(k, `"\`) {
			return "", ErrInvalidKey
		}
	}
	if k == "" || len(k) > MaxKeyLength {
		return "", ErrInvalidKey
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", ErrInvalidKey
		}
	}
	return k, nil
}

// Fingerprint is the HMAC-SHA256, under a server key, of a request's operation, target and
// canonical body: two requests with one key are "the same request" exactly when their
// fingerprints are equal. It is keyed because bodies hold protected values (what a fill types):
// an unkeyed hash of a body with a 4-digit PIN is reversed offline by trying the 10 000 PINs
// (ADR 0015).
type Fingerprint [sha256.Size]byte

// MinKeySize is the shortest fingerprint key accepted.
const MinKeySize = 32

// ErrShortKey reports a fingerprint key shorter than MinKeySize.
var ErrShortKey = errors.New("idempotency: a fingerprint key must be at least 32 bytes")

// Fingerprinter reduces requests to fingerprints under one key. Safe for concurrent use.
type Fingerprinter struct{ key []byte }

// NewFingerprinter returns the fingerprinter of key (at least MinKeySize bytes: a key derived
// from the server key for this purpose alone).
func NewFingerprinter(key []byte) (*Fingerprinter, error) {
	if len(key) < MinKeySize {
		return nil, ErrShortKey
	}
	return &Fingerprinter{key: bytes.Clone(key)}, nil
}

// Fingerprint reduces a request to its fingerprint. target names the objects the route
// addresses (its path parameters in route order); body is the JSON body, canonicalised so that
// key order and insignificant whitespace do not matter. An empty body counts as {}.
func (f *Fingerprinter) Fingerprint(operation string, target []string, body []byte) (Fingerprint, error) {
	canon, err := Canonical(body)
	if err != nil {
		return Fingerprint{}, err
	}
	return f.Sum(operation, target, canon), nil
}

// Sum is the fingerprint of a request whose body is already canonical (Canonical, CanonicalValue).
func (f *Fingerprinter) Sum(operation string, target []string, canon []byte) Fingerprint {
	return sum(hmac.New(sha256.New, f.key), operation, target, canon)
}

// LegacySum is the unkeyed SHA-256 fingerprint of the releases before ADR 0015. It is never
// stored any more; it is only compared with the records those releases wrote, which expire
// within one idempotency retention of the upgrade (see Judge's callers), so that a retry that
// spans the upgrade still gets its replay.
func LegacySum(operation string, target []string, canon []byte) Fingerprint {
	return sum(sha256.New(), operation, target, canon)
}

func sum(h hash.Hash, operation string, target []string, canon []byte) Fingerprint {
	fmt.Fprintf(h, "%s\n%d\n", operation, len(target))
	for _, t := range target {
		fmt.Fprintf(h, "%d:%s\n", len(t), t)
	}
	h.Write(canon)
	var f Fingerprint
	copy(f[:], h.Sum(nil))
	return f
}

// CanonicalValue is the canonical form of a body already decoded with json.Decoder.UseNumber
// (maps, slices, strings, json.Number, bools, nil), so that a transport that decoded the body
// once for validation need not decode it again. It equals Canonical of the body's bytes.
func CanonicalValue(body any) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeCanonical(&buf, body); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Canonical re-encodes a JSON document with object keys sorted, no insignificant whitespace and
// numbers kept exactly as written. An empty or whitespace-only document is canonically {}.
func Canonical(body []byte) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonicalising request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("canonicalising request body: trailing data after the JSON value")
	}
	return CanonicalValue(v)
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k) // a string always marshals
			buf.Write(kb)
			buf.WriteByte(':')
			if err := writeCanonical(buf, t[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	default:
		b, err := json.Marshal(t)
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	return nil
}

// Verdict is what a request gets when its key is already recorded.
type Verdict int

const (
	// Replay answers the stored first response again.
	Replay Verdict = iota + 1
	// Reused refuses a key sent with another operation or body (422 idempotency_key_reused).
	Reused
	// InFlight refuses a key whose first request is still executing (409 idempotency_in_flight).
	InFlight
)

// Judge decides what a request with a known key gets, from the recorded operation, fingerprint
// and completion of the first request.
func Judge(recordedOp string, recorded Fingerprint, completed bool, op string, fp Fingerprint) Verdict {
	if recordedOp != op || recorded != fp {
		return Reused
	}
	if !completed {
		return InFlight
	}
	return Replay
}
