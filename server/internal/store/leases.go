package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/task"
)

// Delegated tasks (migrations/0006_delegated_tasks.sql, ADR 0011): the queue of plans with its
// leases, step progress and dead letters. Lease times are the database's clock (now()), so that
// nodes whose clocks differ agree on when a lease expired.

var (
	_ app.PlanStore = (*Store)(nil)
	_ app.PlanTx    = (*pgTx)(nil)
)

// queueLease is create_task's row of a delegated task in the queue.
func queueLease(t *pgTx, tk *app.Task) {
	t.queue(`INSERT INTO task_lease (tenant_id, task_id) VALUES ($1, $2)`, tk.Tenant, tk.ID)
}

// runnable is the condition of a lease a worker may claim at now(): unfinished, free or expired,
// not held back, its task able to run.
const runnable = `l.finished_at IS NULL AND l.not_before <= now()
	AND (l.owner_node IS NULL OR l.expires_at < now())
	AND t.state IN ('admitted', 'running', 'checkpointed')`

// ClaimPlanTask implements app.PlanStore.
func (s *Store) ClaimPlanTask(ctx context.Context, nodeID string, ttl time.Duration) (*app.LeaseClaim, error) {
	var c app.LeaseClaim
	err := s.pool.QueryRow(ctx, `WITH c AS (
			SELECT l.task_id, l.owner_node IS NOT NULL AS took_over FROM task_lease l
			JOIN agent_task t ON t.task_id = l.task_id
			WHERE `+runnable+`
			ORDER BY l.not_before, l.task_id LIMIT 1
			FOR UPDATE OF l SKIP LOCKED)
		UPDATE task_lease l SET owner_node = $1, expires_at = now() + $2::interval, lease_epoch = l.lease_epoch + 1,
			claims = l.claims + 1, expiries = l.expiries + (CASE WHEN c.took_over THEN 1 ELSE 0 END), updated_at = now()
		FROM c WHERE l.task_id = c.task_id
		RETURNING l.tenant_id, l.task_id, l.lease_epoch, coalesce(l.session_id, ''), c.took_over`,
		nodeID, ttl).Scan(&c.Tenant, &c.TaskID, &c.Epoch, &c.SessionID, &c.TookOver)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, app.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("claiming a delegated task: %w", err)
	}
	return &c, nil
}

// RenewLease implements app.PlanStore.
func (s *Store) RenewLease(ctx context.Context, taskID, nodeID string, epoch int64, ttl time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE task_lease SET expires_at = now() + $4::interval, updated_at = now()
		WHERE task_id = $1 AND owner_node = $2 AND lease_epoch = $3 AND finished_at IS NULL`, taskID, nodeID, epoch, ttl)
	if err != nil {
		return false, fmt.Errorf("renewing a lease: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ReleaseLease implements app.PlanStore.
func (s *Store) ReleaseLease(ctx context.Context, taskID, nodeID string, epoch int64, delay time.Duration) error {
	_, err := s.pool.Exec(ctx, `UPDATE task_lease SET owner_node = NULL, expires_at = NULL,
		not_before = now() + $4::interval, updated_at = now()
		WHERE task_id = $1 AND owner_node = $2 AND lease_epoch = $3`, taskID, nodeID, epoch, delay)
	if err != nil {
		return fmt.Errorf("releasing a lease: %w", err)
	}
	return nil
}

// PlanProgress implements app.PlanStore.
func (s *Store) PlanProgress(ctx context.Context, tenant, taskID string) ([]app.StepProgress, error) {
	rows, err := s.pool.Query(ctx, `SELECT step_index, state, attempts, coalesce(command_key, ''), coalesce(approval_id, ''),
		coalesce(receipt_id, ''), coalesce(checkpoint_id, ''), coalesce(last_problem_code, ''), last_error, started_at, finished_at
		FROM plan_step_progress WHERE tenant_id = $1 AND task_id = $2 ORDER BY step_index`, tenant, taskID)
	if err != nil {
		return nil, fmt.Errorf("reading plan progress: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.StepProgress, error) {
		var p app.StepProgress
		var code string
		err := r.Scan(&p.Index, &p.State, &p.Attempts, &p.CommandKey, &p.ApprovalID, &p.ReceiptID, &p.CheckpointID,
			&code, &p.LastError, &p.StartedAt, &p.FinishedAt)
		p.LastProblemCode = app.Code(code)
		return p, err
	})
}

// KeyState implements app.PlanStore.
func (s *Store) KeyState(ctx context.Context, tenant, key string) (*app.KeyState, error) {
	var k app.KeyState
	var state string
	var status *int
	err := s.pool.QueryRow(ctx, `SELECT i.state, i.response_status, i.response_body, i.command_id,
		coalesce((SELECT CASE WHEN r.state = 'open' THEN 'open' ELSE r.resolution END FROM task_reconciliation_current r
			WHERE r.command_id = i.command_id), '')
		FROM idempotency_record i WHERE i.tenant_id = $1 AND i.idempotency_key = $2`, tenant, key).
		Scan(&state, &status, &k.Body, &k.CommandID, &k.Reconciliation)
	if err != nil {
		return nil, translate(err)
	}
	k.Completed = state == "completed"
	if status != nil {
		k.Status = *status
	}
	return &k, nil
}

// ApprovalOutcome implements app.PlanStore.
func (s *Store) ApprovalOutcome(ctx context.Context, tenant, approvalID string) (*app.ApprovalOutcome, error) {
	var o app.ApprovalOutcome
	var state string
	var rid, outcome, code, rec *string
	err := s.pool.QueryRow(ctx, `SELECT a.state, rc.receipt_id, rc.outcome, rc.problem_code,
		(SELECT CASE WHEN r.state = 'open' THEN 'open' ELSE r.resolution END FROM task_reconciliation_current r WHERE r.command_id = d.command_id)
		FROM approval_request a
		LEFT JOIN approval_decision d ON d.approval_id = a.approval_id AND d.supersedes IS NULL
		LEFT JOIN task_receipt rc ON rc.command_id = d.command_id
		WHERE a.tenant_id = $1 AND a.approval_id = $2`, tenant, approvalID).Scan(&state, &rid, &outcome, &code, &rec)
	if err != nil {
		return nil, translate(err)
	}
	o.State = task.ApprovalState(state)
	if rid != nil {
		o.ReceiptID = *rid
	}
	if outcome != nil {
		o.Outcome = task.Outcome(*outcome)
	}
	if code != nil {
		o.ProblemCode = app.Code(*code)
	}
	if rec != nil {
		o.Reconciliation = *rec
	}
	return &o, nil
}

// LatestCheckpoint implements app.PlanStore.
func (s *Store) LatestCheckpoint(ctx context.Context, tenant, taskID string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT checkpoint_id FROM task_checkpoint WHERE tenant_id = $1 AND task_id = $2
		ORDER BY created_at DESC, checkpoint_id DESC LIMIT 1`, tenant, taskID).Scan(&id)
	if err != nil {
		return "", translate(err)
	}
	return id, nil
}

// LockLease implements app.PlanTx.
func (t *pgTx) LockLease(ctx context.Context, taskID, nodeID string, epoch int64) error {
	q, err := t.q(ctx)
	if err != nil {
		return err
	}
	var one int
	err = q.QueryRow(ctx, `SELECT 1 FROM task_lease WHERE task_id = $1 AND owner_node = $2 AND lease_epoch = $3
		AND finished_at IS NULL FOR UPDATE`, taskID, nodeID, epoch).Scan(&one)
	return translate(err)
}

// SaveStepProgress implements app.PlanTx.
func (t *pgTx) SaveStepProgress(ctx context.Context, tenant, taskID string, p *app.StepProgress) error {
	t.queue(`INSERT INTO plan_step_progress (tenant_id, task_id, step_index, state, attempts, command_key, approval_id,
			receipt_id, checkpoint_id, last_problem_code, last_error, started_at, finished_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, now())
		ON CONFLICT (task_id, step_index) DO UPDATE SET state = EXCLUDED.state, attempts = EXCLUDED.attempts,
			command_key = EXCLUDED.command_key, approval_id = EXCLUDED.approval_id, receipt_id = EXCLUDED.receipt_id,
			checkpoint_id = EXCLUDED.checkpoint_id, last_problem_code = EXCLUDED.last_problem_code,
			last_error = EXCLUDED.last_error, started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at,
			updated_at = now()`,
		tenant, taskID, p.Index, p.State, p.Attempts, nullIfEmpty(p.CommandKey), nullIfEmpty(p.ApprovalID),
		nullIfEmpty(p.ReceiptID), nullIfEmpty(p.CheckpointID), nullIfEmpty(string(p.LastProblemCode)), p.LastError,
		p.StartedAt, p.FinishedAt)
	return nil
}

// SetLeaseSession implements app.PlanTx.
func (t *pgTx) SetLeaseSession(ctx context.Context, taskID, sessionID string) error {
	t.queue(`UPDATE task_lease SET session_id = $2, updated_at = now() WHERE task_id = $1`, taskID, nullIfEmpty(sessionID))
	return nil
}

// FinishLease implements app.PlanTx.
func (t *pgTx) FinishLease(ctx context.Context, taskID string) error {
	t.queue(`UPDATE task_lease SET finished_at = now(), owner_node = NULL, expires_at = NULL, updated_at = now()
		WHERE task_id = $1 AND finished_at IS NULL`, taskID)
	return nil
}

// InsertDeadLetter implements app.PlanTx.
func (t *pgTx) InsertDeadLetter(ctx context.Context, d *app.DeadLetter) error {
	evidence, err := json.Marshal(d.Evidence)
	if err != nil {
		return fmt.Errorf("encoding dead letter evidence: %w", err)
	}
	t.queue(`INSERT INTO dead_letter_record (tenant_id, task_id, command_id, reason, attempts, evidence, step_index,
			problem_code, artifact_id)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9)`,
		d.Tenant, d.TaskID, nullIfEmpty(d.CommandID), d.Reason, d.Attempts, evidence, d.StepIndex,
		nullIfEmpty(string(d.ProblemCode)), nullIfEmpty(d.ArtifactID))
	return nil
}
