package app

import "time"

// Credential is what a verified access token says about its bearer: the actor its requests are
// bound to, the OAuth client (workload) it was issued to and the capabilities it grants. Verifiers
// build it from a token they checked themselves (signature, issuer, audience, expiry, revocation);
// the token itself is never part of it.
type Credential struct {
	Actor     Actor
	ClientID  string
	Scopes    []string
	ExpiresAt time.Time
}

// Auth decision outcomes recorded in the audit trail.
const (
	AuthAllowed = "allowed"
	AuthRefused = "refused"
	AuthIssued  = "issued"
	AuthRevoked = "revoked"
)

// AuthDecision is one entry of the authorization audit trail: who (tenant, subject, client) asked
// for what (operation, task, scope) and what was decided, with a short machine reason. It never
// holds a credential.
type AuthDecision struct {
	Time      time.Time
	Tenant    string // empty when the caller could not be identified
	Subject   string
	ClientID  string
	Operation string
	TaskID    string
	Scope     string
	Outcome   string // AuthAllowed, AuthRefused, AuthIssued or AuthRevoked
	Reason    string
}
