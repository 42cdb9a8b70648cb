package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// InsertHandoff implements app.Tx.
func (t *pgTx) InsertHandoff(ctx context.Context, h *app.Handoff) error {
	q, err := t.q(ctx)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, `INSERT INTO task_handoff (tenant_id, handoff_id, task_id, session_id, holder, via, state,
		started_at, lease_expires_at, started_command) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		h.Tenant, h.ID, h.TaskID, h.SessionID, h.Holder, h.Via, h.State, h.StartedAt, h.LeaseExpiresAt, h.StartedCommand); err != nil {
		return fmt.Errorf("recording handoff: %w", translate(err))
	}
	return nil
}

// OpenHandoff implements app.Tx.
func (t *pgTx) OpenHandoff(ctx context.Context, tenant, taskID string) (*app.Handoff, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	return openHandoff(ctx, q, tenant, taskID)
}

// OpenHandoff implements app.Store (for reads, which are not commands).
func (s *Store) OpenHandoff(ctx context.Context, tenant, taskID string) (*app.Handoff, error) {
	return openHandoff(ctx, s.pool, tenant, taskID)
}

// rowQuerier is what openHandoff reads through: a transaction or the pool.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func openHandoff(ctx context.Context, q rowQuerier, tenant, taskID string) (*app.Handoff, error) {
	var h app.Handoff
	err := q.QueryRow(ctx, `SELECT tenant_id, handoff_id, task_id, session_id, holder, via, state, started_at,
		lease_expires_at, started_command FROM task_handoff WHERE tenant_id = $1 AND task_id = $2 AND state = 'open'`,
		tenant, taskID).Scan(&h.Tenant, &h.ID, &h.TaskID, &h.SessionID, &h.Holder, &h.Via, &h.State, &h.StartedAt,
		&h.LeaseExpiresAt, &h.StartedCommand)
	if err != nil {
		return nil, translate(err)
	}
	utc(&h.StartedAt)
	utc(&h.LeaseExpiresAt)
	return &h, nil
}

// CloseHandoff implements app.Tx.
func (t *pgTx) CloseHandoff(ctx context.Context, h *app.Handoff) error {
	q, err := t.q(ctx)
	if err != nil {
		return err
	}
	tag, err := q.Exec(ctx, `UPDATE task_handoff SET state = $3, ended_at = $4, ended_by = $5, ended_command = $6,
		checkpoint_id = $7 WHERE tenant_id = $1 AND handoff_id = $2 AND state = 'open'`,
		h.Tenant, h.ID, h.State, h.EndedAt, h.EndedBy, nullIfEmpty(h.EndedCommand), nullIfEmpty(h.CheckpointID))
	if err != nil {
		return fmt.Errorf("closing handoff %s: %w", h.ID, translate(err))
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("closing handoff %s: %w", h.ID, app.ErrNotFound)
	}
	return nil
}
