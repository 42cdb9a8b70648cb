package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// sessionColumns reads a session with its first browsing context.
const sessionColumns = `s.tenant_id, s.session_id, s.task_id, coalesce(s.node_id, ''), s.state, s.created_at, s.ended_at,
	coalesce(s.from_checkpoint_id, ''), s.engine, s.engine_version,
	coalesce((SELECT c.context_id FROM browsing_context c WHERE c.session_id = s.session_id AND c.opener_context_id IS NULL
		ORDER BY c.created_at, c.context_id LIMIT 1), '')`

func scanSession(row pgx.Row) (*app.SessionRecord, error) {
	var r app.SessionRecord
	if err := row.Scan(&r.Tenant, &r.ID, &r.TaskID, &r.NodeID, &r.State, &r.CreatedAt, &r.EndedAt, &r.FromCheckpoint, &r.Engine, &r.EngineVersion, &r.ContextID); err != nil {
		return nil, translate(err)
	}
	utc(&r.CreatedAt)
	utcp(r.EndedAt)
	return &r, nil
}

// GetSession implements app.Store.
func (s *Store) GetSession(ctx context.Context, tenant, sessionID string) (*app.SessionRecord, error) {
	return scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM browser_session s
		WHERE s.tenant_id = $1 AND s.session_id = $2`, tenant, sessionID))
}

// InsertSession implements app.Tx.
func (t *pgTx) InsertSession(ctx context.Context, r *app.SessionRecord) error {
	t.queue(`INSERT INTO browser_session (tenant_id, session_id, task_id, node_id, state, created_at, ended_at, from_checkpoint_id,
		engine, engine_version)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, r.Tenant, r.ID, r.TaskID, nullIfEmpty(r.NodeID), r.State, r.CreatedAt, r.EndedAt,
		nullIfEmpty(r.FromCheckpoint), r.Engine, r.EngineVersion)
	return nil
}

// LockSession implements app.Tx.
func (t *pgTx) LockSession(ctx context.Context, tenant, sessionID string) (*app.SessionRecord, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	return scanSession(q.QueryRow(ctx, `SELECT `+sessionColumns+` FROM browser_session s
		WHERE s.tenant_id = $1 AND s.session_id = $2 FOR UPDATE OF s`, tenant, sessionID))
}

// UpdateSession implements app.Tx.
func (t *pgTx) UpdateSession(ctx context.Context, r *app.SessionRecord) error {
	t.queue(`UPDATE browser_session SET state = $3, ended_at = $4 WHERE tenant_id = $1 AND session_id = $2`,
		r.Tenant, r.ID, r.State, r.EndedAt)
	return nil
}

// CountOpenSessions implements app.Tx.
func (t *pgTx) CountOpenSessions(ctx context.Context, tenant string) (int, error) {
	q, err := t.q(ctx)
	if err != nil {
		return 0, err
	}
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM browser_session WHERE tenant_id = $1 AND state = 'open'`, tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting open sessions: %w", err)
	}
	return n, nil
}

// RecordContext implements app.Tx.
func (t *pgTx) RecordContext(ctx context.Context, tenant, sessionID, contextID, opener string) error {
	if contextID == "" {
		return nil
	}
	t.queue(`INSERT INTO browsing_context (tenant_id, context_id, session_id, opener_context_id)
		VALUES ($1, $2, $3, (SELECT context_id FROM browsing_context WHERE context_id = $4 AND session_id = $3))
		ON CONFLICT (context_id) DO NOTHING`, tenant, contextID, sessionID, opener)
	return nil
}

// RecordEpoch implements app.Tx.
func (t *pgTx) RecordEpoch(ctx context.Context, tenant, sessionID, contextID, epochID, url string) error {
	if contextID == "" || epochID == "" {
		return nil
	}
	if err := t.RecordContext(ctx, tenant, sessionID, contextID, ""); err != nil {
		return err
	}
	t.queue(`INSERT INTO document_epoch (tenant_id, epoch_id, context_id, url) VALUES ($1, $2, $3, $4)
		ON CONFLICT (epoch_id) DO NOTHING`, tenant, epochID, contextID, url)
	return nil
}
