package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/ratelimit"
	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/originweave/bap/server/internal/store"
)

// bundle is one authorization server and BAP API on a fresh database, behind one httptest server,
// with a clock the test moves.
type bundle struct {
	t    testing.TB
	pool *pgxpool.Pool
	srv  *Server
	http *httptest.Server
	base string
	// skew is how far the server's clock runs ahead of the real one. The server's clock follows
	// the real one: fosite stamps iat from the real clock, so a clock frozen at setup rejected
	// tokens as "not valid yet" once a loaded machine took more than Leeway to issue them.
	skew atomic.Int64 // nanoseconds
	key  *serverkey.Key
}

func setup(t *testing.T, ttl time.Duration, configure ...func(*app.Config)) *bundle {
	t.Helper()
	return setupWith(t, time.Minute, ttl, nil, configure...)
}

func setupBench(b *testing.B, cacheTTL time.Duration) *bundle {
	b.Helper()
	return setupWith(b, cacheTTL, 0, nil)
}

func setupWith(t testing.TB, cacheTTL, ttl time.Duration, limiter api.Limiter, configure ...func(*app.Config)) *bundle {
	t.Helper()
	b := &bundle{t: t, pool: pgtest.NewDB(t), key: serverkey.Ephemeral()}
	ctx := context.Background()
	if err := store.New(b.pool).RegisterNode(ctx, app.NodeInfo{ID: "node_auth", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	cfg := app.Config{NodeID: "node_auth"}
	for _, o := range configure {
		o(&cfg)
	}
	svc, err := app.NewService(store.New(b.pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	b.http = httptest.NewServer(mux)
	t.Cleanup(b.http.Close)
	b.base = b.http.URL
	// The rate limits' clock stands still but for advance: a count of attempts against a burst
	// never sees a token refilled because the machine was slow.
	limitEpoch := time.Now()
	b.srv, err = New(ctx, Config{Pool: b.pool, ServerKey: b.key, Issuer: b.base, Resource: b.base, AccessTokenTTL: ttl,
		Now:                func() time.Time { return time.Now().Add(time.Duration(b.skew.Load())) },
		LimitNow:           func() time.Time { return limitEpoch.Add(time.Duration(b.skew.Load())) },
		RevocationCacheTTL: cacheTTL})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.srv.Stop)
	opts := api.Options{Service: svc, Authenticator: api.Bearer{Verifier: b.srv, ResourceMetadataURL: b.srv.ResourceMetadataURL()},
		Audit: b.srv.Audit(), Logger: slog.New(slog.DiscardHandler), Limiter: limiter}
	for _, rt := range b.srv.Routes() {
		opts.Mount = append(opts.Mount, api.Mount{Pattern: rt.Pattern, Label: rt.Label, Handler: rt.Handler})
	}
	h, err := api.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/", h)
	return b
}

func (b *bundle) advance(d time.Duration) { b.skew.Add(int64(d)) }

func (b *bundle) client(tenant string, scopes ...string) NewClient {
	b.t.Helper()
	nc, err := CreateClient(context.Background(), b.pool, ClientSpec{Tenant: tenant, Name: "test " + tenant, Scopes: scopes})
	if err != nil {
		b.t.Fatal(err)
	}
	return nc
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (b *bundle) send(req *http.Request) reply {
	b.t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (b *bundle) form(path string, v url.Values, user, pass string) reply {
	b.t.Helper()
	req, _ := http.NewRequest("POST", b.base+path, strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(url.QueryEscape(user), url.QueryEscape(pass))
	}
	return b.send(req)
}

func (b *bundle) token(c NewClient, extra ...string) reply {
	b.t.Helper()
	v := url.Values{"grant_type": {"client_credentials"}}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Add(extra[i], extra[i+1])
	}
	return b.form("/oauth2/token", v, c.ClientID, c.Secret)
}

func (b *bundle) accessToken(c NewClient, extra ...string) string {
	b.t.Helper()
	r := b.token(c, extra...)
	tok, _ := r.body["access_token"].(string)
	if r.status != 200 || tok == "" {
		b.t.Fatalf("token request: %d %s", r.status, r.raw)
	}
	return tok
}

func (b *bundle) api(method, path, token, body string) reply {
	b.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, b.base+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k-"+strings.ReplaceAll(b.t.Name(), "/", "-")+"-"+time.Now().Format("150405.000000000"))
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return b.send(req)
}

const taskBody = `{"goal":"order the cart","policy":{"allowed_origins":["https://shop.example.com"]}}`

// forge re-signs a token's header and claims after edit, with key (nil: the server's current key).
func (b *bundle) forge(token string, key *ecdsa.PrivateKey, editHeader, editClaims func(map[string]any)) string {
	b.t.Helper()
	parts := strings.Split(token, ".")
	var hdr, claims map[string]any
	for i, v := range []*map[string]any{&hdr, &claims} {
		raw, _ := base64.RawURLEncoding.DecodeString(parts[i])
		if err := json.Unmarshal(raw, v); err != nil {
			b.t.Fatal(err)
		}
	}
	if editHeader != nil {
		editHeader(hdr)
	}
	if editClaims != nil {
		editClaims(claims)
	}
	h, _ := json.Marshal(hdr)
	c, _ := json.Marshal(claims)
	input := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	if key == nil {
		k, err := b.srv.keys.current(context.Background())
		if err != nil {
			b.t.Fatal(err)
		}
		key = k.priv
	}
	digest := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		b.t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestResourceServerNegativeMatrix: every way a bearer token can be wrong is a 401 with a
// WWW-Authenticate challenge naming the resource metadata; missing scope is 403 naming the scope;
// another tenant's task is 404.
func TestResourceServerNegativeMatrix(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	rw := b.client("acme", "bap:tasks.read", "bap:tasks.write")
	good := b.accessToken(rw)
	created := b.api("POST", "/bap/v1/tasks", good, taskBody)
	if created.status != 201 {
		t.Fatalf("create_task with a good token: %d %s", created.status, created.raw)
	}
	taskID := created.body["task"].(map[string]any)["task_id"].(string)
	foreignKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	parts := strings.Split(good, ".")
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	unsigned := func() string {
		h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"at+jwt"}`))
		return h + "." + parts[1] + "."
	}

	revokedClient := b.client("acme", "bap:tasks.read")
	revokedClientToken := b.accessToken(revokedClient)
	if err := RevokeClient(context.Background(), b.pool, revokedClient.ClientID); err != nil {
		t.Fatal(err)
	}
	revokedToken := b.accessToken(rw)
	if r := b.form("/oauth2/revoke", url.Values{"token": {revokedToken}, "token_type_hint": {"access_token"}}, rw.ClientID, rw.Secret); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}

	cases := []struct {
		name   string
		header string // the whole Authorization header; "-" for none
		detail string
	}{
		{"no token", "-", "needs an `Authorization: Bearer`"},
		{"malformed", "Bearer not-a-jwt", "not a signed JWT"},
		{"wrong scheme", "Basic " + base64.StdEncoding.EncodeToString([]byte("a:b")), "must be `Bearer"},
		{"alg none", "Bearer " + unsigned(), "not signed with ES256"},
		{"alg HS256", "Bearer " + b.forge(good, nil, set("alg", "HS256"), nil), "not signed with ES256"},
		{"bad signature", "Bearer " + parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 64)), "signature is invalid"},
		{"foreign key", "Bearer " + b.forge(good, foreignKey, nil, nil), "signature is invalid"},
		{"unknown kid", "Bearer " + b.forge(good, foreignKey, set("kid", "nobodys-key-id"), nil), "not signed by a key of this server"},
		{"tampered claims", "Bearer " + parts[0] + "." + strings.Split(b.forge(good, nil, nil, set("scope", "bap:tasks.read bap:tasks.write bap:browser.act")), ".")[1] + "." + parts[2], "signature is invalid"},
		{"expired", "Bearer " + b.forge(good, nil, nil, func(m map[string]any) {
			m["iat"] = time.Now().Add(-20 * time.Minute).Unix()
			m["exp"] = time.Now().Add(-6 * time.Minute).Unix()
		}), "expired"},
		{"not yet valid", "Bearer " + b.forge(good, nil, nil, set("nbf", time.Now().Add(time.Minute).Unix())), "not valid yet"},
		{"issued in the future", "Bearer " + b.forge(good, nil, nil, func(m map[string]any) {
			m["iat"] = time.Now().Add(time.Minute).Unix()
			m["exp"] = time.Now().Add(10 * time.Minute).Unix()
		}), "not valid yet"},
		{"too long-lived", "Bearer " + b.forge(good, nil, nil, set("exp", time.Now().Add(time.Hour).Unix())), "longer than this server allows"},
		{"wrong issuer", "Bearer " + b.forge(good, nil, nil, set("iss", "https://other-as.example")), "issued by another authorization server"},
		{"wrong audience", "Bearer " + b.forge(good, nil, nil, set("aud", []string{"https://other-resource.example"})), "issued for another resource"},
		{"wrong typ", "Bearer " + b.forge(good, nil, set("typ", "JWT"), nil), "typ must be at+jwt"},
		{"missing claims", "Bearer " + b.forge(good, nil, nil, func(m map[string]any) { delete(m, "tenant") }), "lacks required claims"},
		{"crit header", "Bearer " + b.forge(good, nil, set("crit", []string{"x"}), nil), "critical header"},
		{"revoked client", "Bearer " + revokedClientToken, "revoked"},
		{"revoked token", "Bearer " + revokedToken, "revoked"},
		{"two headers", "", "more than one Authorization header"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", b.base+"/bap/v1/tasks/"+taskID, nil)
			switch tc.header {
			case "-":
			case "":
				req.Header.Add("Authorization", "Bearer "+good)
				req.Header.Add("Authorization", "Bearer "+good)
			default:
				req.Header.Set("Authorization", tc.header)
			}
			r := b.send(req)
			if r.status != 401 || r.body["code"] != "unauthenticated" {
				t.Fatalf("status %d %s, want 401 unauthenticated", r.status, r.raw)
			}
			if tc.detail != "" && !strings.Contains(r.body["detail"].(string), tc.detail) {
				t.Errorf("detail %q, want it to mention %q", r.body["detail"], tc.detail)
			}
			ch := r.header.Get("WWW-Authenticate")
			if !strings.HasPrefix(ch, "Bearer ") || !strings.Contains(ch, `resource_metadata="`+b.base+`/.well-known/oauth-protected-resource"`) {
				t.Errorf("WWW-Authenticate %q", ch)
			}
			if tc.header != "-" && !strings.Contains(ch, `error="invalid_token"`) {
				t.Errorf("WWW-Authenticate %q lacks error=invalid_token", ch)
			}
			if strings.Contains(r.raw, parts[2]) || strings.Contains(ch, parts[2]) {
				t.Error("the refusal echoes the token")
			}
		})
	}

	t.Run("missing scope", func(t *testing.T) {
		ro := b.accessToken(b.client("acme", "bap:tasks.read"))
		r := b.api("POST", "/bap/v1/tasks", ro, taskBody)
		if r.status != 403 || r.body["code"] != "insufficient_scope" || !strings.Contains(r.body["detail"].(string), "bap:tasks.write") {
			t.Fatalf("%d %s, want 403 insufficient_scope naming bap:tasks.write", r.status, r.raw)
		}
		if ch := r.header.Get("WWW-Authenticate"); !strings.Contains(ch, `error="insufficient_scope"`) || !strings.Contains(ch, `scope="bap:tasks.write"`) {
			t.Errorf("WWW-Authenticate %q", ch)
		}
		if r := b.api("GET", "/bap/v1/tasks/"+taskID, ro, ""); r.status != 200 {
			t.Fatalf("the read-only token reads its tenant's task: %d %s", r.status, r.raw)
		}
	})
	t.Run("other tenant", func(t *testing.T) {
		other := b.accessToken(b.client("globex", "bap:tasks.read", "bap:tasks.write"))
		for _, path := range []string{"/bap/v1/tasks/" + taskID, "/bap/v1/tasks/" + taskID + "/events"} {
			if r := b.api("GET", path, other, ""); r.status != 404 || r.body["code"] != "not_found" {
				t.Fatalf("GET %s as another tenant: %d %s, want 404", path, r.status, r.raw)
			}
		}
		if r := b.api("POST", "/bap/v1/tasks/"+taskID+"/cancel", other, `{}`); r.status != 404 {
			t.Fatalf("cancel as another tenant: %d %s, want 404", r.status, r.raw)
		}
	})
	t.Run("expires for real", func(t *testing.T) {
		b.advance(16 * time.Minute)
		defer b.advance(-16 * time.Minute)
		if r := b.api("GET", "/bap/v1/tasks/"+taskID, good, ""); r.status != 401 || !strings.Contains(r.body["detail"].(string), "expired") {
			t.Fatalf("after 16 minutes: %d %s", r.status, r.raw)
		}
	})

	// Every refusal is in the audit trail, with the operation and (when known) the tenant.
	b.srv.Audit().Flush(context.Background())
	var refused, scoped int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE outcome = 'refused' AND reason = 'unauthenticated' AND operation = 'get_task'),
		count(*) FILTER (WHERE reason = 'insufficient_scope' AND tenant_id = 'acme' AND scope = 'bap:tasks.write' AND client_id <> '')
		FROM auth_decision`).Scan(&refused, &scoped); err != nil {
		t.Fatal(err)
	}
	if refused < len(cases) || scoped != 1 {
		t.Errorf("audit trail: %d unauthenticated get_task refusals (want >= %d), %d scope refusals (want 1)", refused, len(cases), scoped)
	}
}

func TestClientCredentialsScopesAndResource(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.client("acme", "bap:tasks.read", "bap:tasks.write")
	claims := func(tok string) map[string]any {
		raw, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[1])
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return m
	}
	all := claims(b.accessToken(c))
	if all["scope"] != "bap:tasks.read bap:tasks.write" || all["client_id"] != c.ClientID || all["sub"] != c.ClientID || all["tenant"] != "acme" || all["iss"] != b.base {
		t.Errorf("claims without scope: %v", all)
	}
	if exp, iat := all["exp"].(float64), all["iat"].(float64); exp-iat != 900 {
		t.Errorf("lifetime %v s, want 900", exp-iat)
	}
	if inter := claims(b.accessToken(c, "scope", "bap:tasks.read bap:browser.act")); inter["scope"] != "bap:tasks.read" {
		t.Errorf("intersection: %v", inter["scope"])
	}
	if r := b.token(c, "scope", "bap:browser.act"); r.status != 400 || r.body["error"] != "invalid_scope" {
		t.Errorf("disjoint scope: %d %s", r.status, r.raw)
	}
	if r := b.token(c, "resource", b.base+"/"); r.status != 200 {
		t.Errorf("own resource with a trailing slash: %d %s", r.status, r.raw)
	}
	if r := b.token(c, "resource", "https://elsewhere.example"); r.status != 400 || r.body["error"] != "invalid_target" {
		t.Errorf("unknown resource: %d %s", r.status, r.raw)
	}
	wrong := c
	wrong.Secret = "bap_cs_wrong"
	if r := b.token(wrong); r.status != 401 || r.body["error"] != "invalid_client" {
		t.Errorf("wrong secret: %d %s", r.status, r.raw)
	}
	// Introspection: the client's own token is active; after revocation it is not.
	tok := b.accessToken(c)
	ir := b.form("/oauth2/introspect", url.Values{"token": {tok}}, c.ClientID, c.Secret)
	if ir.status != 200 || ir.body["active"] != true || ir.body["client_id"] != c.ClientID {
		t.Fatalf("introspection: %d %s", ir.status, ir.raw)
	}
	other := b.client("globex", "bap:tasks.read")
	if r := b.form("/oauth2/introspect", url.Values{"token": {tok}}, other.ClientID, other.Secret); r.body["active"] != false {
		t.Errorf("another tenant introspects: %s", r.raw)
	}
	b.form("/oauth2/revoke", url.Values{"token": {tok}}, c.ClientID, c.Secret)
	if r := b.form("/oauth2/introspect", url.Values{"token": {tok}}, c.ClientID, c.Secret); r.body["active"] != false {
		t.Errorf("introspection after revocation: %s", r.raw)
	}
}

func TestTokenEndpointBruteForceIs429(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.client("acme", "bap:tasks.read")
	bad := c
	bad.Secret = "bap_cs_guess"
	var last reply
	for i := 0; i < 12; i++ {
		last = b.token(bad)
	}
	if last.status != 429 || last.header.Get("Retry-After") == "" {
		t.Fatalf("after 12 wrong secrets: %d %s (Retry-After %q)", last.status, last.raw, last.header.Get("Retry-After"))
	}
	// The right secret from the same address is held back too, until the window passes.
	if r := b.token(c); r.status != 429 {
		t.Fatalf("right secret while locked: %d", r.status)
	}
}

// pkcePair returns a verifier and its S256 challenge.
func pkcePair() (string, string) {
	v := make([]byte, 32)
	_, _ = rand.Read(v)
	verifier := base64.RawURLEncoding.EncodeToString(v)
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

func TestAuthorizationCodeFlowNegatives(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := context.Background()
	const redirect = "http://127.0.0.1:9/callback"
	pc, err := CreateClient(ctx, b.pool, ClientSpec{Tenant: "acme", Name: "Console", Grant: "authorization_code",
		Scopes: []string{"bap:tasks.read", "bap:approvals.resolve"}, RedirectURIs: []string{redirect}})
	if err != nil {
		t.Fatal(err)
	}
	if pc.Secret != "" {
		t.Fatal("a public client got a secret")
	}
	if _, err := CreatePerson(ctx, b.pool, "acme", "ada", "correct horse battery"); err != nil {
		t.Fatal(err)
	}
	authorize := func(challenge, password string, extra ...string) reply {
		t.Helper()
		v := url.Values{"response_type": {"code"}, "client_id": {pc.ClientID}, "redirect_uri": {redirect},
			"scope": {"bap:tasks.read"}, "state": {"state-123456789"}, "code_challenge": {challenge},
			"code_challenge_method": {"S256"}, "resource": {b.base}, "username": {"ada"}, "password": {password}, "decision": {"allow"}}
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		return b.form("/oauth2/auth", v, "", "")
	}
	codeOf := func(r reply) string {
		t.Helper()
		loc, err := url.Parse(r.header.Get("Location"))
		if r.status != 303 && r.status != 302 || err != nil {
			t.Fatalf("authorize: %d %s", r.status, r.raw)
		}
		if loc.Query().Get("iss") != b.base {
			t.Errorf("redirect %s lacks iss=%s (RFC 9207)", loc, b.base)
		}
		return loc.Query().Get("code")
	}
	exchange := func(code, verifier, redirectURI string) reply {
		return b.form("/oauth2/token", url.Values{"grant_type": {"authorization_code"}, "code": {code}, "client_id": {pc.ClientID},
			"redirect_uri": {redirectURI}, "code_verifier": {verifier}, "resource": {b.base}}, "", "")
	}

	// The page renders for a GET, accessibly labelled.
	page := b.send(func() *http.Request {
		_, ch := pkcePair()
		q := url.Values{"response_type": {"code"}, "client_id": {pc.ClientID}, "redirect_uri": {redirect}, "scope": {"bap:tasks.read"},
			"state": {"state-123456789"}, "code_challenge": {ch}, "code_challenge_method": {"S256"}}
		req, _ := http.NewRequest("GET", b.base+"/oauth2/auth?"+q.Encode(), nil)
		return req
	}())
	if page.status != 200 || !strings.Contains(page.raw, `<label for="password">`) || !strings.Contains(page.raw, "Console") {
		t.Fatalf("login page: %d %s", page.status, page.raw)
	}

	_, challenge := pkcePair() // the test sends the wrong verifier
	var verifier string
	if r := authorize(challenge, "wrong password"); r.status != 401 || !strings.Contains(r.raw, `role="alert"`) {
		t.Fatalf("wrong password: %d", r.status)
	}
	code := codeOf(authorize(challenge, "correct horse battery"))
	if r := exchange(code, "not-the-verifier-not-the-verifier-not-the-verifier", redirect); r.status != 400 || r.body["error"] != "invalid_grant" {
		t.Errorf("PKCE mismatch: %d %s", r.status, r.raw)
	}

	verifier, challenge = pkcePair()
	code = codeOf(authorize(challenge, "correct horse battery"))
	if r := exchange(code, verifier, "http://127.0.0.1:9/elsewhere"); r.status != 400 || r.body["error"] != "invalid_grant" {
		t.Errorf("redirect URI mismatch: %d %s", r.status, r.raw)
	}

	verifier, challenge = pkcePair()
	code = codeOf(authorize(challenge, "correct horse battery"))
	first := exchange(code, verifier, redirect)
	at, _ := first.body["access_token"].(string)
	rt, _ := first.body["refresh_token"].(string)
	if first.status != 200 || at == "" || rt == "" {
		t.Fatalf("code exchange: %d %s", first.status, first.raw)
	}
	if r := b.api("GET", "/bap/v1/tasks/tsk_unknown", at, ""); r.status != 404 {
		t.Fatalf("the person's token is accepted: %d %s", r.status, r.raw)
	}
	if r := exchange(code, verifier, redirect); r.status != 400 || r.body["error"] != "invalid_grant" {
		t.Errorf("replayed code: %d %s", r.status, r.raw)
	}
	if r := b.api("GET", "/bap/v1/tasks/tsk_unknown", at, ""); r.status != 401 {
		t.Errorf("token of a replayed code still accepted: %d", r.status)
	}

	// Refresh rotation with reuse detection.
	verifier, challenge = pkcePair()
	code = codeOf(authorize(challenge, "correct horse battery"))
	first = exchange(code, verifier, redirect)
	rt = first.body["refresh_token"].(string)
	refresh := func(token string) reply {
		return b.form("/oauth2/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {token}, "client_id": {pc.ClientID}}, "", "")
	}
	second := refresh(rt)
	if second.status != 200 || second.body["refresh_token"] == rt {
		t.Fatalf("refresh: %d %s", second.status, second.raw)
	}
	if r := refresh(rt); r.status != 400 || r.body["error"] != "invalid_grant" {
		t.Errorf("reused refresh token: %d %s", r.status, r.raw)
	}
	if r := refresh(second.body["refresh_token"].(string)); r.status == 200 {
		t.Errorf("after reuse the whole family must be revoked: %d %s", r.status, r.raw)
	}

	// PKCE is required, and only S256.
	r := b.send(func() *http.Request {
		q := url.Values{"response_type": {"code"}, "client_id": {pc.ClientID}, "redirect_uri": {redirect}, "scope": {"bap:tasks.read"},
			"state": {"state-123456789"}, "code_challenge": {"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopq"}, "code_challenge_method": {"plain"}}
		req, _ := http.NewRequest("GET", b.base+"/oauth2/auth?"+q.Encode(), nil)
		return req
	}())
	loc, _ := url.Parse(r.header.Get("Location"))
	if loc == nil || loc.Query().Get("error") != "invalid_request" || loc.Query().Get("iss") != b.base {
		t.Errorf("plain PKCE: %d %s", r.status, r.header.Get("Location"))
	}
	// An unknown redirect URI is never redirected to.
	r = authorize(challenge, "correct horse battery", "redirect_uri", "http://127.0.0.1:9/evil")
	if r.status < 400 || r.header.Get("Location") != "" {
		t.Errorf("unregistered redirect URI: %d Location %q", r.status, r.header.Get("Location"))
	}
	// An unknown resource is invalid_target, on the redirect.
	r = authorize(challenge, "correct horse battery", "resource", "https://elsewhere.example")
	if loc, _ := url.Parse(r.header.Get("Location")); loc == nil || loc.Query().Get("error") != "invalid_target" {
		t.Errorf("unknown resource: %d %s", r.status, r.header.Get("Location"))
	}
	// Deny.
	r = authorize(challenge, "", "decision", "deny")
	if loc, _ := url.Parse(r.header.Get("Location")); loc == nil || loc.Query().Get("error") != "access_denied" {
		t.Errorf("deny: %d %s", r.status, r.header.Get("Location"))
	}
}

func TestKeyRotationKeepsOldTokensValid(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.client("acme", "bap:tasks.read")
	old := b.accessToken(c)
	oldKid := func(tok string) string {
		raw, _ := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
		var h map[string]any
		_ = json.Unmarshal(raw, &h)
		return h["kid"].(string)
	}
	// Retire the current key now (as if its rotation period ended) and rotate.
	if _, err := b.pool.Exec(context.Background(), `UPDATE token_signing_key SET sign_until = now() + interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if err := b.srv.keys.rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	fresh := b.accessToken(c)
	if oldKid(fresh) == oldKid(old) {
		t.Fatal("no new key after rotation")
	}
	var kids []string
	var set struct{ Keys []struct{ Kid string } }
	r := b.send(func() *http.Request { req, _ := http.NewRequest("GET", b.base+"/oauth2/jwks.json", nil); return req }())
	_ = json.Unmarshal([]byte(r.raw), &set)
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	if !slices.Contains(kids, oldKid(old)) || !slices.Contains(kids, oldKid(fresh)) {
		t.Errorf("JWKS %v must publish the retired and the new key", kids)
	}
	for _, tok := range []string{old, fresh} {
		if r := b.api("GET", "/bap/v1/tasks/tsk_unknown", tok, ""); r.status != 404 {
			t.Errorf("token of kid %s: %d %s", oldKid(tok), r.status, r.raw)
		}
	}
}

func TestPasswordHash(t *testing.T) {
	t.Parallel()
	h, err := hashPassword("s3cret-pass")
	if err != nil || !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("%q %v", h, err)
	}
	if ok, err := checkPassword(h, "s3cret-pass"); !ok || err != nil {
		t.Fatal("right password refused")
	}
	if ok, _ := checkPassword(h, "s3cret-pasS"); ok {
		t.Fatal("wrong password accepted")
	}
}

func TestScopesMatchTheTransport(t *testing.T) {
	t.Parallel()
	if !slices.Equal(Scopes, api.AllScopes) {
		t.Fatalf("auth.Scopes %v != api.AllScopes %v", Scopes, api.AllScopes)
	}
}

func TestClientRateLimitIs429(t *testing.T) {
	t.Parallel()
	b := setupWith(t, time.Minute, 0, ratelimit.New(0.01, 2))
	c := b.client("acme", "bap:tasks.read")
	tok := b.accessToken(c)
	for i := 0; i < 2; i++ {
		if r := b.api("GET", "/bap/v1/tasks/tsk_unknown", tok, ""); r.status != 404 {
			t.Fatalf("request %d within the burst: %d", i, r.status)
		}
	}
	r := b.api("GET", "/bap/v1/tasks/tsk_unknown", tok, "")
	if r.status != 429 || r.body["code"] != "rate_limited" || r.header.Get("Retry-After") == "" {
		t.Fatalf("over the limit: %d %s (Retry-After %q)", r.status, r.raw, r.header.Get("Retry-After"))
	}
	// Another client of the same tenant has its own allowance.
	if r := b.api("GET", "/bap/v1/tasks/tsk_unknown", b.accessToken(b.client("acme", "bap:tasks.read")), ""); r.status != 404 {
		t.Fatalf("another client: %d", r.status)
	}
}
