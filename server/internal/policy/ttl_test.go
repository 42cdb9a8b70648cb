package policy

import (
	"errors"
	"testing"
	"time"
)

func TestParseTTL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration // 0: refused
	}{
		{"PT15M", 15 * time.Minute},
		{"PT1S", time.Second},
		{"PT24H", 24 * time.Hour},
		{"PT1H30M5S", time.Hour + 30*time.Minute + 5*time.Second},
		{"PT90S", 90 * time.Second},
		{"PT0015M", 15 * time.Minute},
		{"PT", 0},
		{"", 0},
		{"P1D", 0},
		{"PT0S", 0},
		{"PT25H", 0},
		{"PT24H1S", 0},
		{"PT1M1H", 0}, // out of order
		{"PT1H1H", 0}, // twice
		{"PT1.5M", 0},
		{"PT-1M", 0},
		{"pt15m", 0},
		{"PT15", 0},
		{"PTM", 0},
		{"15m", 0},
		{"PT99999999999999999999S", 0},
	} {
		got, err := ParseTTL(tc.in)
		if tc.want == 0 {
			if err == nil || !errors.Is(err, ErrBadTTL) {
				t.Errorf("ParseTTL(%q) = %s, %v; want ErrBadTTL", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseTTL(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestFormatTTLRoundTrips(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{time.Second, 15 * time.Minute, time.Hour + 5*time.Second, 24 * time.Hour, 61 * time.Minute} {
		got, err := ParseTTL(FormatTTL(d))
		if err != nil || got != d {
			t.Errorf("%s → %q → %s, %v", d, FormatTTL(d), got, err)
		}
	}
}

// FuzzParseTTL: any string is refused or read as a duration in range that formats back to itself.
func FuzzParseTTL(f *testing.F) {
	for _, s := range []string{"PT15M", "PT1S", "PT24H", "PT1H30M5S", "PT", "P1D", "PT0S", "PT1M1H", "PT99999999999999999999S", "PT\x00S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseTTL(s)
		if err != nil {
			if !errors.Is(err, ErrBadTTL) {
				t.Fatalf("ParseTTL(%q): %v does not wrap ErrBadTTL", s, err)
			}
			return
		}
		if d < time.Second || d > MaxApprovalTTL || d%time.Second != 0 {
			t.Fatalf("ParseTTL(%q) = %s: out of range", s, d)
		}
		if again, err := ParseTTL(FormatTTL(d)); err != nil || again != d {
			t.Fatalf("ParseTTL(%q) = %s, formatted %q reads %s, %v", s, d, FormatTTL(d), again, err)
		}
	})
}
