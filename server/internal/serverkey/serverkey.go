// Package serverkey holds the server key (ADR 0015): 32 bytes of secret key material kept in a
// file outside the database, from which every keyed digest and every seal the server makes
// derives a key of its own (HKDF-SHA256, one purpose each). A copy of the database alone — a
// backup, a dump, a read-only breach — then reveals no protected value: a fingerprint of a
// request that typed a 4-digit PIN cannot be reversed by trying the 10 000 PINs without the key,
// and a sealed plan value cannot be opened.
//
// The server key is a data key: it lives in the database wrapped (AES-256-GCM) by the master key
// (master.go, ADR 0017), which lives in a file and nowhere else. The package imports only the
// standard library and is the one place that knows key material.
package serverkey

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
)

// Size is the length of the key material, in bytes.
const Size = 32

// FileName is the key file's name under the data dir when no other file is configured.
const FileName = "server.key"

// Purpose names what a derived key is for; keys of different purposes are independent.
type Purpose string

// The purposes of the server key. A new use gets a new purpose, never an existing one.
const (
	// PurposeIdempotency keys the fingerprints of requests kept with Idempotency-Keys.
	PurposeIdempotency Purpose = "idempotency-fingerprint"
	// PurposeActionDigest keys approval_request.action_digest, the digest of a held action.
	PurposeActionDigest Purpose = "approval-action-digest"
	// PurposePlanValues seals the protected values of delegated plan steps (fill values).
	PurposePlanValues Purpose = "plan-step-values"
	// PurposeSecretValues seals the values of a tenant's secrets (issue #17).
	PurposeSecretValues Purpose = "secret-values"
	// PurposeCheckpointState seals the state artifacts of checkpoints (cookies, storage).
	PurposeCheckpointState Purpose = "checkpoint-state"
	// PurposeSigningKeys seals the private keys that sign access tokens.
	PurposeSigningKeys Purpose = "token-signing-keys"
	// PurposeServerSecret seals the database's server-wide secret (authorization codes, refresh
	// tokens, node credentials, MCP seals).
	PurposeServerSecret Purpose = "authorization-server-secret"
	// PurposeSecretDigest keys the digest that tells one secret value from another (rotation
	// without a change is refused) without an unkeyed hash of it anywhere.
	PurposeSecretDigest Purpose = "secret-value-digest"
	// PurposeHistoryChain keys the digests that chain each task's history events (ADR 0033).
	PurposeHistoryChain Purpose = "history-chain"
	// PurposeAuditSigningKeys seals the private keys that sign audit anchors (ADR 0033).
	PurposeAuditSigningKeys Purpose = "audit-signing-keys"
	// PurposeObservationDigest keys the digests of what a recording task's page showed after
	// each step (record.step), which a replay compares (ADR 0035): a page may show a protected
	// value, and an unkeyed hash of it would let a copy of the history guess a short one.
	PurposeObservationDigest Purpose = "observation-digest"
	// PurposeRecordedFillValues seals what a recording task's plain fills typed, kept so that a
	// replay can type it again (task_fill_value, ADR 0035).
	PurposeRecordedFillValues Purpose = "recorded-fill-values"
	// purposeKeyID derives the key's public identifier.
	purposeKeyID Purpose = "key-id"
)

// Errors of loading a key file; callers branch on them with errors.Is.
var (
	// ErrMissing reports a configured key file that does not exist.
	ErrMissing = errors.New("key file does not exist")
	// ErrMalformed reports a key file that holds no 32-byte key.
	ErrMalformed = errors.New("a key file must hold 32 bytes (raw, or base64 on one line)")
	// ErrPermissions reports a key file that others than its owner may read or write.
	ErrPermissions = errors.New("a key file must be readable by its owner only (chmod 600)")
)

// Key is the server key. Its methods are safe for concurrent use; the zero value is not usable.
type Key struct {
	secret []byte
	id     string
}

// FromBytes makes a key of exactly Size bytes of key material.
func FromBytes(b []byte) (*Key, error) {
	if len(b) != Size {
		return nil, fmt.Errorf("%w: got %d bytes", ErrMalformed, len(b))
	}
	k := &Key{secret: bytes.Clone(b)}
	k.id = "sk_" + hex.EncodeToString(k.Derive(purposeKeyID)[:8])
	return k, nil
}

// Ephemeral is a fresh random key that lives as long as the process: for tests and for
// embeddings whose sealed values and fingerprints need not outlive it.
func Ephemeral() *Key {
	b := make([]byte, Size)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	k, _ := FromBytes(b)
	return k
}

// ID is the key's public identifier ("sk_" and 16 hex digits): derived one-way, it names the key
// in the database and in sealed values without revealing it.
func (k *Key) ID() string { return k.id }

// Derive is the 32-byte key of one purpose.
func (k *Key) Derive(p Purpose) []byte {
	out, err := hkdf.Key(sha256.New, k.secret, nil, "bap/server-key/v1/"+string(p), 32)
	if err != nil {
		panic("serverkey: HKDF-SHA256 of 32 bytes cannot fail: " + err.Error())
	}
	return out
}

// MAC is a new HMAC-SHA256 under the key of purpose p.
func (k *Key) MAC(p Purpose) hash.Hash { return hmac.New(sha256.New, k.Derive(p)) }

// LoadOrCreate reads the key file at path, creating it — 32 random bytes, mode 0600, written to
// a temporary file and linked into place, so a concurrent starter never sees half a key and
// exactly one key wins — when it does not exist yet. It is the default, under the data dir.
func LoadOrCreate(path string) (*Key, error) {
	k, err := Load(path)
	if !errors.Is(err, ErrMissing) {
		return k, err
	}
	if err := createKeyFile(path); err != nil {
		return nil, err
	}
	return Load(path)
}

// createKeyFile writes 32 random bytes to path unless a file is there already (mode 0600, via a
// temporary file linked into place: a concurrent creator's key wins, and nobody reads half a key).
func createKeyFile(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the key file's directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*") // mode 0600
	if err != nil {
		return fmt.Errorf("creating the key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	secret := make([]byte, Size)
	_, _ = rand.Read(secret) // never fails (crypto/rand)
	if _, err := tmp.Write(secret); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing the key file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing the key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the key file: %w", err)
	}
	// Link fails when the file exists: another process created it first, and its key wins.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("installing the key file: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the new directory entry survives a crash
		_ = d.Close()
	}
	return nil
}

// Load reads an existing key file: 32 raw bytes, or their base64 (standard or URL alphabet,
// padded or not) on one line. The file must be a regular file that only its owner may read.
func Load(path string) (*Key, error) {
	b, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	return FromBytes(b)
}

// readKeyFile reads the 32 bytes of an existing key file that only its owner may read.
func readKeyFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrMissing, path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrMalformed, path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o", ErrPermissions, path, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the key file: %w", err)
	}
	b, err := Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// Parse reads the content of a key file: 32 raw bytes, or base64 of 32 bytes on one line.
func Parse(raw []byte) ([]byte, error) {
	if len(raw) == Size {
		return bytes.Clone(raw), nil
	}
	text := bytes.TrimSuffix(bytes.TrimSuffix(raw, []byte("\n")), []byte("\r"))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.Strict().DecodeString(string(text)); err == nil && len(b) == Size {
			return b, nil
		}
	}
	return nil, ErrMalformed
}

// Sealed values: version byte, the sealing key's id (8 bytes), a fresh 12-byte nonce, then the
// AES-256-GCM ciphertext and tag.
const (
	sealVersion  = 1
	sealIDLen    = 8
	sealOverhead = 1 + sealIDLen + 12 + 16
)

// ErrOpen reports a sealed value that cannot be opened: tampered with, sealed for other
// associated data, under another key or purpose, or not a sealed value at all.
var ErrOpen = errors.New("the sealed value cannot be opened")

// Sealer seals and opens values under the key of one purpose (AES-256-GCM).
type Sealer struct {
	aead cipher.AEAD
	id   []byte
}

// Sealer is the sealer of purpose p.
func (k *Key) Sealer(p Purpose) *Sealer {
	block, err := aes.NewCipher(k.Derive(p))
	if err != nil {
		panic("serverkey: AES-256 with a 32-byte key cannot fail: " + err.Error())
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("serverkey: GCM cannot fail: " + err.Error())
	}
	id, _ := hex.DecodeString(k.id[len("sk_"):])
	return &Sealer{aead: aead, id: id}
}

// Seal encrypts plaintext with a fresh random nonce, binding it to aad (what the value belongs
// to: a value sealed for one step never opens as another's).
func (s *Sealer) Seal(plaintext, aad []byte) []byte {
	out := make([]byte, 1+sealIDLen+s.aead.NonceSize(), sealOverhead+len(plaintext))
	out[0] = sealVersion
	copy(out[1:], s.id)
	nonce := out[1+sealIDLen:]
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	return s.aead.Seal(out, nonce, plaintext, s.header(out[:1+sealIDLen], aad))
}

// Open decrypts a value Seal made for the same aad; every failure is ErrOpen.
func (s *Sealer) Open(sealed, aad []byte) ([]byte, error) {
	if len(sealed) < sealOverhead || sealed[0] != sealVersion {
		return nil, fmt.Errorf("%w: not a sealed value of version %d", ErrOpen, sealVersion)
	}
	if !bytes.Equal(sealed[1:1+sealIDLen], s.id) {
		return nil, fmt.Errorf("%w: sealed under another server key", ErrOpen)
	}
	nonce := sealed[1+sealIDLen : 1+sealIDLen+s.aead.NonceSize()]
	out, err := s.aead.Open(nil, nonce, sealed[1+sealIDLen+s.aead.NonceSize():], s.header(sealed[:1+sealIDLen], aad))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOpen, err)
	}
	return out, nil
}

// header is the associated data GCM authenticates: the version and key id, then aad.
func (s *Sealer) header(prefix, aad []byte) []byte {
	h := make([]byte, 0, len(prefix)+len(aad))
	return append(append(h, prefix...), aad...)
}
