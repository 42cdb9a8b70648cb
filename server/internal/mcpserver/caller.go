package mcpserver

import (
	"context"
	"net/http"

	"github.com/originweave/bap/server/internal/app"
)

// Caller is the authenticated principal of an MCP request: the actor its commands are bound to
// and the capabilities (OAuth scopes) it holds.
type Caller struct {
	Actor  app.Actor
	Scopes map[string]bool
	// ClientID is the workload: the OAuth client the credential was issued to, or the local
	// profile's listener (app.WorkloadLocalAgent).
	ClientID string
}

// owner is the key MCP-level objects (tasks, cursors, request states) are bound to.
func (c Caller) owner() string { return c.Actor.Tenant + "\x00" + c.Actor.Subject }

// Authenticator identifies the caller of an MCP HTTP request with the same credentials and rules
// as the BAP HTTP API (the daemon adapts the API's authenticator). Implementations verify
// credentials themselves and never forward them; they must be safe for concurrent use.
type Authenticator interface {
	// Authenticate returns the caller, or an *app.Error with code unauthenticated.
	Authenticate(r *http.Request) (Caller, error)
	// Challenge returns the WWW-Authenticate value for a refusal (err non-nil) or for a missing
	// scope (scope non-empty), or "" when the scheme has no challenge (the local profile).
	Challenge(err error, scope string) string
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller of the MCP request that ctx belongs to. The in-process requests
// a tool call sends to Options.API carry it, so that the API binds the command to the caller the
// adapter authenticated instead of authenticating again.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}
