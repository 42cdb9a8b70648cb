package redact

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
)

// TestSecretsAddIgnoresShortAndRepeatedValues: a value under 6 bytes would mask innocent text, and
// adding one twice keeps one entry.
func TestSecretsAddIgnoresShortAndRepeatedValues(t *testing.T) {
	var s Secrets
	s.Add("abc")
	s.Add("s3cr3t-value")
	s.Add("s3cr3t-value")
	if len(s.list) != 1 {
		t.Fatalf("list = %q, want the one long value once", s.list)
	}
	if got := s.scrub("abc s3cr3t-value"); got != "abc "+Mask {
		t.Errorf("scrub = %q", got)
	}
	var none *Secrets
	if got := none.scrub("abc"); got != "abc" {
		t.Errorf("nil scrub = %q", got)
	}
}

// TestStringMasksCredentialShapes: String needs no registered secret to mask a bearer token.
func TestStringMasksCredentialShapes(t *testing.T) {
	const tok = "Bearer abcdefghijklmnop"
	if got := String("header " + tok); strings.Contains(got, "abcdefghijklmnop") {
		t.Errorf("String = %q, want the token masked", got)
	}
}

type stringer struct{ s string }

func (x stringer) String() string { return x.s }

// TestHandlerRedactsEveryKindOfValue: Stringers, byte slices, groups (also past the depth bound),
// WithGroup, and kinds that cannot hold text pass through unchanged.
func TestHandlerRedactsEveryKindOfValue(t *testing.T) {
	const secret = "canary-edge-9f3a"
	var s Secrets
	s.Add(secret)
	var buf bytes.Buffer
	h := NewHandler(slog.NewJSONHandler(&buf, nil), &s)
	deep := slog.String("leaf", secret)
	for range maxDepth + 1 {
		deep = slog.Group("g", deep)
	}
	u, _ := url.Parse("https://user:" + secret + "@example.test/")
	log := slog.New(h.WithGroup("grp"))
	log.Info("m",
		slog.Any("stringer", stringer{"x " + secret}),
		slog.Any("bytes", []byte("y "+secret)),
		slog.Any("url", u),
		deep,
		slog.Int("n", 42),
		slog.Bool("ok", true),
	)
	out := buf.String()
	if strings.Contains(out, secret) {
		t.Fatalf("the secret leaked: %s", out)
	}
	for _, want := range []string{`"grp":{`, `"n":42`, `"ok":true`, `"stringer":"x ` + Mask, `"bytes":"y ` + Mask} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s: %s", want, out)
		}
	}
	if strings.Count(out, `"g":{`) > maxDepth {
		t.Errorf("groups deeper than %d are kept: %s", maxDepth, out)
	}
}

// TestNewHandlerDefaultsToGlobal: nil secrets means the process-wide set.
func TestNewHandlerDefaultsToGlobal(t *testing.T) {
	h := NewHandler(slog.NewTextHandler(&bytes.Buffer{}, nil), nil)
	if h.secrets != Global {
		t.Fatal("NewHandler(next, nil) does not consult Global")
	}
	if !h.Enabled(context.Background(), slog.LevelInfo) {
		t.Fatal("Enabled = false at info")
	}
}

// FuzzPatternNeeds: a pattern is skipped only for a value it cannot match — whenever a pattern
// matches v, its need holds for v — and String masks what the patterns alone would mask.
func FuzzPatternNeeds(f *testing.F) {
	for _, seed := range []string{
		"request", "/bap/v1/tasks", "create_task",
		"Authorization: Bearer abcdefghijklmnop", "BASIC\tQWxhZGRpbjpvcGVuIHNlc2FtZQ==", "bearer\nabcdefgh12",
		"eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", "bap_cs_0123456789abcdef0123", "ory_ac_0123456789abcdef.0123456789abcdefXY",
		"postgres://bap:hunter2@localhost/db", "host=x PASSWORD=hunter2 user=y", "client_secret=abc&x=1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		want := v
		for _, p := range patterns {
			if p.re.MatchString(v) && !p.need(v) {
				t.Fatalf("%q matches %s but its need does not hold", v, p.re)
			}
			want = p.re.ReplaceAllString(want, p.with)
		}
		if got := scrub(nil, v); got != want {
			t.Fatalf("scrub(%q) = %q; the patterns alone give %q", v, got, want)
		}
	})
}
