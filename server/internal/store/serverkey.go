package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
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

// ServerKeyWrap is the server key wrapped under one master key (ADR 0017).
type ServerKeyWrap struct {
	MasterKeyID string
	KeyID       string
	Wrapped     []byte
}

// ServerKeyWraps reads the bound server key's id ("" before the first start) and every wrapping of
// it.
func ServerKeyWraps(ctx context.Context, pool *pgxpool.Pool) (string, []ServerKeyWrap, error) {
	var bound string
	err := pool.QueryRow(ctx, `SELECT key_id FROM server_key`).Scan(&bound)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", nil, fmt.Errorf("reading the server key id: %w", err)
	}
	rows, err := pool.Query(ctx, `SELECT master_key_id, key_id, wrapped FROM server_key_wrap ORDER BY created_at DESC`)
	if err != nil {
		return "", nil, fmt.Errorf("reading the wrapped server key: %w", err)
	}
	wraps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ServerKeyWrap, error) {
		var w ServerKeyWrap
		return w, r.Scan(&w.MasterKeyID, &w.KeyID, &w.Wrapped)
	})
	if err != nil {
		return "", nil, fmt.Errorf("reading the wrapped server key: %w", err)
	}
	return bound, wraps, nil
}

// InitServerKey records w as the server key of a database that has none yet — the key id and its
// first wrapping in one transaction, so concurrent first starts agree on one key — or, when the
// database is bound to w.KeyID but has no wrapping (it was used before ADR 0017, with a server key
// file), adds the wrapping. It does nothing when another key won.
func InitServerKey(ctx context.Context, pool *pgxpool.Pool, w ServerKeyWrap) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE server_key_wrap IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO server_key (key_id) VALUES ($1) ON CONFLICT DO NOTHING`, w.KeyID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO server_key_wrap (master_key_id, key_id, wrapped)
			SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM server_key WHERE key_id = $2)
				AND NOT EXISTS (SELECT 1 FROM server_key_wrap)`, w.MasterKeyID, w.KeyID, w.Wrapped)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording the wrapped server key: %w", err)
	}
	return nil
}

// RewrapServerKey adds the wrapping w (a new master key's) and, unless keepOld, removes every
// other in the same transaction: a node started with the old master key refuses from then on.
func RewrapServerKey(ctx context.Context, pool *pgxpool.Pool, w ServerKeyWrap, keepOld bool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO server_key_wrap (master_key_id, key_id, wrapped)
			SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM server_key WHERE key_id = $2)
			ON CONFLICT (master_key_id) DO UPDATE SET wrapped = EXCLUDED.wrapped`, w.MasterKeyID, w.KeyID, w.Wrapped)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("%w: the database is not bound to %s", ErrServerKeyMismatch, w.KeyID)
		}
		if keepOld {
			return nil
		}
		_, err = tx.Exec(ctx, `DELETE FROM server_key_wrap WHERE master_key_id <> $1`, w.MasterKeyID)
		return err
	})
	if err != nil {
		return fmt.Errorf("re-wrapping the server key: %w", err)
	}
	return nil
}

// RetireMasterKey removes the wrapping under masterKeyID, never the last one.
func RetireMasterKey(ctx context.Context, pool *pgxpool.Pool, masterKeyID string) error {
	tag, err := pool.Exec(ctx, `DELETE FROM server_key_wrap WHERE master_key_id = $1
		AND EXISTS (SELECT 1 FROM server_key_wrap WHERE master_key_id <> $1)`, masterKeyID)
	if err != nil {
		return fmt.Errorf("retiring the master key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s wraps no server key here, or it is the only master key that does", masterKeyID)
	}
	return nil
}
