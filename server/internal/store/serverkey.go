package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrServerKeyMismatch reports a node started with a server key other than the one its database
// was used with (ADR 0015): its fingerprints would never match, and it could open no sealed value.
var ErrServerKeyMismatch = errors.New("the server key is not the one this database is used with")

// BindServerKey records keyID as the server key of the database the first time a node starts on
// it, and refuses (ErrServerKeyMismatch) a node whose key has another id afterwards.
func BindServerKey(ctx context.Context, pool *pgxpool.Pool, keyID string) error {
	if _, err := pool.Exec(ctx, `INSERT INTO server_key (key_id) VALUES ($1) ON CONFLICT DO NOTHING`, keyID); err != nil {
		return fmt.Errorf("recording the server key: %w", err)
	}
	var bound string
	if err := pool.QueryRow(ctx, `SELECT key_id FROM server_key`).Scan(&bound); err != nil {
		return fmt.Errorf("reading the server key id: %w", err)
	}
	if bound != keyID {
		return fmt.Errorf("%w: this node has %s, the database was used with %s", ErrServerKeyMismatch, keyID, bound)
	}
	return nil
}
