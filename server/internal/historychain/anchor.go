package historychain

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// StatementType is the "typ" of an anchor statement's payload.
const StatementType = "bap.audit_anchor.v1"

// Why an anchor was made.
const (
	ReasonTaskEnded = "task_ended"
	ReasonPeriodic  = "periodic"
	// ReasonExported: made when a bundle was exported and the head had moved past the last
	// anchor (events after the task's end), so the bundle's whole history is pinned.
	ReasonExported = "exported"
)

// Statement is what an anchor signs: the head of one task's chain at one moment.
type Statement struct {
	Type          string `json:"typ"`
	Tenant        string `json:"tenant_id"`
	TaskID        string `json:"task_id"`
	Seq           int64  `json:"seq"`
	Digest        string `json:"digest"`         // hex of the keyed digest of event seq
	HistorySHA256 string `json:"history_sha256"` // hex of the public hash through event seq
	Reason        string `json:"reason"`
	AnchoredAt    string `json:"anchored_at"` // RFC 3339, UTC
}

// NewStatement makes the statement of a chain's head.
func NewStatement(tenant, taskID string, seq int64, digest, history []byte, reason string, at time.Time) Statement {
	return Statement{Type: StatementType, Tenant: tenant, TaskID: taskID, Seq: seq, Digest: hex.EncodeToString(digest),
		HistorySHA256: hex.EncodeToString(history), Reason: reason, AnchoredAt: at.UTC().Format(time.RFC3339Nano)}
}

// KeyID is the identifier of an audit key: "ak_" and 16 hex digits of the SHA-256 of its public
// key (PKIX DER), so it names the key and nothing else.
func KeyID(pub *ecdsa.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("encoding audit key: %w", err)
	}
	sum := sha256.Sum256(der)
	return "ak_" + hex.EncodeToString(sum[:8]), nil
}

type jwsHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

// jwsType is the media type of an anchor (the JWS "typ" header).
const jwsType = "bap-anchor+jws"

var b64 = base64.RawURLEncoding

// Sign returns st as a compact JWS (RFC 7515), ES256 under priv, whose key id is kid.
func Sign(priv *ecdsa.PrivateKey, kid string, st Statement) (string, error) {
	return SignJWS(priv, kid, jwsType, st)
}

// SignJWS returns payload's JSON as a compact JWS, ES256 under priv (a P-256 key named kid), with
// the header typ: anchors and bundle manifests are told apart by it.
func SignJWS(priv *ecdsa.PrivateKey, kid, typ string, payload any) (string, error) {
	if priv.Curve != elliptic.P256() {
		return "", errors.New("an audit key is a P-256 key")
	}
	h, err := json.Marshal(jwsHeader{Alg: "ES256", Kid: kid, Typ: typ})
	if err != nil {
		return "", err
	}
	p, err := json.Marshal(payload)
	if err != nil {
		return "", err
	}
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(p)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, priv, sum[:])
	if err != nil {
		return "", fmt.Errorf("signing: %w", err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + b64.EncodeToString(sig), nil
}

// Errors of reading an anchor; callers branch on them with errors.Is.
var (
	// ErrMalformedStatement reports a JWS that is not a statement of the expected form.
	ErrMalformedStatement = errors.New("not an anchor statement")
	// ErrUnknownKey reports a statement signed by a key the key set does not hold.
	ErrUnknownKey = errors.New("signed by a key not in the key set")
	// ErrBadSignature reports a statement whose signature does not verify.
	ErrBadSignature = errors.New("signature does not verify")
)

// maxStatement bounds what ParseStatement reads (a real one is under 1 KiB).
const maxStatement = 8 << 10

// ParseStatement checks jws's ES256 signature against the key it names in keys and returns the
// statement it signs, and the key id. Nothing of an unverified statement is returned.
func ParseStatement(jws string, keys KeySet) (Statement, string, error) {
	var st Statement
	kid, err := ParseJWS(jws, keys, jwsType, &st)
	if err == nil && st.Type != StatementType {
		return Statement{}, kid, fmt.Errorf("%w: payload is not a %s", ErrMalformedStatement, StatementType)
	}
	if err != nil {
		return Statement{}, kid, err
	}
	return st, kid, nil
}

// ParseJWS checks a compact JWS of header typ typ, ES256, signed by a key of keys, and decodes its
// payload (no unknown fields) into v. It returns the key id the header names. v is written only
// once the signature verified.
func ParseJWS(jws string, keys KeySet, typ string, v any) (string, error) {
	if len(jws) > maxStatement {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrMalformedStatement, maxStatement)
	}
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("%w: a compact JWS has three parts", ErrMalformedStatement)
	}
	hb, err1 := b64.DecodeString(parts[0])
	pb, err2 := b64.DecodeString(parts[1])
	sig, err3 := b64.DecodeString(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", fmt.Errorf("%w: %w", ErrMalformedStatement, err)
	}
	var h jwsHeader
	if err := strictUnmarshal(hb, &h); err != nil || h.Alg != "ES256" || h.Typ != typ || h.Kid == "" {
		return "", fmt.Errorf("%w: header must be ES256, typ %s, with a kid", ErrMalformedStatement, typ)
	}
	pub, ok := keys[h.Kid]
	if !ok {
		return h.Kid, fmt.Errorf("%w: %s", ErrUnknownKey, h.Kid)
	}
	if len(sig) != 64 {
		return h.Kid, ErrBadSignature
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pub, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return h.Kid, ErrBadSignature
	}
	if err := strictUnmarshal(pb, v); err != nil {
		return h.Kid, fmt.Errorf("%w: payload: %w", ErrMalformedStatement, err)
	}
	return h.Kid, nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// KeySet is the public audit keys by key id.
type KeySet map[string]*ecdsa.PublicKey

// JWK is one public key of a JSON Web Key Set (RFC 7517), EC P-256 only.
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

// JWKS is a JSON Web Key Set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicJWK is pub, a P-256 key, as a JWK named kid.
func PublicJWK(kid string, pub *ecdsa.PublicKey) (JWK, error) {
	pt, err := pub.Bytes() // 0x04 ‖ X ‖ Y
	if err != nil || len(pt) != 65 || pub.Curve != elliptic.P256() {
		return JWK{}, errors.New("an audit key is a P-256 key")
	}
	return JWK{Kty: "EC", Crv: "P-256", X: b64.EncodeToString(pt[1:33]), Y: b64.EncodeToString(pt[33:]), Kid: kid, Alg: "ES256", Use: "sig"}, nil
}

// maxKeySet bounds what ParseKeySet reads.
const maxKeySet = 1 << 20

// ParseKeySet reads the P-256 keys of a JSON Web Key Set; keys of other types are skipped (a set
// may hold the token keys too), a malformed P-256 key is an error.
func ParseKeySet(raw []byte) (KeySet, error) {
	if len(raw) > maxKeySet {
		return nil, errors.New("key set larger than 1 MiB")
	}
	var set struct {
		Keys []JWK `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("reading key set: %w", err)
	}
	out := KeySet{}
	for _, k := range set.Keys {
		if k.Kty != "EC" || k.Crv != "P-256" {
			continue
		}
		x, err1 := b64.DecodeString(k.X)
		y, err2 := b64.DecodeString(k.Y)
		if err := errors.Join(err1, err2); err != nil || len(x) != 32 || len(y) != 32 || k.Kid == "" {
			return nil, fmt.Errorf("key %q: not a P-256 public key", k.Kid)
		}
		// Go 1.26 checks the point is on the curve when it is parsed from its encoding.
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k.Kid, err)
		}
		out[k.Kid] = pub
	}
	return out, nil
}
