package daemon

import (
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/mcpserver"
)

// mcpAuth lets the MCP adapter authenticate callers with the transport's authenticator (the local
// operator, or the remote profile's bearer tokens with their RFC 9728 challenge).
type mcpAuth struct{ a api.Authenticator }

func (m mcpAuth) Authenticate(r *http.Request) (mcpserver.Caller, error) {
	p, err := m.a.Authenticate(r)
	if err != nil {
		return mcpserver.Caller{}, err
	}
	return mcpserver.Caller{Actor: p.Actor, Scopes: p.Scopes, ClientID: p.ClientID}, nil
}

func (m mcpAuth) Challenge(err error, scope string) string {
	if c, ok := m.a.(api.Challenger); ok {
		return c.Challenge(err, scope)
	}
	return ""
}

// mountMCP mounts the MCP adapter at /mcp (and, with --mcp-conformance-fixtures, the conformance
// fixtures at /mcp-conformance) in the transport's options. Tool calls are in-process requests
// to the BAP API, which api.New builds after this: call the returned function with it.
func mountMCP(cfg Config, o *api.Options, log *slog.Logger, secret []byte, tasks mcpserver.TaskRecords, nodeID string) (func(http.Handler), error) {
	var apiHandler atomic.Pointer[http.Handler]
	dispatch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := apiHandler.Load()
		if h == nil {
			http.Error(w, "the API is not ready", http.StatusServiceUnavailable)
			return
		}
		if c, ok := mcpserver.CallerFrom(r.Context()); ok {
			via := app.ViaMCP
			if mcpserver.Elicited(r.Context()) {
				via = app.ViaElicitation // the caller's answer to the elicitation of its held act
			}
			r = r.WithContext(api.InProcess(r.Context(), api.Principal{Actor: c.Actor, Scopes: c.Scopes, ClientID: c.ClientID, Via: via}))
		}
		(*h).ServeHTTP(w, r)
	})
	if o.Authenticator == nil {
		return nil, errors.New("daemon: the MCP adapter needs the transport's authenticator")
	}
	mo := mcpserver.Options{API: dispatch, Authenticator: mcpAuth{o.Authenticator}, Logger: log.With("adapter", "mcp"),
		MaxBodyBytes: cfg.MaxBodyBytes + 1<<20, Secret: secret, // shared by every node (cluster.go)
		Tasks: tasks, NodeID: nodeID} // tasks/get answers on every node (protocol_session_binding)
	h, err := mcpserver.New(mo)
	if err != nil {
		return nil, err
	}
	o.Mount = append(o.Mount, api.Mount{Pattern: "/mcp", Label: "mcp", Handler: h})
	if cfg.MCPConformanceFixtures {
		f, err := mcpserver.NewConformance(mo)
		if err != nil {
			return nil, err
		}
		o.Mount = append(o.Mount, api.Mount{Pattern: "/mcp-conformance", Label: "mcp_conformance", Handler: f})
	}
	return func(h http.Handler) { apiHandler.Store(&h) }, nil
}
