package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw     string
		want    string
		wantErr bool
	}{
		{raw: "abc", want: "abc"},
		{raw: " abc\t", want: "abc"},
		{raw: `"abc"`, want: "abc"},
		{raw: "", wantErr: true},
		{raw: `""`, wantErr: true},
		{raw: `""""`, wantErr: true}, // found by FuzzParseKey: it was the key `""`
		{raw: `"a\"b"`, wantErr: true},
		{raw: `a"b`, want: `a"b`},
		{raw: "a b", wantErr: true},
		{raw: "é", wantErr: true},
		{raw: "a\x00", wantErr: true},
		{raw: strings.Repeat("k", 255), want: strings.Repeat("k", 255)},
		{raw: strings.Repeat("k", 256), wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseKey(tt.raw)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q, err=%v", tt.raw, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct{ a, b string }{
		{`{"b":1,"a":[1,2,{"y":true,"x":null}]}`, `{ "a" : [1, 2, {"x": null, "y": true}], "b": 1 }`},
		{``, `{}`},
		{"  \n", `{}`},
		{`{"n":1.50}`, `{"n":1.50}`},
	}
	for _, tt := range tests {
		ca, err := Canonical([]byte(tt.a))
		if err != nil {
			t.Fatal(err)
		}
		cb, err := Canonical([]byte(tt.b))
		if err != nil {
			t.Fatal(err)
		}
		if string(ca) != string(cb) {
			t.Errorf("Canonical(%q) = %s, Canonical(%q) = %s; want equal", tt.a, ca, tt.b, cb)
		}
	}
	if _, err := Canonical([]byte(`{"a":1} {"b":2}`)); err == nil {
		t.Error("trailing data accepted")
	}
	a, _ := Canonical([]byte(`{"n":1.5}`))
	b, _ := Canonical([]byte(`{"n":1.50}`))
	if string(a) == string(b) {
		t.Error("numbers written differently must stay different: the body is what the client sent")
	}
}

// testFingerprinter is a fingerprinter under a fixed test key.
func testFingerprinter(t testing.TB, fill byte) *Fingerprinter {
	t.Helper()
	f, err := NewFingerprinter(bytes.Repeat([]byte{fill}, MinKeySize))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFingerprintAndJudge(t *testing.T) {
	t.Parallel()
	fp := testFingerprinter(t, 1)
	f1, _ := fp.Fingerprint("cancel_task", []string{"tsk_a"}, []byte(`{"reason":"x"}`))
	f2, _ := fp.Fingerprint("cancel_task", []string{"tsk_a"}, []byte(`{ "reason" : "x" }`))
	f3, _ := fp.Fingerprint("cancel_task", []string{"tsk_b"}, []byte(`{"reason":"x"}`))
	f4, _ := fp.Fingerprint("cancel_task", []string{"tsk_", "ab"}, []byte(`{}`))
	f5, _ := fp.Fingerprint("cancel_task", []string{"tsk_a", "b"}, []byte(`{}`))
	var decoded any
	dec := json.NewDecoder(strings.NewReader(`{ "reason" : "x" }`))
	dec.UseNumber()
	if err := dec.Decode(&decoded); err != nil {
		t.Fatal(err)
	}
	if canon, err := CanonicalValue(decoded); err != nil || fp.Sum("cancel_task", []string{"tsk_a"}, canon) != f1 {
		t.Error("the fingerprint of the decoded body differs from the fingerprint of its bytes")
	}
	if f1 != f2 {
		t.Error("same request, different spacing: fingerprints differ")
	}
	if f1 == f3 || f4 == f5 {
		t.Error("different targets share a fingerprint")
	}
	tests := []struct {
		recOp     string
		rec       Fingerprint
		completed bool
		op        string
		fp        Fingerprint
		want      Verdict
	}{
		{"cancel_task", f1, true, "cancel_task", f2, Replay},
		{"cancel_task", f1, false, "cancel_task", f2, InFlight},
		{"cancel_task", f1, true, "cancel_task", f3, Reused},
		{"cancel_task", f1, false, "cancel_task", f3, Reused},
		{"cancel_task", f1, true, "close_task", f1, Reused},
	}
	for i, tt := range tests {
		if got := Judge(tt.recOp, tt.rec, tt.completed, tt.op, tt.fp); got != tt.want {
			t.Errorf("case %d: Judge = %v, want %v", i, got, tt.want)
		}
	}
}

// A fingerprint of a body holding a 4-digit PIN cannot be reversed by trying every PIN without
// the key, and is not the unkeyed SHA-256 the releases before ADR 0015 stored.
func TestFingerprintIsKeyed(t *testing.T) {
	t.Parallel()
	body := func(pin int) []byte {
		return []byte(fmt.Sprintf(`{"action":"fill","node_id":"nd_1","value":"%04d"}`, pin))
	}
	server, attacker := testFingerprinter(t, 1), testFingerprinter(t, 2)
	stored, _ := server.Fingerprint("act", []string{"bs_1"}, body(4711))
	for pin := 0; pin < 10000; pin++ {
		canon, _ := Canonical(body(pin))
		if attacker.Sum("act", []string{"bs_1"}, canon) == stored || LegacySum("act", []string{"bs_1"}, canon) == stored {
			t.Fatalf("PIN %04d recovered from the fingerprint without the server key", pin)
		}
	}
	if _, err := NewFingerprinter(make([]byte, MinKeySize-1)); !errors.Is(err, ErrShortKey) {
		t.Fatalf("a short key: %v", err)
	}
	// LegacySum is exactly what the earlier releases stored, so their records still match.
	canon := []byte(`{"reason":"x"}`)
	want := sha256.Sum256([]byte("cancel_task\n1\n5:tsk_a\n" + string(canon)))
	if LegacySum("cancel_task", []string{"tsk_a"}, canon) != Fingerprint(want) {
		t.Fatal("LegacySum differs from the fingerprint earlier releases stored")
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, "", " ", "\"", strings.Repeat("z", 256), "a\x7fb", "ключ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		k, err := ParseKey(raw)
		if err != nil {
			return
		}
		if len(k) == 0 || len(k) > MaxKeyLength {
			t.Fatalf("accepted key of length %d", len(k))
		}
		again, err := ParseKey(k)
		if err != nil || again != k {
			t.Fatalf("accepted key %q does not parse to itself", k)
		}
	})
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,"x",null,true]}`, `[`, `1e400`, `{"a":1}{`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := Canonical(body)
		if err != nil {
			return
		}
		c2, err := Canonical(c)
		if err != nil {
			t.Fatalf("canonical form %s does not parse: %v", c, err)
		}
		if string(c) != string(c2) {
			t.Fatalf("canonical form not stable: %s vs %s", c, c2)
		}
	})
}
