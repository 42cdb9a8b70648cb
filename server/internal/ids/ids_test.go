package ids_test

import (
	"bytes"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/originweave/bap/server/internal/ids"
)

func TestPrefixes(t *testing.T) {
	t.Parallel()
	want := []string{"tsk_", "bs_", "ctx_", "ep_", "nd_", "apr_", "art_", "chk_", "cmd_", "rcp_", "evt_", "rec_"}
	got := ids.AllPrefixes()
	if len(got) != len(want) {
		t.Fatalf("AllPrefixes() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("AllPrefixes()[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	// No prefix is a prefix of another, so an id names its type unambiguously.
	for _, a := range got {
		for _, b := range got {
			if a != b && strings.HasPrefix(string(a), string(b)) {
				t.Errorf("prefix %q starts with prefix %q", a, b)
			}
		}
	}
}

func TestGenerateVectors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prefix  ids.Prefix
		ms      int64
		entropy []byte
		want    string
	}{
		{"zero", ids.Task, 0, make([]byte, 10), "tsk_00000000000000000000000000"},
		{"one millisecond", ids.Receipt, 1, make([]byte, 10), "rcp_00000000010000000000000000"},
		{"last random bit", ids.Event, 0, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "evt_00000000000000000000000001"},
		// The timestamp of the ULID specification's example, 01ARYZ6S41.
		{"ulid spec time", ids.Command, 1469918176385, make([]byte, 10), "cmd_01aryz6s410000000000000000"},
		{"all ones", ids.Approval, 1<<48 - 1, bytes.Repeat([]byte{0xff}, 10), "apr_7zzzzzzzzzzzzzzzzzzzzzzzzz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ids.Generate(tt.prefix, time.UnixMilli(tt.ms), bytes.NewReader(tt.entropy))
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if got != tt.want {
				t.Fatalf("Generate = %q, want %q", got, tt.want)
			}
			if !ids.Valid(tt.prefix, got) {
				t.Errorf("Valid(%q, %q) = false", tt.prefix, got)
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		now     time.Time
		entropy []byte
		wantErr error
	}{
		{"before epoch", time.UnixMilli(-1), make([]byte, 10), ids.ErrTimeOutOfRange},
		{"after 48 bits", time.UnixMilli(1 << 48), make([]byte, 10), ids.ErrTimeOutOfRange},
		{"short entropy", time.UnixMilli(0), make([]byte, 9), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ids.Generate(ids.Task, tt.now, bytes.NewReader(tt.entropy))
			if err == nil || got != "" {
				t.Fatalf("Generate = %q, %v; want an error", got, err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v is not %v", err, tt.wantErr)
			}
		})
	}
	if _, err := ids.Generate(ids.Task, time.Now(), iotest.ErrReader(errors.New("boom"))); err == nil {
		t.Error("Generate with a failing reader succeeded")
	}
}

func TestGenerateSortsByTime(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	var got []string
	for i := range 200 {
		// Descending entropy so that only the timestamp can order them.
		ent := bytes.Repeat([]byte{byte(255 - i)}, 10)
		id, err := ids.Generate(ids.Event, base.Add(time.Duration(i)*time.Millisecond), bytes.NewReader(ent))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	if !slices.IsSorted(got) {
		t.Fatalf("ids of increasing times are not sorted: %v", got)
	}
}

var crockford = regexp.MustCompile(`^[0-7][0-9a-hjkmnp-tv-z]{25}$`)

func TestNew(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, p := range ids.AllPrefixes() {
		for range 100 {
			id := ids.New(p)
			if !ids.Valid(p, id) {
				t.Fatalf("New(%q) = %q is not Valid", p, id)
			}
			body := strings.TrimPrefix(id, string(p))
			if len(body) != ids.BodyLen || !crockford.MatchString(body) {
				t.Fatalf("New(%q) = %q: body is not 26 Crockford base32 characters", p, id)
			}
			if seen[body] {
				t.Fatalf("New(%q) repeated %q", p, id)
			}
			seen[body] = true
			if got, ok := ids.PrefixOf(id); !ok || got != p {
				t.Errorf("PrefixOf(%q) = %q, %v", id, got, ok)
			}
		}
	}
}

func TestValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		prefix ids.Prefix
		s      string
		want   bool
	}{
		{ids.Task, "tsk_01j9zz", true},
		{ids.Task, "tsk_a", true},
		{ids.Task, "tsk_A-b_C", true},
		{ids.Task, "tsk_" + strings.Repeat("x", 64), true},
		{ids.Task, "tsk_" + strings.Repeat("x", 65), false},
		{ids.Task, "tsk_", false},
		{ids.Task, "tsk", false},
		{ids.Task, "", false},
		{ids.Task, "TSK_abc", false},
		{ids.Task, "bs_abc", false},
		{ids.Task, "tsk_ab c", false},
		{ids.Task, "tsk_ab/c", false},
		{ids.Task, "tsk_ab.c", false},
		{ids.Task, "tsk_abc\n", false},
		{ids.Task, "tsk_é", false},
		{ids.Task, " tsk_abc", false},
		{ids.BrowserSession, "bs_x", true},
		{ids.NodeHandle, "nd_" + strings.Repeat("9", 64), true},
		{"", "abc", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got := ids.Valid(tt.prefix, tt.s); got != tt.want {
			t.Errorf("Valid(%q, %q) = %v, want %v", tt.prefix, tt.s, got, tt.want)
		}
	}
	if p, ok := ids.PrefixOf("xyz_abc"); ok || p != "" {
		t.Errorf("PrefixOf(xyz_abc) = %q, %v", p, ok)
	}
}

var validBody = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// FuzzValid checks Valid against the regular expression CONTRACT implies.
func FuzzValid(f *testing.F) {
	for _, s := range []string{"tsk_abc", "tsk_", "tsk_" + strings.Repeat("z", 64), "tsk_" + strings.Repeat("z", 65), "bs_x-y_z", "nd_\x00", "rec_é", ""} {
		f.Add("tsk_", s)
		f.Add("bs_", s)
	}
	f.Add("", "")
	f.Add("a.b", "a.bc")
	f.Fuzz(func(t *testing.T, prefix, s string) {
		got := ids.Valid(ids.Prefix(prefix), s)
		body, ok := strings.CutPrefix(s, prefix)
		want := prefix != "" && ok && validBody.MatchString(body)
		if got != want {
			t.Fatalf("Valid(%q, %q) = %v, regexp says %v", prefix, s, got, want)
		}
	})
}
