package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// TokenVerifier checks an OAuth access token presented to this resource server: signature, `typ`,
// issuer, audience, expiry and not-before, revocation. It answers an *app.Error with code
// unauthenticated (its detail never quotes the token) for any token it does not accept.
// Implementations must be safe for concurrent use.
type TokenVerifier interface {
	VerifyAccessToken(ctx context.Context, token string) (app.Credential, error)
}

// AuditLog receives authorization decisions. RecordAuthDecision must not block the request for
// long (implementations queue and write in the background) and must not fail it.
type AuditLog interface {
	RecordAuthDecision(ctx context.Context, d app.AuthDecision)
}

// Limiter bounds the request rate of one key (a client). Allow reports whether a request may go
// on and, when not, how long the caller should wait.
type Limiter interface {
	Allow(key string) (bool, time.Duration)
}

// Challenger is implemented by authenticators that describe themselves in a `WWW-Authenticate`
// header: on a 401 (err is the refusal) and on a 403 insufficient_scope (scope is the one needed).
type Challenger interface {
	Challenge(err error, scope string) string
}

// Bearer authenticates requests by an OAuth 2.0 bearer access token in the Authorization header
// (RFC 6750 §2.1 only: never a query parameter or a form field). It is the resource-server check of
// the remote profile, reusable by every transport (BAP HTTP, streams, MCP).
type Bearer struct {
	Verifier TokenVerifier
	// ResourceMetadataURL is this resource's RFC 9728 metadata document, advertised in challenges.
	ResourceMetadataURL string
}

// errNoToken is the refusal of a request that carries no bearer token at all.
var errNoToken = &app.Error{Code: app.CodeUnauthenticated, Detail: "this request needs an `Authorization: Bearer` access token"}

// Authenticate implements Authenticator.
func (b Bearer) Authenticate(r *http.Request) (Principal, error) {
	vals := r.Header.Values("Authorization")
	if len(vals) == 0 {
		return Principal{}, errNoToken
	}
	if len(vals) > 1 {
		return Principal{}, &app.Error{Code: app.CodeUnauthenticated, Detail: "more than one Authorization header"}
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return Principal{}, &app.Error{Code: app.CodeUnauthenticated, Detail: "the Authorization header must be `Bearer <access token>`"}
	}
	cred, err := b.Verifier.VerifyAccessToken(r.Context(), token)
	if err != nil {
		return Principal{}, err
	}
	scopes := make(map[string]bool, len(cred.Scopes))
	for _, s := range cred.Scopes {
		scopes[s] = true
	}
	return Principal{Actor: cred.Actor, Scopes: scopes, ClientID: cred.ClientID}, nil
}

// Challenge implements Challenger (RFC 6750 §3, RFC 9728 §5.1).
func (b Bearer) Challenge(err error, scope string) string {
	var parts []string
	if scope != "" {
		parts = append(parts, `error="insufficient_scope"`, "scope="+strconv.Quote(scope),
			`error_description="this operation needs the `+scope+` capability"`)
	} else if err != nil && !errors.Is(err, errNoToken) {
		desc := "the access token is not valid for this resource"
		if e := app.AsError(err); e != nil {
			desc = e.Detail
		}
		parts = append(parts, `error="invalid_token"`, "error_description="+strconv.Quote(desc))
	}
	if b.ResourceMetadataURL != "" {
		parts = append(parts, "resource_metadata="+strconv.Quote(b.ResourceMetadataURL))
	}
	return "Bearer " + strings.Join(parts, ", ")
}
