package serverkey

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestLoadOrCreateMakesOneOwnerOnlyKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	path := filepath.Join(dir, FileName)
	// Concurrent first starts agree on one key.
	keys := make([]*Key, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := LoadOrCreate(path)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for _, k := range keys[1:] {
		if k == nil || k.ID() != keys[0].ID() {
			t.Fatalf("concurrent starts made different keys")
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != Size {
		t.Fatalf("key file mode %04o size %d, want 0600 and %d bytes", fi.Mode().Perm(), fi.Size(), Size)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	again, err := LoadOrCreate(path)
	if err != nil || again.ID() != keys[0].ID() {
		t.Fatalf("second start: %v, key %v", err, again)
	}
}

func TestLoadRefusesMissingMalformedAndOpenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, content []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	raw := bytes.Repeat([]byte{7}, Size)
	for _, tc := range []struct {
		name string
		path string
		want error
	}{
		{"missing", filepath.Join(dir, "absent.key"), ErrMissing},
		{"short", write("short.key", []byte("too short"), 0o600), ErrMalformed},
		{"base64 of 31 bytes", write("b31.key", []byte(base64.StdEncoding.EncodeToString(raw[:31])+"\n"), 0o600), ErrMalformed},
		{"group readable", write("group.key", raw, 0o640), ErrPermissions},
		{"world readable", write("world.key", raw, 0o604), ErrPermissions},
		{"a directory", dir, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Load(tc.path); !errors.Is(err, tc.want) {
				t.Fatalf("Load: %v, want %v", err, tc.want)
			}
		})
	}
	// An explicit file is never created.
	if _, err := os.Stat(filepath.Join(dir, "absent.key")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load created a missing file: %v", err)
	}
	// Raw and base64 (with a newline, as `base64 < /dev/urandom` tools write it) are the same key.
	a, err := Load(write("raw.key", raw, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
		b, err := Load(write("b64.key", []byte(enc.EncodeToString(raw)+"\n"), 0o400))
		if err != nil || b.ID() != a.ID() {
			t.Fatalf("base64 file: %v", err)
		}
	}
}

func TestPurposesAreIndependent(t *testing.T) {
	k := Ephemeral()
	seen := map[string]Purpose{}
	for _, p := range []Purpose{PurposeIdempotency, PurposeActionDigest, PurposePlanValues, purposeKeyID} {
		d := string(k.Derive(p))
		if q, dup := seen[d]; dup {
			t.Fatalf("%s and %s derive the same key", p, q)
		}
		seen[d] = p
		if bytes.Contains(k.Derive(p), k.secret) {
			t.Fatal("a derived key holds the key material")
		}
	}
	if Ephemeral().ID() == k.ID() {
		t.Fatal("two ephemeral keys share an id")
	}
	m1, m2 := k.MAC(PurposeIdempotency), Ephemeral().MAC(PurposeIdempotency)
	m1.Write([]byte("1234"))
	m2.Write([]byte("1234"))
	if bytes.Equal(m1.Sum(nil), m2.Sum(nil)) {
		t.Fatal("two keys give one MAC")
	}
}

func TestSealOpens(t *testing.T) {
	k := Ephemeral()
	s := k.Sealer(PurposePlanValues)
	aad := []byte("tsk_1/2/act")
	plain := []byte(`{"value":"4711"}`)
	a, b := s.Seal(plain, aad), s.Seal(plain, aad)
	if bytes.Equal(a, b) {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}
	if bytes.Contains(a, plain) || bytes.Contains(a, []byte("4711")) {
		t.Fatal("the sealed value holds the plaintext")
	}
	got, err := s.Open(a, aad)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open: %q %v", got, err)
	}
	flipped := bytes.Clone(a)
	flipped[len(flipped)-1] ^= 1
	for name, tc := range map[string]struct {
		s      *Sealer
		sealed []byte
		aad    []byte
	}{
		"other step":    {s, a, []byte("tsk_1/3/act")},
		"tampered":      {s, flipped, aad},
		"other purpose": {k.Sealer(PurposeIdempotency), a, aad},
		"other key":     {Ephemeral().Sealer(PurposePlanValues), a, aad},
		"truncated":     {s, a[:sealOverhead-1], aad},
		"empty":         {s, nil, aad},
	} {
		if _, err := tc.s.Open(tc.sealed, tc.aad); !errors.Is(err, ErrOpen) {
			t.Errorf("%s: %v, want ErrOpen", name, err)
		}
	}
}

// FuzzOpen feeds arbitrary bytes to Open: nothing panics, every refusal is ErrOpen, and nothing
// but a value Seal made opens.
func FuzzOpen(f *testing.F) {
	k, _ := FromBytes(bytes.Repeat([]byte{1}, Size))
	s := k.Sealer(PurposePlanValues)
	f.Add(s.Seal([]byte(`{"value":"1234"}`), []byte("aad")), []byte("aad"))
	f.Add([]byte{sealVersion}, []byte(""))
	f.Add(bytes.Repeat([]byte{0}, sealOverhead), []byte("x"))
	f.Fuzz(func(t *testing.T, sealed, aad []byte) {
		out, err := s.Open(sealed, aad)
		if err != nil {
			if !errors.Is(err, ErrOpen) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// It opened: it must be a genuine seal, and sealing again round-trips.
		again, err := s.Open(s.Seal(out, aad), aad)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("round trip: %q %v", again, err)
		}
	})
}
