package app

import "testing"

func TestSameMinor(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"1.4.2", "1.4.0", true},
		{"1.4.2", "1.4.0-rc1", true},
		{"v1.4.2", "1.4.9", true},
		{"1.4-dev", "1.4.1", true},
		{"1.4.2", "1.5.0", false},
		{"2.0.0", "1.0.0", false},
		{"0.1.0-dev", "0.1.0-dev", true},
		{"", "", true},
		{"", "1.0.0", false},
	} {
		if got := sameMinor(tc.a, tc.b); got != tc.want {
			t.Errorf("sameMinor(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
