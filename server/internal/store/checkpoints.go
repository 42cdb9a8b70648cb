package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// InsertCheckpoint implements app.Tx.
func (t *pgTx) InsertCheckpoint(ctx context.Context, c *app.Checkpoint) error {
	t.queue(`INSERT INTO task_checkpoint (tenant_id, checkpoint_id, task_id, session_id, artifact_id, software_version,
		protocol_version, policy_digest, created_at, url, epoch_id, format)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		c.Tenant, c.ID, c.TaskID, c.SessionID, c.ArtifactID, c.SoftwareVersion, c.ProtocolVersion, c.PolicyDigest,
		c.CreatedAt, c.URL, nullIfEmpty(c.EpochID), c.Format)
	return nil
}

// GetCheckpoint implements app.Store.
func (s *Store) GetCheckpoint(ctx context.Context, tenant, checkpointID string) (*app.Checkpoint, error) {
	var c app.Checkpoint
	// The engine is its session's (migration 0018).
	err := s.pool.QueryRow(ctx, `SELECT k.tenant_id, k.checkpoint_id, k.task_id, k.session_id, k.artifact_id, k.software_version,
		k.protocol_version, k.policy_digest, k.created_at, k.url, coalesce(k.epoch_id, ''), k.format, s.engine
		FROM task_checkpoint k JOIN browser_session s ON s.session_id = k.session_id
		WHERE k.tenant_id = $1 AND k.checkpoint_id = $2`, tenant, checkpointID).Scan(
		&c.Tenant, &c.ID, &c.TaskID, &c.SessionID, &c.ArtifactID, &c.SoftwareVersion, &c.ProtocolVersion, &c.PolicyDigest,
		&c.CreatedAt, &c.URL, &c.EpochID, &c.Format, &c.Engine)
	if err != nil {
		return nil, translate(err)
	}
	utc(&c.CreatedAt)
	return &c, nil
}

// TaskHasCheckpoint implements app.Tx.
func (t *pgTx) TaskHasCheckpoint(ctx context.Context, tenant, taskID string) (bool, error) {
	q, err := t.q(ctx)
	if err != nil {
		return false, err
	}
	var ok bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM task_checkpoint WHERE tenant_id = $1 AND task_id = $2)`,
		tenant, taskID).Scan(&ok); err != nil {
		return false, fmt.Errorf("looking for a checkpoint: %w", err)
	}
	return ok, nil
}

// CountTaskOpenSessions implements app.Tx.
func (t *pgTx) CountTaskOpenSessions(ctx context.Context, tenant, taskID string) (int, error) {
	q, err := t.q(ctx)
	if err != nil {
		return 0, err
	}
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM browser_session WHERE tenant_id = $1 AND task_id = $2 AND state = 'open'`,
		tenant, taskID).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting the task's open sessions: %w", err)
	}
	return n, nil
}

// OrphanedSessions implements app.Store.
func (s *Store) OrphanedSessions(ctx context.Context, staleBefore time.Time, limit int) ([]app.SessionRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sessionColumns+` FROM browser_session s
		LEFT JOIN runtime_node n ON n.node_id = s.node_id
		WHERE s.state = 'open' AND (n.node_id IS NULL OR n.stopped_at IS NOT NULL OR n.heartbeat_at < $1)
		ORDER BY s.created_at LIMIT $2`, staleBefore, limit)
	if err != nil {
		return nil, fmt.Errorf("listing orphaned sessions: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.SessionRecord, error) {
		rec, err := scanSession(r)
		if err != nil {
			return app.SessionRecord{}, err
		}
		return *rec, nil
	})
}

// OpenSessionsOfEndedTasks implements app.Store.
func (s *Store) OpenSessionsOfEndedTasks(ctx context.Context, limit int) ([]app.SessionRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sessionColumns+` FROM browser_session s
		JOIN agent_task t ON t.tenant_id = s.tenant_id AND t.task_id = s.task_id
		WHERE s.state = 'open' AND t.state IN ('succeeded', 'failed', 'cancelled', 'expired')
		ORDER BY s.created_at LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("listing sessions of ended tasks: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.SessionRecord, error) {
		rec, err := scanSession(r)
		if err != nil {
			return app.SessionRecord{}, err
		}
		return *rec, nil
	})
}
