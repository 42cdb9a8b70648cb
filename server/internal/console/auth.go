package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
)

// CookieName is the local profile's console session cookie (HttpOnly, SameSite=Strict, Path /).
const CookieName = "bap_console"

// CSRFHeader carries the session's CSRF token on every request the console sends.
const CSRFHeader = "X-BAP-CSRF"

// ClientPrefix starts the client id of a tenant's console client (remote profile): the rest is
// the tenant's id.
const ClientPrefix = "cli_console_"

// Scopes are the console's capabilities: a local session's, and what it asks a person's token
// for in the remote profile (its client is registered with these: auth.ConsoleScopes).
var Scopes = []string{
	"bap:tasks.read", "bap:tasks.write", "bap:browser.observe", "bap:browser.act",
	"bap:approvals.request", "bap:approvals.resolve", "bap:artifacts.read", "bap:events.read",
}

// ClientID is the console's public OAuth client of tenant.
func ClientID(tenant string) string { return ClientPrefix + tenant }

// Authenticator accepts the console's session cookie (local profile) in front of Next, the
// profile's own authenticator. A request without the cookie, or with an Authorization header, is
// Next's to judge: the Unix socket stays the operator and TCP loopback the agent.
type Authenticator struct {
	// Sessions holds the local profile's sessions; nil in the remote profile (bearer tokens only).
	Sessions *Sessions
	// Next authenticates every other request.
	Next api.Authenticator
}

var _ api.Authenticator = Authenticator{}

// Authenticate implements api.Authenticator.
func (a Authenticator) Authenticate(r *http.Request) (api.Principal, error) {
	if a.Sessions != nil && len(r.Header.Values("Authorization")) == 0 {
		if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
			sess, err := a.session(r, c.Value, true)
			if err != nil {
				return api.Principal{}, err
			}
			// The operator as on the socket, where the session was opened (bap console): a decision
			// records operator:local, resolved_via socket. With the console's capabilities only:
			// the operator's secrets stay on the socket (bap secret), out of a browser's reach.
			scopes := make(map[string]bool, len(Scopes))
			for _, s := range Scopes {
				scopes[s] = true
			}
			// Its workload is the console's client, as a person's token names it in the remote profile.
			return api.Principal{Actor: sess.Actor, Scopes: scopes, ClientID: ClientID(sess.Actor.Tenant), Via: app.ViaSocket}, nil
		}
	}
	return a.Next.Authenticate(r)
}

// session returns the live session of a cookie, refusing a request from another site (the
// browser's Sec-Fetch-Site and Origin, when sent) and, when csrf, one without the session's CSRF
// token. Every refusal is 401 unauthenticated: the cookie alone is not a credential.
func (a Authenticator) session(r *http.Request, cookie string, csrf bool) (*Session, error) {
	sess, ok := a.Sessions.Lookup(cookie)
	if !ok {
		return nil, &app.Error{Code: app.CodeUnauthenticated, Detail: "the console session is unknown or expired: run `bap console` for a new login URL"}
	}
	if !sameOrigin(r) {
		return nil, &app.Error{Code: app.CodeUnauthenticated, Detail: "a console session is accepted only from the console's own origin"}
	}
	if csrf && !sess.csrfOK(r.Header.Get(CSRFHeader)) {
		return nil, &app.Error{Code: app.CodeUnauthenticated, Detail: "a console request must carry its session's " + CSRFHeader + " token"}
	}
	return sess, nil
}

// sameOrigin reports whether what the browser says about a request's initiator allows it: no
// Sec-Fetch-Site other than same-origin (or none: the person typed or opened the URL) and no
// Origin of another host. Browsers set both themselves; a page cannot forge them.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// Wrap returns the API's authenticator with the console in front of next: the session cookie
// when sessions is set (local profile), and the console's mark on its own client's tokens.
// Next's WWW-Authenticate challenges are kept.
func Wrap(sessions *Sessions, next api.Authenticator) Authenticator {
	return Authenticator{Sessions: sessions, Next: next}
}

// Challenging is an Authenticator whose Next describes itself in WWW-Authenticate (the remote
// profile's bearer check).
type Challenging struct{ Authenticator }

// Challenge implements api.Challenger by Next's.
func (c Challenging) Challenge(err error, scope string) string {
	if ch, ok := c.Next.(api.Challenger); ok {
		return ch.Challenge(err, scope)
	}
	return ""
}

// ForAPI is a as the API's Options.Authenticator: Challenging when Next challenges.
func (a Authenticator) ForAPI() api.Authenticator {
	if _, ok := a.Next.(api.Challenger); ok {
		return Challenging{a}
	}
	return a
}
