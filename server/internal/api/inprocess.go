package api

import (
	"context"
	"net/http"
)

type inProcessKey struct{}

// InProcess returns ctx marking a request made inside this server on behalf of p: a caller that
// another transport of the same server (the MCP adapter) already authenticated with the same
// Authenticator. Such a request is not authenticated again; its operation's scope, the rate
// limit and the audit trail apply to p as to any caller. Only code can set a context value, so no
// request from the network can claim it.
func InProcess(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, inProcessKey{}, p)
}

// authenticateCaller returns the in-process principal of r, or authenticates r with a.
func authenticateCaller(a Authenticator, r *http.Request) (Principal, error) {
	if p, ok := r.Context().Value(inProcessKey{}).(Principal); ok {
		return p, nil
	}
	return a.Authenticate(r)
}
