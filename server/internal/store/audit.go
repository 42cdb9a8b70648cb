package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/historychain"
)

// AuditKeys implements app.Tx.
func (t *pgTx) AuditKeys(ctx context.Context) ([]app.SealedAuditKey, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT key_id, private_key FROM audit_signing_key ORDER BY created_at DESC, key_id`)
	if err != nil {
		return nil, fmt.Errorf("reading audit keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.SealedAuditKey, error) {
		var k app.SealedAuditKey
		return k, r.Scan(&k.ID, &k.Sealed)
	})
	if err != nil {
		return nil, fmt.Errorf("reading audit keys: %w", err)
	}
	return keys, nil
}

// auditKeyLockID serialises the creation of the first audit key across nodes.
const auditKeyLockID = 0x626170617564 // "bapaud"

// LockAuditKeys implements app.Tx.
func (t *pgTx) LockAuditKeys(ctx context.Context) error {
	q, err := t.q(ctx)
	if err != nil {
		return err
	}
	var ok bool
	if err := q.QueryRow(ctx, `SELECT true FROM pg_advisory_xact_lock($1)`, int64(auditKeyLockID)).Scan(&ok); err != nil {
		return fmt.Errorf("locking audit keys: %w", err)
	}
	return nil
}

// InsertAuditKey implements app.Tx.
func (t *pgTx) InsertAuditKey(ctx context.Context, k app.SealedAuditKey) error {
	t.queue(`INSERT INTO audit_signing_key (key_id, private_key) VALUES ($1, $2)`, k.ID, k.Sealed)
	return nil
}

// ChainedHistory implements app.AuditStore: every event as stored, data read back as jsonb
// spells it (the chain's canonical form does not depend on the spelling).
func (s *Store) ChainedHistory(ctx context.Context, tenant, taskID string) ([]historychain.Event, int64, error) {
	var last int64
	if err := s.pool.QueryRow(ctx, `SELECT last_seq FROM agent_task WHERE tenant_id = $1 AND task_id = $2`, tenant, taskID).Scan(&last); err != nil {
		return nil, 0, translate(err)
	}
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, task_id, seq, event_id, event_type, occurred_at, actor, cause,
		coalesce(command_id, ''), data, prev_digest, digest FROM agent_task_event
		WHERE tenant_id = $1 AND task_id = $2 ORDER BY seq`, tenant, taskID)
	if err != nil {
		return nil, 0, fmt.Errorf("reading history: %w", err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (historychain.Event, error) {
		var e historychain.Event
		var data []byte
		err := r.Scan(&e.Tenant, &e.TaskID, &e.Seq, &e.EventID, &e.Type, &e.Time, &e.Actor, &e.Cause, &e.CommandID,
			&data, &e.PrevDigest, &e.Digest)
		e.Data = json.RawMessage(data)
		return e, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading history: %w", err)
	}
	return evs, last, nil
}

// ListAnchors implements app.AuditStore.
func (s *Store) ListAnchors(ctx context.Context, tenant, taskID string) ([]app.AnchorRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, task_id, seq, digest, history_sha256, reason, key_id, statement, anchored_at
		FROM audit_anchor WHERE tenant_id = $1 AND task_id = $2 ORDER BY seq`, tenant, taskID)
	if err != nil {
		return nil, fmt.Errorf("reading anchors: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.AnchorRecord, error) {
		var a app.AnchorRecord
		err := r.Scan(&a.Tenant, &a.TaskID, &a.Seq, &a.Digest, &a.HistorySHA256, &a.Reason, &a.KeyID, &a.Statement, &a.AnchoredAt)
		a.AnchoredAt = a.AnchoredAt.UTC()
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading anchors: %w", err)
	}
	return out, nil
}

// AuditTaskRefs implements app.AuditStore.
func (s *Store) AuditTaskRefs(ctx context.Context, taskID, after string, limit int) ([]app.TaskRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, task_id FROM agent_task
		WHERE ($1 = '' OR task_id = $1) AND task_id > $2 ORDER BY task_id LIMIT $3`, taskID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("listing tasks: %w", err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.TaskRef, error) {
		var ref app.TaskRef
		return ref, r.Scan(&ref.Tenant, &ref.TaskID)
	})
	if err != nil {
		return nil, fmt.Errorf("listing tasks: %w", err)
	}
	return refs, nil
}

// TaskArtifacts implements app.AuditStore: metadata only, the content stays in the database.
func (s *Store) TaskArtifacts(ctx context.Context, tenant, taskID string) ([]app.Artifact, error) {
	rows, err := s.pool.Query(ctx, `SELECT r.tenant_id, r.artifact_id, r.sha256, c.size, r.media_type, r.kind, r.task_id,
			coalesce(r.session_id, ''), coalesce(r.epoch_id, ''), coalesce(r.command_id, ''), r.source_url, r.created_at
		FROM artifact_reference r JOIN artifact_content c ON c.sha256 = r.sha256
		WHERE r.tenant_id = $1 AND r.task_id = $2 AND r.kind <> 'checkpoint' ORDER BY r.created_at, r.artifact_id`, tenant, taskID)
	if err != nil {
		return nil, fmt.Errorf("listing artifacts: %w", err)
	}
	arts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (app.Artifact, error) {
		var a app.Artifact
		err := row.Scan(&a.Tenant, &a.ID, &a.SHA256, &a.Size, &a.MediaType, &a.Kind, &a.TaskID, &a.SessionID, &a.EpochID,
			&a.CommandID, &a.SourceURL, &a.CreatedAt)
		utc(&a.CreatedAt)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing artifacts: %w", err)
	}
	return arts, nil
}

// DueForAnchor implements app.AuditStore.
func (s *Store) DueForAnchor(ctx context.Context, before time.Time, limit int) ([]app.TaskRef, error) {
	// Live tasks only (agent_task_live_idx): a task that ended was anchored then, and what follows
	// its end is anchored when a bundle of it is exported; a task waiting in created or admitted
	// does nothing a periodic anchor would pin.
	rows, err := s.pool.Query(ctx, `SELECT t.tenant_id, t.task_id FROM agent_task t
		WHERE t.state IN ('running', 'waiting_for_approval', 'waiting_for_external_input', 'checkpointed')
		  AND t.chain_digest IS NOT NULL
		  AND t.last_seq > coalesce((SELECT max(a.seq) FROM audit_anchor a WHERE a.task_id = t.task_id), 0)
		  AND coalesce((SELECT max(a.anchored_at) FROM audit_anchor a WHERE a.task_id = t.task_id), t.created_at) <= $1
		ORDER BY t.updated_at LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("listing tasks due for an anchor: %w", err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.TaskRef, error) {
		var ref app.TaskRef
		return ref, r.Scan(&ref.Tenant, &ref.TaskID)
	})
	if err != nil {
		return nil, fmt.Errorf("listing tasks due for an anchor: %w", err)
	}
	return refs, nil
}

// InsertAnchor implements app.Tx.
func (t *pgTx) InsertAnchor(ctx context.Context, a *app.AnchorRecord) error {
	t.queue(`INSERT INTO audit_anchor (tenant_id, task_id, seq, digest, history_sha256, reason, key_id, statement, anchored_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (task_id, seq) DO NOTHING`,
		a.Tenant, a.TaskID, a.Seq, a.Digest, a.HistorySHA256, a.Reason, a.KeyID, a.Statement, a.AnchoredAt)
	return nil
}
