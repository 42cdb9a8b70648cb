package e2e

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/originweave/bap/server/internal/api"
)

// The local profile has two callers (CONTRACT "Profiles and endpoints"): the stack's TCP server
// answers the agent, and — as the daemon does — the same handler on a Unix socket answers the
// operator, the only one who resolves approvals. s.operator() is the stack as the operator sees it.

// serveSocket serves h on a fresh Unix socket, marked as the operator's door (api.OnSocket, the
// daemon's BaseContext), and returns a client that dials it.
func serveSocket(t *testing.T, h http.Handler) *http.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "bap-e2e-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "bap.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, BaseContext: func(net.Listener) context.Context { return api.OnSocket(context.Background()) }}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving the socket: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// operator is s as the local operator calls it: over the Unix socket.
func (s *stack) operator() *stack {
	op := *s
	op.client, op.base = s.opClient, "http://localhost"
	return &op
}

// endpoint is where s sends its requests: the TCP server (the agent), or the socket (operator()).
func (s *stack) endpoint() (*http.Client, string) {
	if s.client != nil {
		return s.client, s.base
	}
	return http.DefaultClient, s.srv.URL
}
