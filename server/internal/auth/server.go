package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/ory/fosite"
	"github.com/ory/fosite/compose"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/token/jwt"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/ratelimit"
)

// MaxAccessTokenTTL is the longest access token lifetime (CONTRACT "Capabilities").
const MaxAccessTokenTTL = 15 * time.Minute

// Leeway is the clock skew tolerated on exp, nbf and iat.
const Leeway = 5 * time.Second

// Scopes are the capabilities a client may hold (CONTRACT "Capabilities").
var Scopes = []string{
	"bap:tasks.read", "bap:tasks.write", "bap:browser.observe", "bap:browser.act",
	"bap:approvals.request", "bap:approvals.resolve", "bap:artifacts.read", "bap:events.read",
	"bap:secrets.read", "bap:secrets.write",
}

// Config configures the authorization server and resource-server check.
type Config struct {
	// Pool is the database holding the tables of migrations/0003_oauth.sql. Required.
	Pool *pgxpool.Pool
	// ServerKey seals what the database keeps of the authorization server's keys: the signing
	// keys and the server-wide secret (ADR 0017). Required.
	ServerKey *serverkey.Key
	// Issuer is the authorization server's issuer identifier (an http(s) URL without a trailing
	// slash); its metadata is at <Issuer>/.well-known/oauth-authorization-server. Required.
	Issuer string
	// Resource is this server's resource URL: the only audience tokens are issued for and accepted
	// with (RFC 8707). Required.
	Resource string
	// AccessTokenTTL is the access token lifetime (default and maximum MaxAccessTokenTTL).
	AccessTokenTTL time.Duration
	// RefreshTokenTTL is the refresh token lifetime (default 24 h).
	RefreshTokenTTL time.Duration
	// KeyRotation is how long one signing key signs before the next is made (default 24 h).
	KeyRotation time.Duration
	// RevocationCacheTTL bounds how long "this token is active" is remembered without asking the
	// database; revocations announced over NOTIFY clear the cache at once (default 2 s).
	RevocationCacheTTL time.Duration
	// TokenRate and TokenBurst bound token requests per client (default 5/s, burst 20).
	TokenRate  float64
	TokenBurst int
	// FailureRate and FailureBurst bound failed client authentications and sign-ins per client (or
	// account) and address: after FailureBurst failures, one more attempt per 1/FailureRate seconds
	// (default 0.2/s, burst 10).
	FailureRate  float64
	FailureBurst int
	// SignInIPRate and SignInIPBurst bound failed sign-ins per address across every name and
	// tenant, so that trying one password on many names (spraying) is limited too: after
	// SignInIPBurst failures, one more per 1/SignInIPRate seconds (default 0.1/s, burst 30).
	SignInIPRate  float64
	SignInIPBurst int
	Logger        *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// LimitNow is the rate limits' clock (tests); default Now. A test that counts attempts against
	// a burst runs its limits on a clock that moves only when the test says, so that how fast the
	// machine hashes passwords never refills a token mid-count; fosite's token stamps still need
	// the real clock (Now).
	LimitNow func() time.Time
}

func (c *Config) setDefaults() {
	if c.AccessTokenTTL == 0 {
		c.AccessTokenTTL = MaxAccessTokenTTL
	}
	if c.RefreshTokenTTL == 0 {
		c.RefreshTokenTTL = 24 * time.Hour
	}
	if c.KeyRotation == 0 {
		c.KeyRotation = 24 * time.Hour
	}
	if c.RevocationCacheTTL == 0 {
		c.RevocationCacheTTL = 2 * time.Second
	}
	if c.TokenRate == 0 {
		c.TokenRate, c.TokenBurst = 5, 20
	}
	if c.FailureRate == 0 {
		c.FailureRate, c.FailureBurst = 0.2, 10
	}
	if c.SignInIPRate == 0 {
		c.SignInIPRate, c.SignInIPBurst = 0.1, 30
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LimitNow == nil {
		c.LimitNow = c.Now
	}
	c.Issuer = strings.TrimSuffix(c.Issuer, "/")
	c.Resource = CanonicalResource(c.Resource)
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("auth: Pool is required")
	}
	if c.ServerKey == nil {
		return errors.New("auth: ServerKey is required")
	}
	for name, v := range map[string]string{"issuer": c.Issuer, "resource": c.Resource} {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Fragment != "" || u.RawQuery != "" {
			return fmt.Errorf("auth: %s %q must be an absolute http(s) URL without query or fragment", name, v)
		}
	}
	if c.AccessTokenTTL < time.Second || c.AccessTokenTTL > MaxAccessTokenTTL {
		return fmt.Errorf("auth: access token lifetime %s must be between 1s and %s", c.AccessTokenTTL, MaxAccessTokenTTL)
	}
	return nil
}

// CanonicalResource lower-cases scheme and host and drops a trailing slash and a default port, so
// that resource indicators compare as RFC 8707 and the MCP authorization spec expect.
func CanonicalResource(v string) string {
	u, err := url.Parse(strings.TrimSpace(v))
	if err != nil || u.Host == "" {
		return v
	}
	u.Scheme = strings.ToLower(u.Scheme)
	host, port := u.Hostname(), u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	host = strings.ToLower(host)
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	u.Host = host
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u.String()
}

// Server is the authorization server and the resource-server check. Its methods are safe for
// concurrent use; Start and Stop run its background work (key rotation, revocation notices, the
// audit writer).
type Server struct {
	cfg      Config
	pool     *pgxpool.Pool
	log      *slog.Logger
	keys     *keyStore
	store    *storage
	provider fosite.OAuth2Provider
	audit    *Audit
	active   *activeCache

	tokenLimit    *ratelimit.Limiter // token requests per client
	failureLimit  *ratelimit.Limiter // failed authentications per client/account and address
	signInIPLimit *ratelimit.Limiter // failed sign-ins per address, across names

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// New builds the server: it loads (or creates) the HMAC secret and a signing key.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, pool: cfg.Pool, log: cfg.Logger,
		keys:   &keyStore{pool: cfg.Pool, seal: cfg.ServerKey.Sealer(serverkey.PurposeSigningKeys), rotation: cfg.KeyRotation, maxTTL: MaxAccessTokenTTL, now: cfg.Now},
		store:  &storage{pool: cfg.Pool, resource: cfg.Resource, now: cfg.Now},
		audit:  NewAudit(cfg.Pool, cfg.Logger),
		active: newActiveCache(cfg.RevocationCacheTTL, cfg.Now),
		// The limits run on their own clock (Config.LimitNow): a test's frozen one makes them
		// independent of how fast the machine hashes passwords (under -race a burst of sign-ins
		// outlasted the window).
		tokenLimit:    ratelimit.New(cfg.TokenRate, cfg.TokenBurst).WithClock(cfg.LimitNow),
		failureLimit:  ratelimit.New(cfg.FailureRate, cfg.FailureBurst).WithClock(cfg.LimitNow),
		signInIPLimit: ratelimit.New(cfg.SignInIPRate, cfg.SignInIPBurst).WithClock(cfg.LimitNow),
		stop:          make(chan struct{}),
	}
	s.store.revoked = s.active.clear
	secret, err := s.hmacSecret(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.keys.rotate(ctx); err != nil {
		return nil, err
	}
	fc := &fosite.Config{
		AccessTokenLifespan:      cfg.AccessTokenTTL,
		RefreshTokenLifespan:     cfg.RefreshTokenTTL,
		AuthorizeCodeLifespan:    5 * time.Minute,
		AccessTokenIssuer:        cfg.Issuer,
		IDTokenIssuer:            cfg.Issuer,
		GlobalSecret:             secret,
		EnforcePKCE:              true,
		ScopeStrategy:            fosite.ExactScopeStrategy,
		AudienceMatchingStrategy: fosite.ExactAudienceMatchingStrategy,
		JWTScopeClaimKey:         jwt.JWTScopeFieldString,
		RefreshTokenScopes:       []string{},
		ClientSecretsHasher:      secretHasher{},
		TokenURL:                 cfg.Issuer + "/oauth2/token",
		RedirectSecureChecker:    fosite.IsRedirectURISecureStrict,
		MinParameterEntropy:      fosite.MinParameterEntropy,
	}
	keyGetter := func(ctx context.Context) (any, error) {
		k, err := s.keys.current(ctx)
		if err != nil {
			return nil, err
		}
		return &jose.JSONWebKey{Key: k.priv, KeyID: k.id, Algorithm: "ES256"}, nil
	}
	core := &accessStrategy{DefaultJWTStrategy: compose.NewOAuth2JWTStrategy(keyGetter, compose.NewOAuth2HMACStrategy(fc), fc), srv: s}
	strategy := &compose.CommonStrategy{CoreStrategy: core, Signer: &jwt.DefaultSigner{GetPrivateKey: keyGetter}}
	s.provider = compose.Compose(fc, s.store, strategy,
		compose.OAuth2ClientCredentialsGrantFactory,
		compose.OAuth2AuthorizeExplicitFactory,
		compose.OAuth2RefreshTokenGrantFactory,
		compose.OAuth2PKCEFactory,
		compose.OAuth2TokenIntrospectionFactory,
		compose.OAuth2TokenRevocationFactory,
	)
	return s, nil
}

// accessStrategy validates access tokens (for introspection) with the resource-server check, so
// that tokens of a retired but still published key are accepted and foreign ones are not.
type accessStrategy struct {
	*oauth2.DefaultJWTStrategy
	srv *Server
}

// ValidateAccessToken implements oauth2.AccessTokenStrategy.
func (a *accessStrategy) ValidateAccessToken(ctx context.Context, _ fosite.Requester, token string) error {
	if _, err := a.srv.verifyJWT(ctx, token); err != nil {
		return fosite.ErrInactiveToken.WithWrap(err)
	}
	return nil
}

// hmacSecret reads the server-wide secret of authorization codes and refresh tokens, creating it
// on first use.
func (s *Server) hmacSecret(ctx context.Context) ([]byte, error) {
	return serverSecret(ctx, s.pool, s.cfg.ServerKey) // cluster.go
}

// Audit is the audit trail writer (the transport records refused requests through it).
func (s *Server) Audit() *Audit { return s.audit }

// Issuer is the issuer identifier.
func (s *Server) Issuer() string { return s.cfg.Issuer }

// Resource is the resource URL tokens are bound to.
func (s *Server) Resource() string { return s.cfg.Resource }

// ResourceMetadataURL is the RFC 9728 metadata document of the resource.
func (s *Server) ResourceMetadataURL() string {
	return wellKnown(s.cfg.Resource, "oauth-protected-resource")
}

// wellKnown inserts /.well-known/<name> between the host and the path of base (RFC 8414 §3.1).
func wellKnown(base, name string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base + "/.well-known/" + name
	}
	u.Path = "/.well-known/" + name + strings.TrimSuffix(u.Path, "/")
	return u.String()
}

// Start runs the background work: the audit writer, key rotation and purging, and the listener
// that clears cached token answers when a revocation is announced.
func (s *Server) Start(ctx context.Context) error {
	if err := s.audit.Start(ctx); err != nil {
		return err
	}
	bg := context.WithoutCancel(ctx)
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.upkeep(bg)
	}()
	go func() {
		defer s.wg.Done()
		s.listenRevocations(bg)
	}()
	return nil
}

// Stop ends the background work and writes the audit entries still queued.
func (s *Server) Stop() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	s.audit.Stop()
}

func (s *Server) upkeep(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if err := s.keys.rotate(ctx); err != nil {
			s.log.Warn("signing key rotation failed", "err", err)
		}
		if _, err := s.pool.Exec(ctx, `DELETE FROM oauth_token_session WHERE expires_at < now() - interval '1 hour'`); err != nil {
			s.log.Warn("purging expired token sessions failed", "err", err)
		}
	}
}

// listenRevocations clears the active-token cache on every revocation notice. While it is not
// connected the cache is bypassed, so a revocation is never missed for longer than a round trip.
func (s *Server) listenRevocations(ctx context.Context) {
	for {
		err := s.listenOnce(ctx)
		s.active.setListening(false)
		select {
		case <-s.stop:
			return
		case <-time.After(time.Second):
		}
		if err != nil {
			s.log.Warn("revocation listener reconnecting", "err", err)
		}
	}
}

func (s *Server) listenOnce(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+revokedChannel); err != nil {
		return err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "UNLISTEN "+revokedChannel) }()
	s.active.clear()
	s.active.setListening(true)
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			return err
		}
		s.active.clear()
	}
}

// remoteIP is the caller's address without the port (the limiter key part).
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (s *Server) record(ctx context.Context, d app.AuthDecision) {
	s.audit.RecordAuthDecision(ctx, d)
}
