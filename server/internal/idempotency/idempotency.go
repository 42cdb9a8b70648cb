// Package idempotency holds the pure rules of BAP's Idempotency-Key handling: which keys are
// well-formed, how a request is reduced to a fingerprint, and what a second request with a known key
// gets. It imports no database or transport package; the app layer applies these rules inside the
// command's transaction.
package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
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

// Fingerprint is the SHA-256 of a request's operation, target and canonical body: two requests
// with one key are "the same request" exactly when their fingerprints are equal.
type Fingerprint [sha256.Size]byte

// NewFingerprint reduces a request to its fingerprint. target names the objects the route
// addresses (its path parameters in route order); body is the JSON body, canonicalised so that
// key order and insignificant whitespace do not matter. An empty body counts as {}.
func NewFingerprint(operation string, target []string, body []byte) (Fingerprint, error) {
	canon, err := Canonical(body)
	if err != nil {
		return Fingerprint{}, err
	}
	return fingerprint(operation, target, canon), nil
}

// FingerprintOf is NewFingerprint for a body already decoded with json.Decoder.UseNumber (maps,
// slices, strings, json.Number, bools, nil), so that a transport that decoded the body once for
// validation need not decode it again.
func FingerprintOf(operation string, target []string, body any) (Fingerprint, error) {
	var buf bytes.Buffer
	if err := writeCanonical(&buf, body); err != nil {
		return Fingerprint{}, err
	}
	return fingerprint(operation, target, buf.Bytes()), nil
}

func fingerprint(operation string, target []string, canon []byte) Fingerprint {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%d\n", operation, len(target))
	for _, t := range target {
		fmt.Fprintf(h, "%d:%s\n", len(t), t)
	}
	h.Write(canon)
	var f Fingerprint
	copy(f[:], h.Sum(nil))
	return f
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
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
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
			kb, err := json.Marshal(k)
			if err != nil {
				return err
			}
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
