package serverkey

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestMasterWrapsTheServerKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, MasterFileName)
	if _, err := LoadMaster(path); !errors.Is(err, ErrMissing) {
		t.Fatalf("a missing master key file: %v, want ErrMissing", err)
	}
	m, err := CreateMaster(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("master key file: %v %v", fi, err)
	}
	again, err := CreateMaster(path) // an existing file is read, never replaced
	if err != nil || again.ID() != m.ID() {
		t.Fatalf("CreateMaster replaced the key: %v", err)
	}
	k := Generate()
	w := m.Wrap(k)
	if len(w) != WrappedSize || bytes.Contains(w, k.secret) {
		t.Fatalf("wrapped key: %d bytes, holds the key: %v", len(w), bytes.Contains(w, k.secret))
	}
	got, err := m.Unwrap(w, k.ID())
	if err != nil || got.ID() != k.ID() || !bytes.Equal(got.Derive(PurposePlanValues), k.Derive(PurposePlanValues)) {
		t.Fatalf("Unwrap: %v", err)
	}
	other, _ := CreateMaster(filepath.Join(dir, "other.key"))
	tampered := bytes.Clone(w)
	tampered[len(tampered)-1] ^= 1
	for _, tc := range []struct {
		name    string
		m       *Master
		wrapped []byte
		keyID   string
	}{
		{"another master key", other, w, k.ID()},
		{"tampered", m, tampered, k.ID()},
		{"another key id", m, w, Generate().ID()},
		{"truncated", m, w[:len(w)-1], k.ID()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.m.Unwrap(tc.wrapped, tc.keyID); !errors.Is(err, ErrOpen) {
				t.Fatalf("Unwrap: %v, want ErrOpen", err)
			}
		})
	}
	if other.ID() == m.ID() || m.ID()[:3] != "mk_" {
		t.Fatalf("master key ids %s %s", m.ID(), other.ID())
	}
}

// FuzzUnwrap feeds arbitrary bytes to Unwrap (a database row): nothing panics, every refusal is
// ErrOpen, and only what Wrap made opens.
func FuzzUnwrap(f *testing.F) {
	m, _ := MasterFromBytes(bytes.Repeat([]byte{2}, Size))
	k, _ := FromBytes(bytes.Repeat([]byte{3}, Size))
	f.Add(m.Wrap(k), k.ID())
	f.Add([]byte{sealVersion}, "sk_0000000000000000")
	f.Add(bytes.Repeat([]byte{0}, WrappedSize), k.ID())
	f.Fuzz(func(t *testing.T, wrapped []byte, keyID string) {
		got, err := m.Unwrap(wrapped, keyID)
		if err != nil {
			if !errors.Is(err, ErrOpen) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if got.ID() != keyID {
			t.Fatalf("opened %s as %s", got.ID(), keyID)
		}
	})
}
