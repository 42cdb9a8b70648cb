// Package console serves the operator console at /console (issue #18, ADR 0020, docs/console.md):
// the embedded single-page app (built from console/ by scripts/build-console.sh and committed,
// so `go build` alone serves it) under a strict Content-Security-Policy, and the console's
// sign-in.
//
// In the local profile, `bap console` asks the server over the Unix socket (the operator's door)
// for a one-time login URL; opening it trades the URL's token for an operator session: an
// HttpOnly, SameSite=Strict cookie, and a CSRF token the app sends in a header with every
// request. A request that carries the cookie is the operator only with that header (and, when
// the browser says where it comes from, from this origin); anything else is judged as before by
// the next authenticator, so an agent on TCP loopback stays the agent. In the remote profile the
// app is a public OAuth client of the server's own authorization server (authorization code +
// PKCE), registered per tenant at start; it sends the person's bearer token.
//
// The console calls the BAP HTTP API like any client, plus the few routes only it needs (its
// session, the operator's task list); decisions it sends record resolved_via "console" and the
// signed-in subject.
package console
