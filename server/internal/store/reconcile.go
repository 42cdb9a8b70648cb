package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

const reconciliationColumns = `r.reconciliation_id, r.tenant_id, r.task_id, r.command_id, c.operation, r.state,
	coalesce(r.resolution, ''), r.note, r.opened_at, r.resolved_at, coalesce(r.resolved_by, '')`

func scanReconciliation(row pgx.Row) (*app.Reconciliation, error) {
	var r app.Reconciliation
	if err := row.Scan(&r.ID, &r.Tenant, &r.TaskID, &r.CommandID, &r.Operation, &r.State, &r.Resolution, &r.Note,
		&r.OpenedAt, &r.ResolvedAt, &r.ResolvedBy); err != nil {
		return nil, translate(err)
	}
	utc(&r.OpenedAt)
	utcp(r.ResolvedAt)
	return &r, nil
}

// ListReconciliations implements app.Store.
func (s *Store) ListReconciliations(ctx context.Context, all bool) ([]app.Reconciliation, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+reconciliationColumns+`
		FROM task_reconciliation r JOIN task_command c ON c.command_id = r.command_id
		WHERE $1 OR r.state = 'open' ORDER BY r.opened_at, r.reconciliation_id`, all)
	if err != nil {
		return nil, fmt.Errorf("listing reconciliations: %w", err)
	}
	defer rows.Close()
	out := []app.Reconciliation{}
	for rows.Next() {
		r, err := scanReconciliation(rows)
		if err != nil {
			return nil, fmt.Errorf("listing reconciliations: %w", err)
		}
		out = append(out, *r)
	}
	return out, rows.Err()
}

// GetReconciliation implements app.Tx.
func (t *pgTx) GetReconciliation(ctx context.Context, id string) (*app.Reconciliation, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	return scanReconciliation(q.QueryRow(ctx, `SELECT `+reconciliationColumns+`
		FROM task_reconciliation r JOIN task_command c ON c.command_id = r.command_id
		WHERE r.reconciliation_id = $1 FOR UPDATE OF r`, id))
}

// ResolveReconciliation implements app.Tx.
func (t *pgTx) ResolveReconciliation(ctx context.Context, r *app.Reconciliation) error {
	t.queue(`UPDATE task_reconciliation SET state = $2, resolution = $3, note = $4, resolved_at = $5, resolved_by = $6
		WHERE reconciliation_id = $1`, r.ID, r.State, r.Resolution, r.Note, r.ResolvedAt, r.ResolvedBy)
	return nil
}

// CountOpenReconciliations implements app.Tx.
func (t *pgTx) CountOpenReconciliations(ctx context.Context, taskID string) (int, error) {
	q, err := t.q(ctx)
	if err != nil {
		return 0, err
	}
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM task_reconciliation WHERE task_id = $1 AND state = 'open'`, taskID).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting open reconciliations: %w", err)
	}
	return n, nil
}
