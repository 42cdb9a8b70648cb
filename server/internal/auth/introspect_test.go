package auth

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// Introspection answers only a resource server authenticated with its own client credentials
// (HTTP Basic), and only about tokens of that client's tenant. A caller holding some bearer token
// cannot pick its tenant with the form's client_id: before, fosite accepted the bearer token as
// the caller's credential and the tenant was taken from client_id.
func TestIntrospectionRefusesBearerCallers(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	victim := b.client("victim", "bap:tasks.read")
	victimTok := b.accessToken(victim)
	attacker := b.client("attacker", "bap:tasks.read")
	attackerTok := b.accessToken(attacker)

	introspect := func(v url.Values, edit func(*http.Request)) reply {
		t.Helper()
		req, _ := http.NewRequest("POST", b.base+"/oauth2/introspect", strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if edit != nil {
			edit(req)
		}
		return b.send(req)
	}
	bearer := func(tok string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	}
	for _, tc := range []struct {
		name string
		form url.Values
		edit func(*http.Request)
	}{
		{"bearer header, client_id of the victim's tenant", url.Values{"token": {victimTok}, "client_id": {victim.ClientID}}, bearer(attackerTok)},
		{"bearer header of the victim's own token", url.Values{"token": {attackerTok}, "client_id": {victim.ClientID}}, bearer(victimTok)},
		{"access_token form parameter", url.Values{"token": {victimTok}, "client_id": {victim.ClientID}, "access_token": {attackerTok}}, nil},
		{"access_token query parameter", url.Values{"token": {victimTok}, "client_id": {victim.ClientID}},
			func(r *http.Request) { r.URL.RawQuery = "access_token=" + url.QueryEscape(attackerTok) }},
		{"client_secret_post", url.Values{"token": {victimTok}, "client_id": {victim.ClientID}, "client_secret": {victim.Secret}}, nil},
		{"no credentials", url.Values{"token": {victimTok}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := introspect(tc.form, tc.edit)
			if r.status != http.StatusUnauthorized || r.body["error"] != "invalid_client" || r.body["active"] != nil {
				t.Fatalf("%d %s, want 401 invalid_client", r.status, r.raw)
			}
			if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
			}
			if strings.Contains(r.raw, "victim") || strings.Contains(r.raw, victim.ClientID) {
				t.Errorf("the refusal tells about the token: %s", r.raw)
			}
		})
	}
	// The tenant is the authenticated client's: the victim's resource server learns about its
	// tenant's token, the attacker's (HTTP Basic, right secret) does not.
	if r := b.form("/oauth2/introspect", url.Values{"token": {victimTok}}, victim.ClientID, victim.Secret); r.status != 200 || r.body["active"] != true {
		t.Fatalf("the victim's own resource server: %d %s", r.status, r.raw)
	}
	if r := b.form("/oauth2/introspect", url.Values{"token": {victimTok}, "client_id": {victim.ClientID}}, attacker.ClientID, attacker.Secret); r.body["active"] != false {
		t.Fatalf("another tenant's client introspects, naming the victim's client_id: %s", r.raw)
	}
	// The metadata offers what is served.
	meta := b.send(func() *http.Request {
		req, _ := http.NewRequest("GET", b.base+"/.well-known/oauth-authorization-server", nil)
		return req
	}())
	if got := fmt.Sprint(meta.body["introspection_endpoint_auth_methods_supported"]); got != "[client_secret_basic]" {
		t.Fatalf("introspection_endpoint_auth_methods_supported %s", got)
	}
}

// Failed sign-ins are limited per address across names: spraying one password over many names
// is held back like guessing at one name, with the same answer, while another address and the
// per-name limit are unaffected.
func TestSignInSprayAcrossNamesIs429(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := t.Context()
	const redirect = "http://127.0.0.1:9/callback"
	pc, err := CreateClient(ctx, b.pool, ClientSpec{Tenant: "acme", Name: "Console", Grant: "authorization_code",
		Scopes: []string{"bap:tasks.read"}, RedirectURIs: []string{redirect}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CreatePerson(ctx, b.pool, "acme", "ada", "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	_, challenge := pkcePair()
	signIn := func(addr, name, password string) *httptest.ResponseRecorder {
		t.Helper()
		v := url.Values{"response_type": {"code"}, "client_id": {pc.ClientID}, "redirect_uri": {redirect},
			"scope": {"bap:tasks.read"}, "state": {"state-123456789"}, "code_challenge": {challenge},
			"code_challenge_method": {"S256"}, "resource": {b.base}, "username": {name}, "password": {password}, "decision": {"allow"}}
		req := httptest.NewRequest("POST", b.base+"/oauth2/auth", strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = addr
		w := httptest.NewRecorder()
		b.srv.authorize(w, req)
		return w
	}
	const sprayer, bystander = "198.51.100.7:40000", "203.0.113.9:40000"
	burst := b.srv.cfg.SignInIPBurst
	if burst <= b.srv.cfg.FailureBurst {
		t.Fatalf("the per-address burst %d must exceed the per-name burst %d", burst, b.srv.cfg.FailureBurst)
	}
	for i := 0; i < burst; i++ {
		if w := signIn(sprayer, fmt.Sprintf("user%02d", i), "Winter2026!"); w.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d on a new name: %d, want 401", i, w.Code)
		}
	}
	// One more name: held back, with the per-name limit's answer.
	w := signIn(sprayer, "user-next", "Winter2026!")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "Too many failed sign-ins") {
		t.Fatalf("after %d names from one address: %d Retry-After %q", burst, w.Code, w.Header().Get("Retry-After"))
	}
	// The right password from that address waits too; it is not tried (no name is confirmed).
	if w := signIn(sprayer, "ada", "correct horse battery"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("right password from the spraying address: %d", w.Code)
	}
	// Another address signs in.
	if w := signIn(bystander, "ada", "correct horse battery"); w.Code != http.StatusSeeOther && w.Code != http.StatusFound {
		t.Fatalf("another address: %d %s", w.Code, w.Body.String())
	}
	// The per-name limit still holds on its own (one name, many guesses, from a fresh address).
	const guesser = "192.0.2.44:1234"
	for i := 0; i < b.srv.cfg.FailureBurst; i++ {
		signIn(guesser, "ada", fmt.Sprintf("guess %d", i))
	}
	if w := signIn(guesser, "ada", "another guess"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("per-name limit: %d", w.Code)
	}
}
