package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/originweave/bap/server/internal/app"
)

// The secrets of migrations/0011_secrets.sql: app.SecretStore. Values are sealed by the service;
// the store never sees one in clear.

const secretColumns = `s.tenant_id, s.secret_id, s.name, s.note, s.version, s.created_at, s.rotated_at, s.last_used_at,
	s.use_count, s.deleted_at IS NOT NULL,
	coalesce((SELECT array_agg(o.origin ORDER BY o.origin) FROM tenant_secret_origin o WHERE o.secret_id = s.secret_id), '{}')`

func scanSecret(r pgx.Row, extra ...any) (*app.SecretInfo, error) {
	var s app.SecretInfo
	dest := append([]any{&s.Tenant, &s.ID, &s.Name, &s.Note, &s.Version, &s.CreatedAt, &s.RotatedAt, &s.LastUsedAt,
		&s.UseCount, &s.Deleted, &s.Origins}, extra...)
	if err := r.Scan(dest...); err != nil {
		return nil, err
	}
	utc(&s.CreatedAt)
	for _, t := range []*time.Time{s.RotatedAt, s.LastUsedAt} {
		if t != nil {
			utc(t)
		}
	}
	return &s, nil
}

func audit(ctx context.Context, tx Querier, u app.SecretUse) error {
	_, err := tx.Exec(ctx, `INSERT INTO tenant_secret_audit (tenant_id, secret_id, action, actor, origin, task_id, command_id, reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, u.Tenant, u.SecretID, u.Action, u.Actor, u.Origin, u.TaskID, u.CommandID, u.Reason)
	return err
}

// InsertSecret implements app.SecretStore.
func (s *Store) InsertSecret(ctx context.Context, sec *app.SecretInfo, sealed []byte, actor string) error {
	return secretWrite("storing the secret", pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return insertSecret(ctx, tx, sec, sealed, actor) }))
}

// ReplaceSecretValue implements app.SecretStore.
func (s *Store) ReplaceSecretValue(ctx context.Context, tenant, id string, version int, sealed []byte, actor string) error {
	return secretWrite("rotating the secret", pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return replaceSecretValue(ctx, tx, tenant, id, version, sealed, actor)
	}))
}

// DeleteSecret implements app.SecretStore.
func (s *Store) DeleteSecret(ctx context.Context, tenant, id, actor string) error {
	return secretWrite("deleting the secret", pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return deleteSecret(ctx, tx, tenant, id, actor) }))
}

// The same writes inside a command's transaction (app.SecretTx): the secret and its
// Idempotency-Key's answer commit together.

// InsertSecret implements app.SecretTx.
func (t *pgTx) InsertSecret(ctx context.Context, sec *app.SecretInfo, sealed []byte, actor string) error {
	tx, err := t.q(ctx)
	if err != nil {
		return err
	}
	return secretWrite("storing the secret", insertSecret(ctx, tx, sec, sealed, actor))
}

// ReplaceSecretValue implements app.SecretTx.
func (t *pgTx) ReplaceSecretValue(ctx context.Context, tenant, id string, version int, sealed []byte, actor string) error {
	tx, err := t.q(ctx)
	if err != nil {
		return err
	}
	return secretWrite("rotating the secret", replaceSecretValue(ctx, tx, tenant, id, version, sealed, actor))
}

// DeleteSecret implements app.SecretTx.
func (t *pgTx) DeleteSecret(ctx context.Context, tenant, id, actor string) error {
	tx, err := t.q(ctx)
	if err != nil {
		return err
	}
	return secretWrite("deleting the secret", deleteSecret(ctx, tx, tenant, id, actor))
}

// GetSecret implements app.SecretTx: the metadata, never the sealed value.
func (t *pgTx) GetSecret(ctx context.Context, tenant, id string) (*app.SecretInfo, error) {
	tx, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	sec, err := scanSecret(tx.QueryRow(ctx, `SELECT `+secretColumns+` FROM tenant_secret s
		WHERE s.tenant_id = $1 AND s.secret_id = $2 FOR UPDATE`, tenant, id))
	if err != nil {
		return nil, translate(err)
	}
	return sec, nil
}

// secretWrite maps a write's error: a live name already in use is app.ErrConflict, an unknown
// or deleted secret app.ErrNotFound.
func secretWrite(what string, err error) error {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe) && pe.Code == "23505":
		return app.ErrConflict
	case errors.Is(err, app.ErrNotFound):
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

func insertSecret(ctx context.Context, tx Querier, sec *app.SecretInfo, sealed []byte, actor string) error {
	if _, err := tx.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ($1) ON CONFLICT DO NOTHING`, sec.Tenant); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO tenant_secret (tenant_id, secret_id, name, note, version, sealed_value, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, sec.Tenant, sec.ID, sec.Name, sec.Note, sec.Version, sealed, sec.CreatedAt); err != nil {
		return err
	}
	for _, o := range sec.Origins {
		if _, err := tx.Exec(ctx, `INSERT INTO tenant_secret_origin (tenant_id, secret_id, origin) VALUES ($1, $2, $3)`,
			sec.Tenant, sec.ID, o); err != nil {
			return err
		}
	}
	return audit(ctx, tx, app.SecretUse{Tenant: sec.Tenant, SecretID: sec.ID, Action: "put", Actor: actor})
}

func replaceSecretValue(ctx context.Context, tx Querier, tenant, id string, version int, sealed []byte, actor string) error {
	tag, err := tx.Exec(ctx, `UPDATE tenant_secret SET sealed_value = $3, version = $4, rotated_at = now()
		WHERE tenant_id = $1 AND secret_id = $2 AND deleted_at IS NULL AND version = $4 - 1`, tenant, id, sealed, version)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return app.ErrNotFound
	}
	return audit(ctx, tx, app.SecretUse{Tenant: tenant, SecretID: id, Action: "rotate", Actor: actor})
}

func deleteSecret(ctx context.Context, tx Querier, tenant, id, actor string) error {
	tag, err := tx.Exec(ctx, `UPDATE tenant_secret SET sealed_value = NULL, deleted_at = now()
		WHERE tenant_id = $1 AND secret_id = $2 AND deleted_at IS NULL`, tenant, id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return app.ErrNotFound
	}
	return audit(ctx, tx, app.SecretUse{Tenant: tenant, SecretID: id, Action: "delete", Actor: actor})
}

// GetSecret implements app.SecretStore.
func (s *Store) GetSecret(ctx context.Context, tenant, id string) (*app.SecretInfo, []byte, error) {
	var sealed []byte
	sec, err := scanSecret(s.pool.QueryRow(ctx, `SELECT `+secretColumns+`, s.sealed_value FROM tenant_secret s
		WHERE s.tenant_id = $1 AND s.secret_id = $2`, tenant, id), &sealed)
	if err != nil {
		return nil, nil, translate(err)
	}
	return sec, sealed, nil
}

// ListSecrets implements app.SecretStore.
func (s *Store) ListSecrets(ctx context.Context, tenant string) ([]app.SecretInfo, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+secretColumns+` FROM tenant_secret s
		WHERE s.tenant_id = $1 AND s.deleted_at IS NULL ORDER BY s.name`, tenant)
	if err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.SecretInfo, error) {
		sec, err := scanSecret(r)
		if err != nil {
			return app.SecretInfo{}, err
		}
		return *sec, nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	return out, nil
}

// RecordSecretUse implements app.SecretStore.
func (s *Store) RecordSecretUse(ctx context.Context, u app.SecretUse) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if u.Action == "use" {
			if _, err := tx.Exec(ctx, `UPDATE tenant_secret SET use_count = use_count + 1, last_used_at = now()
				WHERE tenant_id = $1 AND secret_id = $2`, u.Tenant, u.SecretID); err != nil {
				return err
			}
		}
		return audit(ctx, tx, u)
	})
	if err != nil {
		return fmt.Errorf("recording the secret's use: %w", err)
	}
	return nil
}
