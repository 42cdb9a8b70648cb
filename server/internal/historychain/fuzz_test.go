package historychain

import (
	"bytes"
	"testing"
)

// A bundle handed to `bap bundle verify` is untrusted: its event data, anchors and key set go
// through these parsers.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"b":[1.5e3,-0,"\u0000"],"a":{}}`, `[]`, `"x"`, `1e999999`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := CanonicalJSON(raw)
		if err != nil {
			return
		}
		again, err := CanonicalJSON(c)
		if err != nil || !bytes.Equal(c, again) {
			t.Fatalf("canonical form is not stable: %q -> %q (%v)", c, again, err)
		}
	})
}

func FuzzParseStatement(f *testing.F) {
	f.Add("eyJhbGciOiJFUzI1NiJ9.e30.AAAA")
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, jws string) {
		_, _, _ = ParseStatement(jws, KeySet{})
	})
}

func FuzzParseKeySet(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA","kid":"ak_1"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA"}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = ParseKeySet(raw)
	})
}
