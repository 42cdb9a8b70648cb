package daemon

import (
	"slices"
	"testing"
)

func TestListenAddrs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		listen string
		want   []string
	}{
		{"127.0.0.1:7777", []string{"127.0.0.1:7777"}},
		{"[::1]:8443", []string{"[::1]:8443"}},
		{"localhost:7777", []string{"[::1]:7777"}},
		{":8443", []string{"[::]:8443"}},
		{"0.0.0.0:8443", []string{"0.0.0.0:8443"}},
		{"bap.example.com:443", nil},
		{"nonsense", nil},
	} {
		var got []string
		for _, a := range listenAddrs(tt.listen) {
			got = append(got, a.String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("listenAddrs(%q) = %v, want %v", tt.listen, got, tt.want)
		}
	}
}
