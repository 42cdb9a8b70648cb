package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ory/fosite"

	"github.com/originweave/bap/server/internal/app"
)

// Route is one HTTP route of the authorization server; all of them are anonymous (they
// authenticate clients and people themselves).
type Route struct {
	Pattern string // net/http ServeMux pattern
	Label   string // metrics and log label
	Handler http.Handler
}

// Routes are the OAuth endpoints (CONTRACT "Profiles and endpoints") and the two metadata
// documents.
func (s *Server) Routes() []Route {
	return []Route{
		{"POST /oauth2/token", "oauth_token", http.HandlerFunc(s.token)},
		{"GET /oauth2/auth", "oauth_authorize", http.HandlerFunc(s.authorize)},
		{"POST /oauth2/auth", "oauth_authorize", http.HandlerFunc(s.authorize)},
		{"POST /oauth2/introspect", "oauth_introspect", http.HandlerFunc(s.introspect)},
		{"POST /oauth2/revoke", "oauth_revoke", http.HandlerFunc(s.revoke)},
		{"GET /oauth2/jwks.json", "oauth_jwks", http.HandlerFunc(s.jwks)},
		{"GET /.well-known/oauth-authorization-server", "oauth_metadata", http.HandlerFunc(s.serverMetadata)},
		{"GET /.well-known/oauth-protected-resource", "resource_metadata", http.HandlerFunc(s.resourceMetadata)},
		{"GET /.well-known/oauth-protected-resource/{rest...}", "resource_metadata", http.HandlerFunc(s.resourceMetadata)},
	}
}

// errInvalidTarget is RFC 8707's error for a resource this server does not serve.
var errInvalidTarget = &fosite.RFC6749Error{
	ErrorField:       "invalid_target",
	DescriptionField: "The requested resource is not served by this authorization server.",
	CodeField:        http.StatusBadRequest,
}

// bindResource checks the RFC 8707 `resource` parameters of form and replaces fosite's `audience`
// with this server's resource: tokens are only ever bound to it. A resource under the server's URL
// (e.g. <resource>/mcp) names the same server.
func (s *Server) bindResource(form url.Values) error {
	for _, v := range form["resource"] {
		c := CanonicalResource(v)
		if c != s.cfg.Resource && !strings.HasPrefix(c, s.cfg.Resource+"/") {
			return errInvalidTarget
		}
	}
	form.Del("audience")
	form.Set("audience", s.cfg.Resource)
	return nil
}

func writeOAuthError(w http.ResponseWriter, status int, code, desc string, retryAfter time.Duration) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}

func errorCode(err error) string {
	return fosite.ErrorToRFC6749Error(err).ErrorField
}

// token is the token endpoint: client credentials, authorization code (+PKCE) and refresh grants.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", "The request body could not be parsed.", 0)
		return
	}
	clientID, _, basic := r.BasicAuth()
	if !basic {
		clientID = r.PostForm.Get("client_id")
	}
	if u, err := url.QueryUnescape(clientID); err == nil {
		clientID = u
	}
	refuse := func(reason string) {
		s.record(ctx, app.AuthDecision{ClientID: clip(clientID), Operation: "oauth_token", Outcome: app.AuthRefused, Reason: reason})
	}
	failKey := "token|" + clientID + "|" + remoteIP(r)
	if ok, wait := s.failureLimit.Peek(failKey); !ok {
		refuse("too_many_failures")
		writeOAuthError(w, http.StatusTooManyRequests, "temporarily_unavailable", "Too many failed client authentications; retry later.", wait)
		return
	}
	if err := s.bindResource(r.PostForm); err != nil {
		refuse("invalid_target")
		writeOAuthError(w, http.StatusBadRequest, "invalid_target", errInvalidTarget.DescriptionField, 0)
		return
	}
	if r.PostForm.Get("grant_type") == "client_credentials" && r.PostForm.Has("scope") {
		// CONTRACT: with `scope`, the intersection of what was asked and what the client holds.
		if c, err := s.store.GetClient(ctx, clientID); err == nil {
			var keep []string
			for _, sc := range strings.Fields(r.PostForm.Get("scope")) {
				if slices.Contains(c.GetScopes(), sc) && !slices.Contains(keep, sc) {
					keep = append(keep, sc)
				}
			}
			if len(keep) == 0 {
				refuse("invalid_scope")
				writeOAuthError(w, http.StatusBadRequest, "invalid_scope", "None of the requested scopes is granted to this client.", 0)
				return
			}
			r.PostForm.Set("scope", strings.Join(keep, " "))
		}
	}
	sess := &Session{}
	ar, err := s.provider.NewAccessRequest(ctx, r, sess)
	if err != nil {
		if errors.Is(err, fosite.ErrInvalidClient) {
			s.failureLimit.Charge(failKey)
		}
		refuse(errorCode(err))
		s.provider.WriteAccessError(ctx, w, ar, err)
		return
	}
	c, _ := ar.GetClient().(*client)
	// Counted only once the client has authenticated, so that nobody can spend another client's
	// allowance by sending its id.
	if ok, wait := s.tokenLimit.Allow("token|" + ar.GetClient().GetID()); !ok {
		refuse("rate_limited")
		writeOAuthError(w, http.StatusTooManyRequests, "temporarily_unavailable", "Too many token requests for this client; retry later.", wait)
		return
	}
	if c != nil && ar.GetGrantTypes().ExactOne("client_credentials") {
		sess.Subject, sess.ClientID, sess.Tenant = c.id, c.id, c.tenant
		scopes := ar.GetRequestedScopes()
		if len(scopes) == 0 {
			scopes = c.scopes
		}
		for _, sc := range scopes {
			ar.GrantScope(sc)
		}
		ar.GrantAudience(s.cfg.Resource)
	}
	resp, err := s.provider.NewAccessResponse(ctx, ar)
	if err != nil {
		refuse(errorCode(err))
		s.provider.WriteAccessError(ctx, w, ar, err)
		return
	}
	granted, _ := ar.GetSession().(*Session)
	d := app.AuthDecision{ClientID: clip(clientID), Operation: "oauth_token", Outcome: app.AuthIssued,
		Scope: strings.Join(ar.GetGrantedScopes(), " "), Reason: strings.Join(ar.GetGrantTypes(), " ")}
	if granted != nil {
		d.Tenant, d.Subject = granted.Tenant, subjectOf(granted)
	}
	s.record(ctx, d)
	s.provider.WriteAccessResponse(ctx, w, ar, resp)
}

func subjectOf(sess *Session) string {
	if sess.Subject == sess.ClientID {
		return "client:" + sess.ClientID
	}
	return "user:" + sess.Subject
}

// clip bounds a client-chosen string before it goes into the audit trail.
func clip(v string) string {
	if len(v) > 100 {
		return v[:100]
	}
	return v
}

// issWriter adds the RFC 9207 `iss` parameter to every authorization response redirect, errors
// included (fosite adds nothing).
type issWriter struct {
	http.ResponseWriter
	iss string
}

func (w *issWriter) WriteHeader(code int) {
	if loc := w.Header().Get("Location"); loc != "" && code >= 300 && code < 400 {
		if u, err := url.Parse(loc); err == nil {
			q := u.Query()
			if q.Get("iss") == "" {
				q.Set("iss", w.iss)
				u.RawQuery = q.Encode()
				w.Header().Set("Location", u.String())
			}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// authorize is the authorization endpoint: GET shows the sign-in and consent page, POST signs the
// person in and redirects with a code (or an error) and `iss`.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", "The request could not be parsed.", 0)
		return
	}
	badTarget := s.bindResource(r.Form)
	iw := &issWriter{ResponseWriter: w, iss: s.cfg.Issuer}
	ar, err := s.provider.NewAuthorizeRequest(ctx, r)
	if err != nil {
		s.provider.WriteAuthorizeError(ctx, iw, ar, err)
		return
	}
	if badTarget != nil {
		s.provider.WriteAuthorizeError(ctx, iw, ar, badTarget)
		return
	}
	form := ar.GetRequestForm()
	if form.Get("code_challenge") == "" || form.Get("code_challenge_method") != "S256" {
		s.provider.WriteAuthorizeError(ctx, iw, ar, fosite.ErrInvalidRequest.WithHint("PKCE is required: send code_challenge with code_challenge_method=S256."))
		return
	}
	c, ok := ar.GetClient().(*client)
	if !ok {
		s.provider.WriteAuthorizeError(ctx, iw, ar, fosite.ErrServerError)
		return
	}
	page := loginPage{Client: c.name, Scopes: ar.GetRequestedScopes(), Hidden: hiddenFields(r.Form)}
	if r.Method == http.MethodGet {
		s.renderLogin(w, http.StatusOK, page)
		return
	}
	switch r.PostForm.Get("decision") {
	case "deny":
		s.record(ctx, app.AuthDecision{Tenant: c.tenant, ClientID: c.id, Operation: "oauth_authorize", Outcome: app.AuthRefused, Reason: "consent_denied"})
		s.provider.WriteAuthorizeError(ctx, iw, ar, fosite.ErrAccessDenied.WithHint("The person declined."))
		return
	case "allow":
	default:
		page.Error = "Choose Allow or Deny."
		s.renderLogin(w, http.StatusBadRequest, page)
		return
	}
	name := strings.TrimSpace(r.PostForm.Get("username"))
	page.Username = name
	failKey := "login|" + c.tenant + "|" + strings.ToLower(name) + "|" + remoteIP(r)
	ipKey := "login-ip|" + remoteIP(r) // across names and tenants: spraying one password over many names
	if ok, wait := s.signInAllowed(failKey, ipKey); !ok {
		s.record(ctx, app.AuthDecision{Tenant: c.tenant, ClientID: c.id, Operation: "oauth_authorize", Outcome: app.AuthRefused, Reason: "too_many_failures"})
		w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		page.Error = fmt.Sprintf("Too many failed sign-ins. Try again in %d seconds.", int((wait+time.Second-1)/time.Second))
		s.renderLogin(w, http.StatusTooManyRequests, page)
		return
	}
	personID, err := s.signIn(ctx, c.tenant, name, r.PostForm.Get("password"))
	if err != nil {
		s.log.Error("sign-in failed", "err", err)
		s.provider.WriteAuthorizeError(ctx, iw, ar, fosite.ErrServerError)
		return
	}
	if personID == "" {
		s.failureLimit.Charge(failKey)
		s.signInIPLimit.Charge(ipKey)
		s.record(ctx, app.AuthDecision{Tenant: c.tenant, ClientID: c.id, Operation: "oauth_authorize", Outcome: app.AuthRefused, Reason: "bad_credentials"})
		page.Error = "The name or the password is wrong."
		s.renderLogin(w, http.StatusUnauthorized, page)
		return
	}
	// The name's count starts again; the address's does not: signing in to one account of one's
	// own must not buy more guesses at other names.
	s.failureLimit.Reset(failKey)
	for _, sc := range ar.GetRequestedScopes() {
		ar.GrantScope(sc)
	}
	ar.GrantAudience(s.cfg.Resource)
	sess := &Session{Subject: personID, Tenant: c.tenant, ClientID: c.id, Username: name}
	resp, err := s.provider.NewAuthorizeResponse(ctx, ar, sess)
	if err != nil {
		s.provider.WriteAuthorizeError(ctx, iw, ar, err)
		return
	}
	resp.AddParameter("iss", s.cfg.Issuer)
	s.record(ctx, app.AuthDecision{Tenant: c.tenant, Subject: "user:" + personID, ClientID: c.id, Operation: "oauth_authorize",
		Outcome: app.AuthAllowed, Scope: strings.Join(ar.GetGrantedScopes(), " "), Reason: "signed_in"})
	s.provider.WriteAuthorizeResponse(ctx, iw, ar, resp)
}

// signInAllowed reports whether a sign-in may be tried: neither the name at this address nor the
// address across all names has spent its failures. Both limits are answered alike, so a caller
// cannot tell which one held it back; wait is the longer of the two.
func (s *Server) signInAllowed(nameKey, ipKey string) (bool, time.Duration) {
	okName, waitName := s.failureLimit.Peek(nameKey)
	okIP, waitIP := s.signInIPLimit.Peek(ipKey)
	return okName && okIP, max(waitName, waitIP)
}

// hiddenFields are the authorization request parameters the page posts back.
func hiddenFields(form url.Values) []hiddenField {
	var out []hiddenField
	keys := make([]string, 0, len(form))
	for k := range form {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch k {
		case "username", "password", "decision", "audience":
			continue
		}
		for _, v := range form[k] {
			out = append(out, hiddenField{Name: k, Value: v})
		}
	}
	return out
}

// signIn checks a person's password; it returns "" (and no error) for a wrong name or password,
// taking the same time for both.
func (s *Server) signIn(ctx context.Context, tenant, name, password string) (string, error) {
	var id, hash string
	err := s.pool.QueryRow(ctx, `SELECT person_id, password_hash FROM person_account
		WHERE tenant_id = $1 AND name = $2 AND disabled_at IS NULL`, tenant, name).Scan(&id, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		_, _ = checkPassword(dummyHash, password)
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading person: %w", err)
	}
	ok, err := checkPassword(hash, password)
	if err != nil || !ok {
		return "", err
	}
	return id, nil
}

// introspect is RFC 7662 introspection for authenticated clients (resource servers); a client
// learns only about tokens of its own tenant. The caller authenticates with its own client
// credentials, HTTP Basic, and nothing else: fosite would also take a bearer access token (in the
// Authorization header, the form or the query) as the caller's credential, and the caller — whose
// tenant decides what it may learn — would then be whoever the form's client_id names.
func (s *Server) introspect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	refuse := func(reason string) {
		s.record(ctx, app.AuthDecision{Operation: "oauth_introspect", Outcome: app.AuthRefused, Reason: reason})
		w.Header().Set("WWW-Authenticate", `Basic realm="bap", charset="UTF-8"`)
		writeOAuthError(w, http.StatusUnauthorized, "invalid_client",
			"Introspection is for resource servers authenticated with their client credentials (HTTP Basic), not with a bearer token.", 0)
	}
	if fosite.AccessTokenFromRequest(r) != "" {
		refuse("bearer_caller")
		return
	}
	callerID, _, basic := r.BasicAuth()
	if !basic {
		refuse("no_client_credentials")
		return
	}
	ir, err := s.provider.NewIntrospectionRequest(ctx, r, &Session{})
	if err != nil {
		s.provider.WriteIntrospectionError(ctx, w, err) // an inactive token is {"active":false}
		return
	}
	// fosite authenticated exactly this client (its Basic credentials, URL-decoded).
	callerID, err = url.QueryUnescape(callerID)
	if err != nil {
		writeInactive(w)
		return
	}
	caller, err := s.store.GetClient(ctx, callerID)
	c, isClient := caller.(*client)
	owner, ok := ir.GetAccessRequester().GetClient().(*client)
	if err != nil || !isClient || !ok || c.tenant != owner.tenant {
		writeInactive(w)
		return
	}
	s.provider.WriteIntrospectionResponse(ctx, w, ir)
}

func writeInactive(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`{"active":false}`))
}

// revoke is RFC 7009 revocation of a client's own access or refresh token.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	err := s.provider.NewRevocationRequest(ctx, r)
	clientID, _, basic := r.BasicAuth()
	if !basic {
		clientID = r.PostForm.Get("client_id")
	}
	outcome, reason := app.AuthRevoked, "token_revoked"
	if err != nil {
		outcome, reason = app.AuthRefused, errorCode(err)
	}
	s.record(ctx, app.AuthDecision{ClientID: clip(clientID), Operation: "oauth_revoke", Outcome: outcome, Reason: reason})
	s.provider.WriteRevocationResponse(ctx, w, err)
}

func writeJSONDoc(w http.ResponseWriter, v any, maxAge int) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age="+strconv.Itoa(maxAge))
	_, _ = w.Write(body)
}

func (s *Server) jwks(w http.ResponseWriter, r *http.Request) {
	if _, err := s.keys.current(r.Context()); err != nil { // rotates when due
		s.log.Warn("signing key unavailable", "err", err)
	}
	writeJSONDoc(w, s.keys.jwks(), 60)
}

// serverMetadata is the RFC 8414 document.
func (s *Server) serverMetadata(w http.ResponseWriter, _ *http.Request) {
	iss := s.cfg.Issuer
	writeJSONDoc(w, map[string]any{
		"issuer":                                         iss,
		"authorization_endpoint":                         iss + "/oauth2/auth",
		"token_endpoint":                                 iss + "/oauth2/token",
		"jwks_uri":                                       iss + "/oauth2/jwks.json",
		"introspection_endpoint":                         iss + "/oauth2/introspect",
		"revocation_endpoint":                            iss + "/oauth2/revoke",
		"response_types_supported":                       []string{"code"},
		"response_modes_supported":                       []string{"query"},
		"grant_types_supported":                          []string{"authorization_code", "client_credentials", "refresh_token"},
		"code_challenge_methods_supported":               []string{"S256"},
		"token_endpoint_auth_methods_supported":          []string{"client_secret_basic", "client_secret_post", "none"},
		"introspection_endpoint_auth_methods_supported":  []string{"client_secret_basic"},
		"revocation_endpoint_auth_methods_supported":     []string{"client_secret_basic", "client_secret_post", "none"},
		"scopes_supported":                               Scopes,
		"authorization_response_iss_parameter_supported": true,
		"resource_indicators_supported":                  true,
	}, 300)
}

// resourceMetadata is the RFC 9728 document, at the root and path-inserted (e.g. for /mcp).
func (s *Server) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	resource := s.cfg.Resource
	if rest := strings.Trim(r.PathValue("rest"), "/"); rest != "" {
		resource += "/" + rest
	}
	writeJSONDoc(w, map[string]any{
		"resource":                              resource,
		"authorization_servers":                 []string{s.cfg.Issuer},
		"scopes_supported":                      Scopes,
		"bearer_methods_supported":              []string{"header"},
		"resource_signing_alg_values_supported": []string{"ES256"},
		"resource_name":                         "BAP runtime",
	}, 300)
}
