package historychain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"testing"
)

// canonicalReference is the canonical form computed the plain way, through encoding/json's
// decoder: the specification the fast parser (fastcanon.go) is held to.
func canonicalReference(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("canonical JSON: trailing data after the value")
	}
	var b bytes.Buffer
	if err := writeValue(&b, v, 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeValue(b *bytes.Buffer, v any, depth int) error {
	if depth > maxDepth {
		return errors.New("canonical JSON: nested too deeply")
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		writeString(b, x)
	case json.Number:
		n, err := canonicalNumber(string(x))
		if err != nil {
			return err
		}
		b.WriteString(n)
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeValue(b, e, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			if err := writeValue(b, x[k], depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("canonical JSON: unexpected %T", v)
	}
	return nil
}

// The fast parser gives the reference's bytes, and fails where the reference fails.
func FuzzCanonicalMatchesReference(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"b":[1.5e3,-0,"\u0000"],"a":{}}`, `[]`, `"x"`, `1e999999`, `{"a":1,"a":2}`,
		`"\ud83d\ude00"`, `"\ud83d"`, `"\ud83d\u0041"`, "\"\xff\"", `01`, `-`, `{"a":}`, ` [1 , 2 ] `, `"\/\b\f"`,
		`{"é":1,"z":2,"Z":3,"z":4}`, `[true,false,null]`, `1.`, `.5`, `1e`, `"a` + "\x01" + `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, werr := canonicalReference(raw)
		got, gerr := canonical(raw)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: reference error %v, fast error %v", raw, werr, gerr)
		}
		if werr == nil && !bytes.Equal(want, got) {
			t.Fatalf("%q: reference %q, fast %q", raw, want, got)
		}
	})
}

// BenchmarkCanonicalData compares the fast parser with the reference on a typical event's data.
func BenchmarkCanonicalData(b *testing.B) {
	data := []byte(`{"from":"created","to":"running","cause":"create_task","reason":"admitted","seq":3,"ratio":0.5}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := canonical(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := canonicalReference(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
