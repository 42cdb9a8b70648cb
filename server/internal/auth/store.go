package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ory/fosite"
	"github.com/ory/fosite/handler/oauth2"
	"github.com/ory/fosite/handler/pkce"
)

// revokedChannel is the PostgreSQL NOTIFY channel on which revocations are announced, so that every
// node drops its cached "token is active" answers at once.
const revokedChannel = "bap_auth_revoked"

// Token session kinds (oauth_token_session.kind).
const (
	kindCode    = "authorize_code"
	kindAccess  = "access_token"
	kindRefresh = "refresh_token"
	kindPKCE    = "pkce"
)

// formKeys are the only request parameters kept with a stored request: what later steps of a flow
// compare against (redirect_uri, PKCE). Secrets and credentials are never among them.
var formKeys = []string{"redirect_uri", "code_challenge", "code_challenge_method", "response_type", "scope"}

// dbtx is what both the pool and a transaction offer.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type txKey struct{}

// storage implements fosite's storage interfaces on PostgreSQL, plus fosite's (structural)
// storage.Transactional so that code exchange and refresh rotation are atomic.
type storage struct {
	pool     *pgxpool.Pool
	resource string
	now      func() time.Time
	// revoked runs after this process revoked something (the NOTIFY reaches other nodes).
	revoked func()
}

var (
	_ fosite.ClientManager          = (*storage)(nil)
	_ oauth2.CoreStorage            = (*storage)(nil)
	_ oauth2.TokenRevocationStorage = (*storage)(nil)
	_ pkce.PKCERequestStorage       = (*storage)(nil)
	_ interface {
		BeginTX(context.Context) (context.Context, error)
	} = (*storage)(nil)
)

func (s *storage) db(ctx context.Context) dbtx {
	if tx, ok := ctx.Value(txKey{}).(pgx.Tx); ok {
		return tx
	}
	return s.pool
}

// BeginTX implements fosite's storage.Transactional.
func (s *storage) BeginTX(ctx context.Context) (context.Context, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, txKey{}, tx), nil
}

// Commit implements fosite's storage.Transactional.
func (s *storage) Commit(ctx context.Context) error {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	if !ok {
		return errors.New("commit without a transaction")
	}
	return tx.Commit(ctx)
}

// Rollback implements fosite's storage.Transactional.
func (s *storage) Rollback(ctx context.Context) error {
	tx, ok := ctx.Value(txKey{}).(pgx.Tx)
	if !ok {
		return errors.New("rollback without a transaction")
	}
	return tx.Rollback(ctx)
}

// client is a registered OAuth client.
type client struct {
	id         string
	tenant     string
	name       string
	grant      string
	secretHash []byte
	scopes     []string
	redirects  []string
	audience   []string
}

var _ fosite.Client = (*client)(nil)

func (c *client) GetID() string             { return c.id }
func (c *client) GetHashedSecret() []byte   { return c.secretHash }
func (c *client) GetRedirectURIs() []string { return c.redirects }
func (c *client) GetScopes() fosite.Arguments {
	return c.scopes
}
func (c *client) IsPublic() bool                { return c.secretHash == nil }
func (c *client) GetAudience() fosite.Arguments { return c.audience }
func (c *client) GetGrantTypes() fosite.Arguments {
	if c.grant == "authorization_code" {
		return fosite.Arguments{"authorization_code", "refresh_token"}
	}
	return fosite.Arguments{"client_credentials"}
}
func (c *client) GetResponseTypes() fosite.Arguments {
	if c.grant == "authorization_code" {
		return fosite.Arguments{"code"}
	}
	return fosite.Arguments{}
}

// GetClient implements fosite.ClientManager. A revoked or unknown client is fosite.ErrNotFound.
func (s *storage) GetClient(ctx context.Context, id string) (fosite.Client, error) {
	c := &client{id: id, audience: []string{s.resource}}
	err := s.db(ctx).QueryRow(ctx, `SELECT c.tenant_id, c.name, c.grant_type, c.secret_hash,
			coalesce((SELECT array_agg(scope ORDER BY scope) FROM oauth_client_scope s WHERE s.client_id = c.client_id), '{}'),
			coalesce((SELECT array_agg(redirect_uri ORDER BY redirect_uri) FROM oauth_client_redirect r WHERE r.client_id = c.client_id), '{}')
		FROM oauth_client c WHERE c.client_id = $1 AND c.revoked_at IS NULL`, id).
		Scan(&c.tenant, &c.name, &c.grant, &c.secretHash, &c.scopes, &c.redirects)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fosite.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading client: %w", err)
	}
	return c, nil
}

// ClientAssertionJWTValid implements fosite.ClientManager (private_key_jwt is not offered).
func (s *storage) ClientAssertionJWTValid(context.Context, string) error { return nil }

// SetClientAssertionJWT implements fosite.ClientManager (private_key_jwt is not offered).
func (s *storage) SetClientAssertionJWT(context.Context, string, time.Time) error { return nil }

// storedRequest is the JSON form of a fosite requester in oauth_token_session.requester.
type storedRequest struct {
	ID                string     `json:"id"`
	RequestedAt       time.Time  `json:"requested_at"`
	ClientID          string     `json:"client_id"`
	RequestedScope    []string   `json:"requested_scope"`
	GrantedScope      []string   `json:"granted_scope"`
	RequestedAudience []string   `json:"requested_audience"`
	GrantedAudience   []string   `json:"granted_audience"`
	Form              url.Values `json:"form"`
	Session           *Session   `json:"session"`
}

func sigHash(signature string) []byte {
	h := sha256.Sum256([]byte(signature))
	return h[:]
}

func tokenTypeOf(kind string) fosite.TokenType {
	switch kind {
	case kindCode, kindPKCE:
		return fosite.AuthorizeCode
	case kindRefresh:
		return fosite.RefreshToken
	default:
		return fosite.AccessToken
	}
}

func (s *storage) create(ctx context.Context, kind, signature string, r fosite.Requester, accessSignature string) error {
	sess, _ := r.GetSession().(*Session)
	if sess == nil {
		return fmt.Errorf("storing %s: session of type %T", kind, r.GetSession())
	}
	form := url.Values{}
	for _, k := range formKeys {
		if v, ok := r.GetRequestForm()[k]; ok {
			form[k] = v
		}
	}
	sr := storedRequest{
		ID: r.GetID(), RequestedAt: r.GetRequestedAt(), ClientID: r.GetClient().GetID(),
		RequestedScope: r.GetRequestedScopes(), GrantedScope: r.GetGrantedScopes(),
		RequestedAudience: r.GetRequestedAudience(), GrantedAudience: r.GetGrantedAudience(), Form: form, Session: sess,
	}
	body, err := json.Marshal(sr)
	if err != nil {
		return err
	}
	exp := sess.GetExpiresAt(tokenTypeOf(kind))
	if exp.IsZero() {
		exp = s.now().Add(24 * time.Hour)
	}
	var accessHash []byte
	if accessSignature != "" {
		accessHash = sigHash(accessSignature)
	}
	tenant := sess.Tenant
	if c, ok := r.GetClient().(*client); ok {
		tenant = c.tenant
	}
	_, err = s.db(ctx).Exec(ctx, `INSERT INTO oauth_token_session (kind, signature_hash, request_id, tenant_id, client_id,
			subject, requested_at, expires_at, access_signature_hash, requester)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		kind, sigHash(signature), r.GetID(), tenant, r.GetClient().GetID(), sess.Subject, r.GetRequestedAt(), exp, accessHash, body)
	if err != nil {
		return fmt.Errorf("storing %s: %w", kind, err)
	}
	return nil
}

// get reads a stored request; an inactive one is returned together with inactiveErr. Its session
// is always a fresh one, never the caller's: fosite passes the live request's session to the
// getters, and overwriting it would drop the expiry fosite has just set on it.
func (s *storage) get(ctx context.Context, kind, signature string, _ fosite.Session, inactiveErr error) (fosite.Requester, error) {
	var body []byte
	var active bool
	err := s.db(ctx).QueryRow(ctx, `SELECT requester, active FROM oauth_token_session WHERE kind = $1 AND signature_hash = $2`,
		kind, sigHash(signature)).Scan(&body, &active)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fosite.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", kind, err)
	}
	var sr storedRequest
	if err := json.Unmarshal(body, &sr); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", kind, err)
	}
	c, err := s.GetClient(ctx, sr.ClientID)
	if err != nil {
		return nil, err // a revoked client's grants are gone with it
	}
	sess := &Session{}
	if sr.Session != nil {
		*sess = *sr.Session
	}
	req := &fosite.Request{
		ID: sr.ID, RequestedAt: sr.RequestedAt, Client: c, RequestedScope: sr.RequestedScope, GrantedScope: sr.GrantedScope,
		RequestedAudience: sr.RequestedAudience, GrantedAudience: sr.GrantedAudience, Form: sr.Form, Session: sess,
	}
	if req.Form == nil {
		req.Form = url.Values{}
	}
	if !active {
		return req, inactiveErr
	}
	return req, nil
}

func (s *storage) setInactive(ctx context.Context, where string, args ...any) error {
	_, err := s.db(ctx).Exec(ctx, `UPDATE oauth_token_session SET active = false WHERE active AND `+where, args...)
	if err != nil {
		return fmt.Errorf("revoking: %w", err)
	}
	s.afterRevoke()
	return notifyRevoked(ctx, s.db(ctx))
}

func (s *storage) afterRevoke() {
	if s.revoked != nil {
		s.revoked()
	}
}

func notifyRevoked(ctx context.Context, db dbtx) error {
	_, err := db.Exec(ctx, `SELECT pg_notify($1, '')`, revokedChannel)
	return err
}

func (s *storage) delete(ctx context.Context, kind, signature string) error {
	_, err := s.db(ctx).Exec(ctx, `DELETE FROM oauth_token_session WHERE kind = $1 AND signature_hash = $2`, kind, sigHash(signature))
	if err != nil {
		return fmt.Errorf("deleting %s: %w", kind, err)
	}
	if kind == kindAccess || kind == kindRefresh {
		s.afterRevoke()
		return notifyRevoked(ctx, s.db(ctx))
	}
	return nil
}

// CreateAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage.
func (s *storage) CreateAuthorizeCodeSession(ctx context.Context, code string, r fosite.Requester) error {
	return s.create(ctx, kindCode, code, r, "")
}

// GetAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage: a used code comes back with
// fosite.ErrInvalidatedAuthorizeCode, so that fosite revokes what it was exchanged for.
func (s *storage) GetAuthorizeCodeSession(ctx context.Context, code string, sess fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, kindCode, code, sess, fosite.ErrInvalidatedAuthorizeCode)
}

// InvalidateAuthorizeCodeSession implements oauth2.AuthorizeCodeStorage.
func (s *storage) InvalidateAuthorizeCodeSession(ctx context.Context, code string) error {
	_, err := s.db(ctx).Exec(ctx, `UPDATE oauth_token_session SET active = false WHERE kind = $1 AND signature_hash = $2`, kindCode, sigHash(code))
	return err
}

// CreateAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *storage) CreateAccessTokenSession(ctx context.Context, signature string, r fosite.Requester) error {
	return s.create(ctx, kindAccess, signature, r, "")
}

// GetAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *storage) GetAccessTokenSession(ctx context.Context, signature string, sess fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, kindAccess, signature, sess, fosite.ErrInactiveToken)
}

// DeleteAccessTokenSession implements oauth2.AccessTokenStorage.
func (s *storage) DeleteAccessTokenSession(ctx context.Context, signature string) error {
	return s.delete(ctx, kindAccess, signature)
}

// CreateRefreshTokenSession implements oauth2.RefreshTokenStorage.
func (s *storage) CreateRefreshTokenSession(ctx context.Context, signature, accessSignature string, r fosite.Requester) error {
	return s.create(ctx, kindRefresh, signature, r, accessSignature)
}

// GetRefreshTokenSession implements oauth2.RefreshTokenStorage: a rotated token comes back with
// fosite.ErrInactiveToken, which fosite treats as reuse and revokes the whole grant.
func (s *storage) GetRefreshTokenSession(ctx context.Context, signature string, sess fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, kindRefresh, signature, sess, fosite.ErrInactiveToken)
}

// DeleteRefreshTokenSession implements oauth2.RefreshTokenStorage.
func (s *storage) DeleteRefreshTokenSession(ctx context.Context, signature string) error {
	return s.delete(ctx, kindRefresh, signature)
}

// RotateRefreshToken implements oauth2.RefreshTokenStorage: the used refresh token and the access
// token issued with it become inactive (kept, so that reuse is detected).
func (s *storage) RotateRefreshToken(ctx context.Context, requestID, signature string) error {
	h := sigHash(signature)
	if err := s.setInactive(ctx, `kind = 'access_token' AND signature_hash = (SELECT access_signature_hash FROM oauth_token_session
		WHERE kind = 'refresh_token' AND signature_hash = $1)`, h); err != nil {
		return err
	}
	return s.setInactive(ctx, `kind = 'refresh_token' AND signature_hash = $1 AND request_id = $2`, h, requestID)
}

// RevokeRefreshToken implements oauth2.TokenRevocationStorage.
func (s *storage) RevokeRefreshToken(ctx context.Context, requestID string) error {
	return s.setInactive(ctx, `kind = 'refresh_token' AND request_id = $1`, requestID)
}

// RevokeAccessToken implements oauth2.TokenRevocationStorage.
func (s *storage) RevokeAccessToken(ctx context.Context, requestID string) error {
	return s.setInactive(ctx, `kind = 'access_token' AND request_id = $1`, requestID)
}

// CreatePKCERequestSession implements pkce.PKCERequestStorage.
func (s *storage) CreatePKCERequestSession(ctx context.Context, signature string, r fosite.Requester) error {
	return s.create(ctx, kindPKCE, signature, r, "")
}

// GetPKCERequestSession implements pkce.PKCERequestStorage.
func (s *storage) GetPKCERequestSession(ctx context.Context, signature string, sess fosite.Session) (fosite.Requester, error) {
	return s.get(ctx, kindPKCE, signature, sess, fosite.ErrNotFound)
}

// DeletePKCERequestSession implements pkce.PKCERequestStorage.
func (s *storage) DeletePKCERequestSession(ctx context.Context, signature string) error {
	return s.delete(ctx, kindPKCE, signature)
}

// secretHasher compares client secrets by SHA-256: they are 256-bit random values, so a slow
// password hash would buy nothing and cost every client_credentials request (fosite's default
// BCrypt takes tens of milliseconds).
type secretHasher struct{}

// Compare implements fosite.Hasher in constant time.
func (secretHasher) Compare(_ context.Context, hash, data []byte) error {
	h := sha256.Sum256(data)
	if len(hash) != len(h) || subtle.ConstantTimeCompare(hash, h[:]) != 1 {
		return errors.New("client secret mismatch")
	}
	return nil
}

// Hash implements fosite.Hasher.
func (secretHasher) Hash(_ context.Context, data []byte) ([]byte, error) {
	h := sha256.Sum256(data)
	return h[:], nil
}
