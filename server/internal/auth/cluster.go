package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/serverkey"
)

// ClusterKey derives the key of one purpose (node credentials, MCP cursors and request states)
// from the server-wide secret kept in the database (authorization_server_secret), creating that
// secret on first use. Every node on the same database derives the same key, so a cluster needs
// no secret of its own to distribute (ADR 0012); keys of different purposes are independent
// (HMAC-SHA256 of the purpose under the secret).
func ClusterKey(ctx context.Context, pool *pgxpool.Pool, key *serverkey.Key, purpose string) ([]byte, error) {
	secret, err := serverSecret(ctx, pool, key)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("bap-cluster-key/v1\x00" + purpose))
	return m.Sum(nil), nil
}

// serverSecretAAD binds the sealed server secret to its row.
var serverSecretAAD = []byte("bap/authorization-server-secret/v1\x001")

// serverSecret reads the server-wide secret, creating it on first use (concurrent nodes agree:
// the first insert wins). The database keeps it sealed under the server key (ADR 0017); a secret
// written in clear by an earlier release is sealed in place the first time it is read.
func serverSecret(ctx context.Context, pool *pgxpool.Pool, key *serverkey.Key) ([]byte, error) {
	seal := key.Sealer(serverkey.PurposeServerSecret)
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO authorization_server_secret (secret_id, secret) VALUES (1, $1) ON CONFLICT DO NOTHING`,
		seal.Seal(fresh, serverSecretAAD)); err != nil {
		return nil, fmt.Errorf("creating the server secret: %w", err)
	}
	var stored []byte
	if err := pool.QueryRow(ctx, `SELECT secret FROM authorization_server_secret WHERE secret_id = 1`).Scan(&stored); err != nil {
		return nil, fmt.Errorf("reading the server secret: %w", err)
	}
	if len(stored) == 32 { // in clear, from before ADR 0017
		if _, err := pool.Exec(ctx, `UPDATE authorization_server_secret SET secret = $1 WHERE secret_id = 1 AND secret = $2`,
			seal.Seal(stored, serverSecretAAD), stored); err != nil {
			return nil, fmt.Errorf("sealing the server secret: %w", err)
		}
		return stored, nil
	}
	secret, err := seal.Open(stored, serverSecretAAD)
	if err != nil {
		return nil, fmt.Errorf("the server secret does not open under server key %s: %w", key.ID(), err)
	}
	return secret, nil
}
