package serverkey

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// MasterFileName is the master key file's name under the data dir when no other file is
// configured (ADR 0017).
const MasterFileName = "master.key"

// Master is the master key (ADR 0017): 32 bytes in a file that never goes into the database. It
// does one thing: wrap and unwrap the server key, the data key every seal and keyed digest derives
// from. Rotating it re-wraps the server key; nothing sealed under the server key changes.
type Master struct {
	aead cipher.AEAD
	id   string
}

// MasterFromBytes makes a master key of exactly Size bytes.
func MasterFromBytes(b []byte) (*Master, error) {
	if len(b) != Size {
		return nil, fmt.Errorf("%w: got %d bytes", ErrMalformed, len(b))
	}
	wrap, err := hkdf.Key(sha256.New, b, nil, "bap/master-key/v1/wrap-data-key", 32)
	if err != nil {
		return nil, fmt.Errorf("deriving the wrapping key: %w", err)
	}
	idKey, err := hkdf.Key(sha256.New, b, nil, "bap/master-key/v1/key-id", 8)
	if err != nil {
		return nil, fmt.Errorf("deriving the master key id: %w", err)
	}
	block, err := aes.NewCipher(wrap)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Master{aead: aead, id: "mk_" + hex.EncodeToString(idKey)}, nil
}

// LoadMaster reads an existing master key file (the same format as Load: 32 raw bytes or their
// base64 on one line, readable by its owner only). A missing file is ErrMissing, never created.
func LoadMaster(path string) (*Master, error) {
	b, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	return MasterFromBytes(b)
}

// CreateMaster writes a new random master key file at path, unless one is there already, and reads
// the file that is there then (a concurrent creator's key wins).
func CreateMaster(path string) (*Master, error) {
	if err := createKeyFile(path); err != nil {
		return nil, err
	}
	return LoadMaster(path)
}

// ID is the master key's public identifier ("mk_" and 16 hex digits, derived one-way).
func (m *Master) ID() string { return m.id }

// WrappedSize is the length of a wrapped server key.
const WrappedSize = sealOverhead + Size

// Wrap encrypts the server key k under the master key (AES-256-GCM, fresh nonce), bound to k's id.
// The result is version ‖ master key id (8 bytes) ‖ nonce ‖ ciphertext ‖ tag.
func (m *Master) Wrap(k *Key) []byte {
	out := make([]byte, 1+sealIDLen+m.aead.NonceSize(), WrappedSize)
	out[0] = sealVersion
	id, _ := hex.DecodeString(m.id[len("mk_"):])
	copy(out[1:], id)
	nonce := out[1+sealIDLen:]
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	return m.aead.Seal(out, nonce, k.secret, wrapAAD(out[:1+sealIDLen], k.id))
}

// Unwrap opens a server key that Wrap made under this master key for a key of id keyID; every
// failure (another master key, tampering, another key id) is ErrOpen.
func (m *Master) Unwrap(wrapped []byte, keyID string) (*Key, error) {
	id, _ := hex.DecodeString(m.id[len("mk_"):])
	if len(wrapped) != WrappedSize || wrapped[0] != sealVersion {
		return nil, fmt.Errorf("%w: not a wrapped key of version %d", ErrOpen, sealVersion)
	}
	if !bytes.Equal(wrapped[1:1+sealIDLen], id) {
		return nil, fmt.Errorf("%w: wrapped under another master key", ErrOpen)
	}
	nonce := wrapped[1+sealIDLen : 1+sealIDLen+m.aead.NonceSize()]
	secret, err := m.aead.Open(nil, nonce, wrapped[1+sealIDLen+m.aead.NonceSize():], wrapAAD(wrapped[:1+sealIDLen], keyID))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOpen, err)
	}
	k, err := FromBytes(secret)
	if err != nil {
		return nil, err
	}
	if k.ID() != keyID {
		return nil, fmt.Errorf("%w: the key inside is not %s", ErrOpen, keyID)
	}
	return k, nil
}

func wrapAAD(prefix []byte, keyID string) []byte {
	return append(append(append([]byte(nil), prefix...), "bap/wrapped-server-key/v1\x00"...), keyID...)
}

// Generate is a new random server key (a data key, to be wrapped by the master key).
func Generate() *Key { return Ephemeral() }
