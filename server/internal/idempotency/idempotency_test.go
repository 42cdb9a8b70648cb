package idempotency

import (
	"encoding/json"
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

func TestFingerprintAndJudge(t *testing.T) {
	t.Parallel()
	f1, _ := NewFingerprint("cancel_task", []string{"tsk_a"}, []byte(`{"reason":"x"}`))
	f2, _ := NewFingerprint("cancel_task", []string{"tsk_a"}, []byte(`{ "reason" : "x" }`))
	f3, _ := NewFingerprint("cancel_task", []string{"tsk_b"}, []byte(`{"reason":"x"}`))
	f4, _ := NewFingerprint("cancel_task", []string{"tsk_", "ab"}, []byte(`{}`))
	f5, _ := NewFingerprint("cancel_task", []string{"tsk_a", "b"}, []byte(`{}`))
	var decoded any
	dec := json.NewDecoder(strings.NewReader(`{ "reason" : "x" }`))
	dec.UseNumber()
	if err := dec.Decode(&decoded); err != nil {
		t.Fatal(err)
	}
	if f, err := FingerprintOf("cancel_task", []string{"tsk_a"}, decoded); err != nil || f != f1 {
		t.Error("FingerprintOf of the decoded body differs from NewFingerprint of its bytes")
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
