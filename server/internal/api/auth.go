package api

import (
	"net/http"

	"github.com/originweave/bap/server/internal/app"
)

// Principal is an authenticated caller: the actor its commands are bound to and the capabilities
// (OAuth scopes) it holds.
type Principal struct {
	Actor  app.Actor
	Scopes map[string]bool
	// ClientID is the OAuth client (workload) the credential was issued to; empty in the local profile.
	ClientID string
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
}

// LocalOperator authenticates every request as the local operator of tenant `local` with every
// capability: the local profile, where reaching the Unix socket or loopback port is the credential.
type LocalOperator struct{}

// Authenticate implements Authenticator.
func (LocalOperator) Authenticate(*http.Request) (Principal, error) {
	scopes := make(map[string]bool, len(AllScopes))
	for _, s := range AllScopes {
		scopes[s] = true
	}
	return Principal{Actor: app.Actor{Tenant: "local", Subject: "operator:local"}, Scopes: scopes}, nil
}
