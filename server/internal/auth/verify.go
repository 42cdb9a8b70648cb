package auth

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// tokenClaims are the RFC 9068 claims of our access tokens.
type tokenClaims struct {
	Issuer    string          `json:"iss"`
	Subject   string          `json:"sub"`
	Audience  json.RawMessage `json:"aud"`
	Expiry    *json.Number    `json:"exp"`
	NotBefore *json.Number    `json:"nbf"`
	IssuedAt  *json.Number    `json:"iat"`
	JTI       string          `json:"jti"`
	ClientID  string          `json:"client_id"`
	Tenant    string          `json:"tenant"`
	Scope     string          `json:"scope"`
}

// refuse builds the 401 refusal of a token; detail never quotes the token.
func refuse(detail string) error {
	return &app.Error{Code: app.CodeUnauthenticated, Detail: detail}
}

// VerifyAccessToken is the resource-server check: it accepts only an ES256 JWT of type at+jwt,
// signed by one of this server's published keys, issued by this issuer for this resource, within
// its lifetime (±Leeway), whose token session and client are still active. Any refusal is an
// *app.Error with code unauthenticated.
func (s *Server) VerifyAccessToken(ctx context.Context, token string) (app.Credential, error) {
	c, err := s.verifyJWT(ctx, token)
	if err != nil {
		return app.Credential{}, err
	}
	sig := token[strings.LastIndexByte(token, '.')+1:]
	ok, err := s.isActive(ctx, sig)
	if err != nil {
		return app.Credential{}, err
	}
	if !ok {
		return app.Credential{}, refuse("the access token has been revoked")
	}
	subject := "user:" + c.Subject
	if c.Subject == c.ClientID {
		subject = "client:" + c.ClientID
	}
	exp, _ := c.Expiry.Int64()
	return app.Credential{
		Actor:    app.Actor{Tenant: c.Tenant, Subject: subject},
		ClientID: c.ClientID, Scopes: strings.Fields(c.Scope), ExpiresAt: time.Unix(exp, 0),
	}, nil
}

// verifyJWT checks everything but revocation.
func (s *Server) verifyJWT(ctx context.Context, token string) (*tokenClaims, error) {
	if len(token) > 8192 {
		return nil, refuse("the access token is too long")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, refuse("the access token is not a signed JWT")
	}
	var hdr struct {
		Alg  string          `json:"alg"`
		Typ  string          `json:"typ"`
		Kid  string          `json:"kid"`
		Crit json.RawMessage `json:"crit"`
	}
	if err := decodeSegment(parts[0], &hdr); err != nil {
		return nil, refuse("the access token is not a signed JWT")
	}
	if hdr.Alg != "ES256" {
		return nil, refuse("the access token is not signed with ES256")
	}
	if t := strings.ToLower(hdr.Typ); t != "at+jwt" && t != "application/at+jwt" {
		return nil, refuse("the token is not an access token (typ must be at+jwt)")
	}
	if hdr.Crit != nil {
		return nil, refuse("the access token has critical header parameters")
	}
	pub, err := s.keys.public(ctx, hdr.Kid)
	if err != nil {
		return nil, err
	}
	if pub == nil {
		return nil, refuse("the access token is not signed by a key of this server")
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(parts[2]) // one spelling per signature: revocation is keyed by it
	if err != nil || len(sig) != 64 {
		return nil, refuse("the access token's signature is invalid")
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	r, ss := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	if !ecdsa.Verify(pub, digest[:], r, ss) {
		return nil, refuse("the access token's signature is invalid")
	}
	var c tokenClaims
	if err := decodeSegment(parts[1], &c); err != nil {
		return nil, refuse("the access token's claims are malformed")
	}
	if c.Issuer != s.cfg.Issuer {
		return nil, refuse("the access token was issued by another authorization server")
	}
	if !audienceHas(c.Audience, s.cfg.Resource) {
		return nil, refuse("the access token was issued for another resource")
	}
	now := s.cfg.Now()
	exp, err1 := numTime(c.Expiry)
	iat, err2 := numTime(c.IssuedAt)
	if err1 != nil || err2 != nil || c.Subject == "" || c.ClientID == "" || c.Tenant == "" || c.JTI == "" {
		return nil, refuse("the access token lacks required claims")
	}
	if !now.Before(exp.Add(Leeway)) {
		return nil, refuse("the access token has expired")
	}
	if c.NotBefore != nil {
		nbf, err := numTime(c.NotBefore)
		if err != nil || nbf.After(now.Add(Leeway)) {
			return nil, refuse("the access token is not valid yet")
		}
	}
	if iat.After(now.Add(Leeway)) {
		return nil, refuse("the access token is not valid yet")
	}
	if exp.Sub(iat) > MaxAccessTokenTTL+time.Second {
		return nil, refuse("the access token lives longer than this server allows")
	}
	return &c, nil
}

func decodeSegment(seg string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

func numTime(n *json.Number) (time.Time, error) {
	if n == nil {
		return time.Time{}, errors.New("missing")
	}
	f, err := n.Float64()
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(int64(f), 0), nil
}

func audienceHas(raw json.RawMessage, want string) bool {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return CanonicalResource(one) == want
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		for _, a := range many {
			if CanonicalResource(a) == want {
				return true
			}
		}
	}
	return false
}

// isActive asks whether the access token with this signature is still active: its token session
// not revoked and its client not revoked. Answers are cached for RevocationCacheTTL, and only
// while the revocation listener is connected (it clears the cache on every revocation).
func (s *Server) isActive(ctx context.Context, signature string) (bool, error) {
	key := string(sigHash(signature))
	if ok, hit := s.active.get(key); hit {
		return ok, nil
	}
	gen := s.active.generation()
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT t.active AND c.revoked_at IS NULL
		FROM oauth_token_session t JOIN oauth_client c ON c.client_id = t.client_id
		WHERE t.kind = 'access_token' AND t.signature_hash = $1`, sigHash(signature)).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		ok, err = false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking token revocation: %w", err)
	}
	s.active.put(key, ok, gen)
	return ok, nil
}

// activeCache remembers revocation answers briefly. A clear (on a revocation notice) bumps the
// generation, so that an answer read from the database before the notice is never stored after it.
type activeCache struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	gen       uint64
	listening bool
	entries   map[string]activeEntry
}

type activeEntry struct {
	ok    bool
	until time.Time
}

func newActiveCache(ttl time.Duration, now func() time.Time) *activeCache {
	return &activeCache{ttl: ttl, now: now, entries: map[string]activeEntry{}}
}

func (c *activeCache) get(key string) (ok, hit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.listening {
		return false, false
	}
	e, found := c.entries[key]
	if !found || !c.now().Before(e.until) {
		return false, false
	}
	return e.ok, true
}

func (c *activeCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

func (c *activeCache) put(key string, ok bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.listening || gen != c.gen {
		return
	}
	if len(c.entries) > 100_000 {
		c.entries = map[string]activeEntry{}
	}
	c.entries[key] = activeEntry{ok: ok, until: c.now().Add(c.ttl)}
}

func (c *activeCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.entries = map[string]activeEntry{}
}

func (c *activeCache) setListening(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listening = on
	c.gen++
	c.entries = map[string]activeEntry{}
}

func (c *activeCache) isListening() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.listening
}
