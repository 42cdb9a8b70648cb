package api

import (
	"context"
	"net/http"

	"github.com/originweave/bap/server/internal/app"
)

// Principal is an authenticated caller: the actor its commands are bound to and the capabilities
// (OAuth scopes) it holds.
type Principal struct {
	Actor  app.Actor
	Scopes map[string]bool
	// ClientID is the workload: the OAuth client the credential was issued to, or in the local
	// profile the listener reached (app.WorkloadLocalSocket, app.WorkloadLocalAgent; ADR 0031).
	ClientID string
	// Via is how the request reached the server (app.ViaSocket, app.ViaAPI, app.ViaMCP,
	// app.ViaElicitation; "" is app.ViaAPI). Set by authenticators and in-process callers only,
	// never from a request's headers or body; a decision on an approval records it.
	Via string
	// delivery is set on a command another node forwarded with a node credential: the inbox
	// records it with the command, so a redelivery gets the first answer (app/inbox.go).
	delivery *app.Delivery
}

// Authenticator identifies the caller of a request. Implementations verify credentials themselves
// (issuer, audience, expiry, signature) and never forward them. An *app.Error with code
// unauthenticated becomes a 401 problem.
type Authenticator interface {
	Authenticate(r *http.Request) (Principal, error)
}

// AllScopes are the capabilities of CONTRACT "Capabilities".
var AllScopes = []string{
	"bap:tasks.read", "bap:tasks.write", "bap:browser.observe", "bap:browser.act",
	"bap:approvals.request", "bap:approvals.resolve", "bap:artifacts.read", "bap:events.read",
	"bap:secrets.read", "bap:secrets.write",
}

// ResolveScope is the capability of resolve_approval (and list_approvals): an approver's.
const ResolveScope = "bap:approvals.resolve"

// SecretsWriteScope is the capability of the operator's secrets API (create, list, rotate,
// delete): never an agent's (issue #17). Agents name secrets by reference and list, with
// bap:secrets.read, the ones usable on their task.
const SecretsWriteScope = "bap:secrets.write"

// The local profile's two callers (CONTRACT "Profiles and endpoints").
const (
	// LocalOperator is the subject of callers on the Unix socket: every scope.
	LocalOperator = "operator:local"
	// LocalAgent is the subject of callers on TCP loopback, /mcp included: every scope but
	// bap:approvals.resolve and bap:secrets.write.
	LocalAgent = "agent:local"
)

type socketKey struct{}

// OnSocket returns ctx marking the requests of connections accepted on the local profile's Unix
// socket (mode 0600: reaching it is the operator's credential). The daemon sets it as the
// http.Server's base context for that listener alone; only code can set a context value, so no
// request from the network, and no header, can claim it.
func OnSocket(ctx context.Context) context.Context {
	return context.WithValue(ctx, socketKey{}, true)
}

// fromSocket reports whether ctx belongs to a request accepted on the Unix socket.
func fromSocket(ctx context.Context) bool {
	on, _ := ctx.Value(socketKey{}).(bool)
	return on
}

// Local authenticates the local profile's callers, where reaching the server is the credential:
// a request accepted on the Unix socket (marked by OnSocket) is the operator of tenant `local`
// with every capability; any other (TCP loopback, the MCP adapter's callers on it included) is
// the agent, with every capability but bap:approvals.resolve and bap:secrets.write. So an agent
// never resolves an approval nor stores or lists secrets: the operator does, on the socket (`bap
// approvals approve|deny`, `bap secret put`).
type Local struct{}

// Authenticate implements Authenticator.
func (Local) Authenticate(r *http.Request) (Principal, error) {
	scopes := make(map[string]bool, len(AllScopes))
	for _, s := range AllScopes {
		scopes[s] = true
	}
	if fromSocket(r.Context()) {
		return Principal{Actor: app.Actor{Tenant: "local", Subject: LocalOperator}, Scopes: scopes, ClientID: app.WorkloadLocalSocket, Via: app.ViaSocket}, nil
	}
	delete(scopes, ResolveScope)
	delete(scopes, SecretsWriteScope)
	return Principal{Actor: app.Actor{Tenant: "local", Subject: LocalAgent}, Scopes: scopes, ClientID: app.WorkloadLocalAgent, Via: app.ViaAPI}, nil
}

// scopeDetail is the detail of a 403 insufficient_scope for p lacking scope.
func scopeDetail(p Principal, scope string) string {
	if scope == ResolveScope && p.Actor.Subject == LocalAgent {
		return "this operation needs the " + scope + " capability; in the local profile only the operator resolves approvals, on the Unix socket (bap approvals approve ID)"
	}
	if scope == SecretsWriteScope {
		return "this operation needs the " + scope + " capability, which no agent holds: an operator stores secrets (bap secret put), and an agent names them by reference (act fill {secret_ref})"
	}
	return "this operation needs the " + scope + " capability"
}
