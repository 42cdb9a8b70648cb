package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestLoopbackHostOnly(t *testing.T) {
	t.Parallel()
	h := LoopbackHostOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	tests := []struct {
		host, remote string
		want         int
	}{
		{"127.0.0.1:7777", "127.0.0.1:5555", 204},
		{"localhost:7777", "127.0.0.1:5555", 204},
		{"LOCALHOST", "127.0.0.1:5555", 204},
		{"[::1]:7777", "[::1]:5555", 204},
		{"127.9.9.9", "127.0.0.1:5555", 204},
		{"attacker.example:7777", "127.0.0.1:5555", 400},
		{"attacker.example", "127.0.0.1:5555", 400},
		{"127.0.0.1.attacker.example", "127.0.0.1:5555", 400},
		{"10.0.0.1:7777", "127.0.0.1:5555", 400},
		{"", "127.0.0.1:5555", 400},
		{"anything", "@", 204}, // Unix socket
		{"anything", "", 204},  // Unix socket
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/healthz", nil)
		r.Host, r.RemoteAddr = tt.host, tt.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tt.want {
			t.Errorf("Host %q from %q: %d, want %d", tt.host, tt.remote, w.Code, tt.want)
		}
	}
}
