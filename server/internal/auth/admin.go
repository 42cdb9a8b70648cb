package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ory/fosite"
)

// ClientSpec describes a client to register.
type ClientSpec struct {
	Tenant       string
	Name         string
	Scopes       []string
	Grant        string // "client_credentials" (default) or "authorization_code"
	RedirectURIs []string
}

// NewClient is a registered client; Secret is set only for confidential clients and shown once.
type NewClient struct {
	ClientID string `json:"client_id"`
	Secret   string `json:"client_secret,omitempty"`
}

var tenantPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ErrUnknownClient is returned by RevokeClient for a client id that is not registered.
var ErrUnknownClient = errors.New("no such client")

func randomToken(prefix string, n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// CreateClient registers a client (creating its tenant if needed). A client-credentials client
// gets a secret (stored as its SHA-256); an authorization-code client is public (PKCE) and needs
// at least one redirect URI (https, or http on a loopback host).
func CreateClient(ctx context.Context, pool *pgxpool.Pool, spec ClientSpec) (NewClient, error) {
	if spec.Grant == "" {
		spec.Grant = "client_credentials"
	}
	if !tenantPattern.MatchString(spec.Tenant) {
		return NewClient{}, fmt.Errorf("--tenant %q: lower-case letters, digits, - and _ (at most 63)", spec.Tenant)
	}
	if n := len(spec.Name); n == 0 || n > 200 {
		return NewClient{}, errors.New("--name: 1 to 200 characters")
	}
	if len(spec.Scopes) == 0 {
		return NewClient{}, errors.New("--scopes: at least one capability, e.g. \"bap:tasks.read bap:tasks.write\"")
	}
	for _, s := range spec.Scopes {
		if !slices.Contains(Scopes, s) {
			return NewClient{}, fmt.Errorf("--scopes: unknown capability %q (known: %s)", s, strings.Join(Scopes, " "))
		}
	}
	switch spec.Grant {
	case "client_credentials":
		if len(spec.RedirectURIs) > 0 {
			return NewClient{}, errors.New("--redirect-uri belongs to --grant authorization_code")
		}
	case "authorization_code":
		if len(spec.RedirectURIs) == 0 {
			return NewClient{}, errors.New("--grant authorization_code needs --redirect-uri")
		}
		for _, raw := range spec.RedirectURIs {
			u, err := url.Parse(raw)
			if err != nil || !fosite.IsValidRedirectURI(u) || !fosite.IsRedirectURISecureStrict(ctx, u) {
				return NewClient{}, fmt.Errorf("--redirect-uri %q: must be an absolute https URL, or http on localhost/127.0.0.1/[::1], without a fragment", raw)
			}
		}
	default:
		return NewClient{}, fmt.Errorf("--grant %q: client_credentials or authorization_code", spec.Grant)
	}
	id, err := randomToken("cli_", 12)
	if err != nil {
		return NewClient{}, err
	}
	out := NewClient{ClientID: id}
	var hash []byte
	if spec.Grant == "client_credentials" {
		if out.Secret, err = randomToken("bap_cs_", 32); err != nil {
			return NewClient{}, err
		}
		h := sha256.Sum256([]byte(out.Secret))
		hash = h[:]
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ($1) ON CONFLICT DO NOTHING`, spec.Tenant); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO oauth_client (tenant_id, client_id, name, grant_type, secret_hash) VALUES ($1, $2, $3, $4, $5)`,
			spec.Tenant, id, spec.Name, spec.Grant, hash); err != nil {
			return err
		}
		for _, s := range dedupe(spec.Scopes) {
			if _, err := tx.Exec(ctx, `INSERT INTO oauth_client_scope (tenant_id, client_id, scope) VALUES ($1, $2, $3)`, spec.Tenant, id, s); err != nil {
				return err
			}
		}
		for _, u := range dedupe(spec.RedirectURIs) {
			if _, err := tx.Exec(ctx, `INSERT INTO oauth_client_redirect (tenant_id, client_id, redirect_uri) VALUES ($1, $2, $3)`, spec.Tenant, id, u); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO auth_decision (tenant_id, client_id, operation, scope, outcome, reason)
			VALUES ($1, $2, 'client_create', $3, 'issued', $4)`, spec.Tenant, id, strings.Join(dedupe(spec.Scopes), " "), spec.Grant)
		return err
	})
	if err != nil {
		return NewClient{}, fmt.Errorf("registering client: %w", err)
	}
	return out, nil
}

func dedupe(in []string) []string {
	var out []string
	for _, v := range in {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// RevokeClient disables a client and every token issued to it, and announces the revocation so
// that running servers refuse its tokens at once.
func RevokeClient(ctx context.Context, pool *pgxpool.Pool, clientID string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var tenant string
		err := tx.QueryRow(ctx, `UPDATE oauth_client SET revoked_at = coalesce(revoked_at, now()) WHERE client_id = $1 RETURNING tenant_id`, clientID).Scan(&tenant)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrUnknownClient
		}
		if err != nil {
			return fmt.Errorf("revoking client: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE oauth_token_session SET active = false WHERE client_id = $1 AND active`, clientID); err != nil {
			return fmt.Errorf("revoking the client's tokens: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO auth_decision (tenant_id, client_id, operation, outcome, reason)
			VALUES ($1, $2, 'client_revoke', 'revoked', 'client_revoked')`, tenant, clientID); err != nil {
			return err
		}
		return notifyRevoked(ctx, tx)
	})
}

// CreatePerson adds a person who can sign in on the login page (creating the tenant if needed);
// the password is stored as an argon2id hash.
func CreatePerson(ctx context.Context, pool *pgxpool.Pool, tenant, name, password string) (string, error) {
	if !tenantPattern.MatchString(tenant) {
		return "", fmt.Errorf("--tenant %q: lower-case letters, digits, - and _ (at most 63)", tenant)
	}
	if n := len(name); n == 0 || n > 200 || strings.TrimSpace(name) != name {
		return "", errors.New("--name: 1 to 200 characters, no leading or trailing space")
	}
	if len(password) < 8 {
		return "", errors.New("the password must have at least 8 characters")
	}
	hash, err := hashPassword(password)
	if err != nil {
		return "", err
	}
	id, err := randomToken("usr_", 12)
	if err != nil {
		return "", err
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ($1) ON CONFLICT DO NOTHING`, tenant); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO person_account (tenant_id, person_id, name, password_hash) VALUES ($1, $2, $3, $4)`, tenant, id, name, hash); err != nil {
			return err
		}
		return consoleClientForNewTenant(ctx, tx, tenant) // the console's sign-in (console.go)
	})
	if err != nil {
		return "", fmt.Errorf("adding person: %w", err)
	}
	return id, nil
}
