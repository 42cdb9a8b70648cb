package idempotency

import (
	"bytes"
	"testing"
)

// TestCanonicalRefusesWhatJSONCannotHold: a decoded value that has no JSON form (here a channel,
// at the top, inside an object, inside an array) is an error, never a silent fingerprint.
func TestCanonicalRefusesWhatJSONCannotHold(t *testing.T) {
	for name, v := range map[string]any{
		"top":    make(chan int),
		"object": map[string]any{"a": "x", "b": make(chan int)},
		"array":  []any{"x", make(chan int)},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := CanonicalValue(v); err == nil {
				t.Fatalf("CanonicalValue = %q, want an error", out)
			}
		})
	}
}

func TestFingerprintRefusesABodyThatIsNotJSON(t *testing.T) {
	f, err := NewFingerprinter(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if fp, err := f.Fingerprint("createTask", nil, []byte(`{"a":`)); err == nil {
		t.Fatalf("Fingerprint = %x, want an error", fp)
	}
}
