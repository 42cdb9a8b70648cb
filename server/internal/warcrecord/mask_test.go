package warcrecord

import (
	"bytes"
	"strings"
	"testing"
)

// maskChunks masks in written in chunks of n bytes, as a body streams.
func maskChunks(p *Protected, in string, n int) (string, map[string]bool) {
	var out bytes.Buffer
	m := newMasker(&out, p.patterns())
	for i := 0; i < len(in); i += n {
		_, _ = m.Write([]byte(in[i:min(i+n, len(in))]))
	}
	_ = m.close()
	return out.String(), m.masked
}

func TestMaskingStreamsAcrossEveryChunkBoundary(t *testing.T) {
	p := NewProtected()
	p.Add("card_pin", "pin 4242 secret")
	p.Add("protected", "Ada Lovelace")
	p.Add("cvv", "123") // short: masked only where it stands alone
	for _, tt := range []struct{ in, want string }{
		{"a=pin+4242+secret&b=1", "a=[masked:card_pin]&b=1"},
		{`{"pin":"pin 4242 secret","n":"Ada Lovelace"}`, `{"pin":"[masked:card_pin]","n":"[masked:protected]"}`},
		{"x=Ada%20Lovelace;y=ada%20lovelace", "x=[masked:protected];y=ada%20lovelace"},
		{"cvv=123&order=11234&code=1234", "cvv=[masked:cvv]&order=11234&code=1234"},
		{"123", "[masked:cvv]"},
		{"pin%204242%20secret", "[masked:card_pin]"},
		{"nothing protected here", "nothing protected here"},
	} {
		for n := 1; n <= len(tt.in); n++ {
			got, names := maskChunks(p, tt.in, n)
			if got != tt.want {
				t.Fatalf("%q in chunks of %d: %q, want %q", tt.in, n, got, tt.want)
			}
			for name := range names {
				if !strings.Contains(tt.want, "[masked:"+name+"]") {
					t.Fatalf("%q: names %v", tt.in, names)
				}
			}
		}
	}
}

func TestProtectedNamesAreTokens(t *testing.T) {
	p := NewProtected()
	p.Add("bad name\r\nX: y", "the value")
	got, _ := maskChunks(p, "is the value", 4)
	if got != "is [masked:protected]" {
		t.Fatalf("%q", got)
	}
}
