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
	// AuthHeld is a policy decision that holds an action for an approval.
	AuthHeld = "held"
)

// Decision points: where a decision was taken (migration 0014).
const (
	PointRequest            = "request"             // the request's authentication and capability
	PointAdmission          = "admission"           // a task admitted, queued or refused for capacity
	PointOriginPolicy       = "origin_policy"       // an origin the task's policy allows or refuses
	PointApprovalRule       = "approval_rule"       // an act an approval rule holds, or lets run
	PointApprovalResolution = "approval_resolution" // who may resolve an approval, and what they decided
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
	Outcome   string // AuthAllowed, AuthRefused, AuthIssued, AuthRevoked or AuthHeld
	Reason    string
	// Point is where it was decided (PointRequest when empty).
	Point string
	// Via is the channel the principal came through (ViaAPI, ViaSocket, ViaMCP, …).
	Via string
	// SessionID, CommandID, TargetOrigin, ApprovalID and ApprovalState bind a policy decision to
	// the browser session, the command, the origin it reached for and the approval involved (its
	// state after the decision; "" is none). The task's purpose, origin scope and data
	// classification are bound through TaskID.
	SessionID, CommandID, TargetOrigin, ApprovalID, ApprovalState string
}
