package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// reconciliationColumns reads a reconciliation as it stands (task_reconciliation_current, migration
// 0015: open, or resolved by its current resolution) with its chain of resolutions, oldest first.
const reconciliationColumns = `r.reconciliation_id, r.tenant_id, r.task_id, r.command_id, r.operation, r.state,
	coalesce(r.resolution, ''), r.note, r.opened_at, r.resolved_at, coalesce(r.resolved_by, ''), coalesce(r.resolution_id, 0),
	(SELECT coalesce(json_agg(json_build_object('resolution_id', s.resolution_id, 'outcome', s.resolution, 'note', s.note,
		'resolved_by', s.resolved_by, 'resolved_at', s.resolved_at, 'supersedes', s.supersedes) ORDER BY s.resolution_id), '[]')
	 FROM reconciliation_resolution s WHERE s.reconciliation_id = r.reconciliation_id)`

type resolutionRow struct {
	ID         int64     `json:"resolution_id"`
	Outcome    string    `json:"outcome"`
	Note       string    `json:"note"`
	ResolvedBy string    `json:"resolved_by"`
	ResolvedAt time.Time `json:"resolved_at"`
	Supersedes *int64    `json:"supersedes"`
}

func scanReconciliation(row pgx.Row) (*app.Reconciliation, error) {
	var r app.Reconciliation
	var chain []byte
	if err := row.Scan(&r.ID, &r.Tenant, &r.TaskID, &r.CommandID, &r.Operation, &r.State, &r.Resolution, &r.Note,
		&r.OpenedAt, &r.ResolvedAt, &r.ResolvedBy, &r.ResolutionID, &chain); err != nil {
		return nil, translate(err)
	}
	utc(&r.OpenedAt)
	utcp(r.ResolvedAt)
	var rows []resolutionRow
	if err := json.Unmarshal(chain, &rows); err != nil {
		return nil, fmt.Errorf("decoding the resolutions of %s: %w", r.ID, err)
	}
	for _, s := range rows {
		res := app.ReconciliationResolution{ID: s.ID, Outcome: s.Outcome, Note: s.Note, ResolvedBy: s.ResolvedBy,
			ResolvedAt: s.ResolvedAt.UTC()}
		if s.Supersedes != nil {
			res.Supersedes = *s.Supersedes
		}
		r.Resolutions = append(r.Resolutions, res)
	}
	return &r, nil
}

// ListReconciliations implements app.Store.
func (s *Store) ListReconciliations(ctx context.Context, all bool) ([]app.Reconciliation, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+reconciliationColumns+` FROM task_reconciliation_current r
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

// GetReconciliation implements app.Tx: the reconciliation row is locked (the view it is read
// from cannot be).
func (t *pgTx) GetReconciliation(ctx context.Context, id string) (*app.Reconciliation, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	var one int
	if err := q.QueryRow(ctx, `SELECT 1 FROM task_reconciliation WHERE reconciliation_id = $1 FOR UPDATE`, id).Scan(&one); err != nil {
		return nil, translate(err)
	}
	return scanReconciliation(q.QueryRow(ctx, `SELECT `+reconciliationColumns+` FROM task_reconciliation_current r
		WHERE r.reconciliation_id = $1`, id))
}

// ResolveReconciliation implements app.Tx: a new resolution, superseding r's current one when it
// has one (a correction). Nothing is updated in place.
func (t *pgTx) ResolveReconciliation(ctx context.Context, r *app.Reconciliation) error {
	var supersedes any
	if r.ResolutionID != 0 {
		supersedes = r.ResolutionID
	}
	t.queue(`INSERT INTO reconciliation_resolution (tenant_id, reconciliation_id, resolution, note, resolved_by, resolved_at, supersedes)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, r.Tenant, r.ID, r.Resolution, r.Note, r.ResolvedBy, r.ResolvedAt, supersedes)
	return nil
}

// CountOpenReconciliations implements app.Tx.
func (t *pgTx) CountOpenReconciliations(ctx context.Context, taskID string) (int, error) {
	q, err := t.q(ctx)
	if err != nil {
		return 0, err
	}
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM task_reconciliation_current WHERE task_id = $1 AND state = 'open'`, taskID).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting open reconciliations: %w", err)
	}
	return n, nil
}
