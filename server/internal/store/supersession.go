package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/task"
)

// Corrections and their chains (migration 0013): task_outcome, approval_decision and
// reconciliation_resolution (reconcile.go) only ever get new rows; each correction supersedes
// the current row of its task, approval or reconciliation.

// CorrectTaskOutcome implements app.Tx.
func (t *pgTx) CorrectTaskOutcome(ctx context.Context, tk *app.Task, o app.OutcomeRecord) error {
	t.queue(`INSERT INTO task_outcome (tenant_id, task_id, state, verification, reason, recorded_by, recorded_at, supersedes)
		SELECT $1, $2, $3, $4, $5, $6, $7, cur.outcome_id FROM task_outcome_current cur WHERE cur.task_id = $2`,
		tk.Tenant, tk.ID, string(o.State), nullIfEmpty(o.Verification), o.Reason, o.RecordedBy, o.RecordedAt)
	return nil
}

// CorrectApprovalDecision implements app.Tx.
func (t *pgTx) CorrectApprovalDecision(ctx context.Context, a *app.Approval, d app.Decision) error {
	t.queue(`INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, decided_client, channel, reason, decided_at, supersedes)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		a.Tenant, a.ID, d.Decision, d.DecidedBy, nullIfEmpty(d.Workload), d.Via, d.Reason, d.DecidedAt, d.Supersedes)
	return nil
}

// taskOutcomes reads the outcome chain of an ended task, oldest first.
func taskOutcomes(ctx context.Context, q Querier, tenant, taskID string) ([]app.OutcomeRecord, error) {
	rows, err := q.Query(ctx, `SELECT outcome_id, state, coalesce(verification, ''), reason, recorded_by, recorded_at,
		coalesce(supersedes, 0) FROM task_outcome WHERE tenant_id = $1 AND task_id = $2 ORDER BY outcome_id`, tenant, taskID)
	if err != nil {
		return nil, fmt.Errorf("reading the outcomes of %s: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.OutcomeRecord, error) {
		var o app.OutcomeRecord
		var state string
		err := r.Scan(&o.ID, &state, &o.Verification, &o.Reason, &o.RecordedBy, &o.RecordedAt, &o.Supersedes)
		o.State, o.RecordedAt = task.State(state), o.RecordedAt.UTC()
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the outcomes of %s: %w", taskID, err)
	}
	return out, nil
}

// attachDecisions reads the decision chains of approvals (one query) and sets each approval's
// Decisions, and the ids of its current Decision.
func attachDecisions(ctx context.Context, q Querier, tenant string, approvals []*app.Approval) error {
	var ids []string
	byID := map[string]*app.Approval{}
	for _, a := range approvals {
		if a.Decision != nil {
			ids = append(ids, a.ID)
			byID[a.ID] = a
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, `SELECT approval_id, decision_id, coalesce(supersedes, 0), decision, decided_by, coalesce(decided_client, ''),
		channel, reason, decided_at FROM approval_decision WHERE tenant_id = $1 AND approval_id = ANY($2) ORDER BY approval_id, decision_id`, tenant, ids)
	if err != nil {
		return fmt.Errorf("reading approval decisions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var d app.Decision
		var at time.Time
		if err := rows.Scan(&id, &d.ID, &d.Supersedes, &d.Decision, &d.DecidedBy, &d.Workload, &d.Via, &d.Reason, &at); err != nil {
			return fmt.Errorf("reading approval decisions: %w", err)
		}
		d.DecidedAt = at.UTC()
		a := byID[id]
		a.Decisions = append(a.Decisions, d)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading approval decisions: %w", err)
	}
	for _, a := range byID {
		if n := len(a.Decisions); n > 0 {
			a.Decision.ID, a.Decision.Supersedes = a.Decisions[n-1].ID, a.Decisions[n-1].Supersedes
		}
	}
	return nil
}
