package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// RecordDecision implements app.Tx: the decision is written with the command that took it.
func (t *pgTx) RecordDecision(ctx context.Context, d app.AuthDecision) error {
	point, state := d.Point, d.ApprovalState
	if point == "" {
		point = app.PointRequest
	}
	if state == "" {
		state = "none"
	}
	t.queue(`INSERT INTO auth_decision (occurred_at, tenant_id, subject, client_id, operation, task_id, scope, outcome, reason,
		decision_point, via, session_id, command_id, target_origin, approval_id, approval_state)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, left($9, 200), $10, $11, $12, $13, $14, $15, $16)`,
		d.Time, d.Tenant, d.Subject, d.ClientID, d.Operation, nullIfEmpty(d.TaskID), d.Scope, d.Outcome, d.Reason,
		point, nullIfEmpty(d.Via), nullIfEmpty(d.SessionID), nullIfEmpty(d.CommandID), nullIfEmpty(d.TargetOrigin),
		nullIfEmpty(d.ApprovalID), state)
	return nil
}

// ListDecisions implements app.Store, reading decision_binding (migration 0014).
func (s *Store) ListDecisions(ctx context.Context, f app.DecisionFilter) ([]app.DecisionBinding, error) {
	rows, err := s.pool.Query(ctx, `SELECT decision_id, occurred_at, decision_point, outcome, reason, actor, workload,
		coalesce(via, ''), coalesce(tenant, ''), coalesce(session_id, ''), coalesce(task_id, ''), coalesce(purpose, ''), operation,
		scope, coalesce(target_origin, ''), coalesce(origin_scope, '[]'), coalesce(data_classification, ''),
		coalesce(approval_id, ''), approval_state, coalesce(command_id, '')
		FROM decision_binding WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR task_id = $2)
		ORDER BY decision_id DESC LIMIT $3`, f.Tenant, f.TaskID, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing decisions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.DecisionBinding, error) {
		var d app.DecisionBinding
		var scope []byte
		if err := r.Scan(&d.ID, &d.Time, &d.Point, &d.Outcome, &d.Reason, &d.Actor, &d.Workload, &d.Via, &d.Tenant, &d.SessionID,
			&d.TaskID, &d.Purpose, &d.Operation, &d.Scope, &d.TargetOrigin, &scope, &d.Classification, &d.ApprovalID,
			&d.ApprovalState, &d.CommandID); err != nil {
			return d, err
		}
		d.Time = d.Time.UTC()
		return d, json.Unmarshal(scope, &d.OriginScope)
	})
	if err != nil {
		return nil, fmt.Errorf("listing decisions: %w", err)
	}
	return out, nil
}
