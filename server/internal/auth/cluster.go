package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ClusterKey derives the key of one purpose (node credentials, MCP cursors and request states)
// from the server-wide secret kept in the database (authorization_server_secret), creating that
// secret on first use. Every node on the same database derives the same key, so a cluster needs
// no secret of its own to distribute (ADR 0012); keys of different purposes are independent
// (HMAC-SHA256 of the purpose under the secret).
func ClusterKey(ctx context.Context, pool *pgxpool.Pool, purpose string) ([]byte, error) {
	secret, err := serverSecret(ctx, pool)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("bap-cluster-key/v1\x00" + purpose))
	return m.Sum(nil), nil
}

// serverSecret reads the server-wide secret, creating it on first use (concurrent nodes agree:
// the first insert wins).
func serverSecret(ctx context.Context, pool *pgxpool.Pool) ([]byte, error) {
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO authorization_server_secret (secret_id, secret) VALUES (1, $1) ON CONFLICT DO NOTHING`, fresh); err != nil {
		return nil, fmt.Errorf("creating the server secret: %w", err)
	}
	var secret []byte
	if err := pool.QueryRow(ctx, `SELECT secret FROM authorization_server_secret WHERE secret_id = 1`).Scan(&secret); err != nil {
		return nil, fmt.Errorf("reading the server secret: %w", err)
	}
	return secret, nil
}
