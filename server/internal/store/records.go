package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// The protocol records and task results (migrations/0012, ADR 0019).

var _ app.RecordStore = (*Store)(nil)

// RecordHandles implements app.RecordStore: the context, the epoch and the handles in one
// transaction (the handle rows reference the epoch).
func (s *Store) RecordHandles(ctx context.Context, tenant, sessionID string, b app.HandleBatch) error {
	if len(b.Handles) == 0 || b.EpochID == "" || b.ContextID == "" {
		return nil
	}
	roles := b.Roles
	if len(roles) != len(b.Handles) {
		roles = make([]string, len(b.Handles))
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var batch pgx.Batch
		queueContext(&batch, tenant, sessionID, b.ContextID, b.Opener)
		queueEpoch(&batch, tenant, b.ContextID, b.EpochID, b.URL)
		batch.Queue(`INSERT INTO node_handle_record (tenant_id, node_handle_id, epoch_id, role)
			SELECT $1, h, $2, r FROM unnest($3::text[], $4::text[]) AS u (h, r)
			ON CONFLICT (epoch_id, node_handle_id) DO NOTHING`, tenant, b.EpochID, b.Handles, roles)
		return tx.SendBatch(ctx, &batch).Close()
	})
	if err != nil {
		return fmt.Errorf("recording %d node handles: %w", len(b.Handles), err)
	}
	return nil
}

// queueContext records a browsing context of a session; a context recorded before without its
// opener learns it.
func queueContext(b *pgx.Batch, tenant, sessionID, contextID, opener string) {
	b.Queue(`INSERT INTO browsing_context (tenant_id, context_id, session_id, opener_context_id)
		VALUES ($1, $2, $3, (SELECT context_id FROM browsing_context WHERE context_id = $4 AND session_id = $3))
		ON CONFLICT (context_id) DO UPDATE SET opener_context_id = EXCLUDED.opener_context_id
		WHERE browsing_context.opener_context_id IS NULL AND EXCLUDED.opener_context_id IS NOT NULL
			AND browsing_context.session_id = EXCLUDED.session_id`, tenant, contextID, sessionID, opener)
}

// queueEpoch records a document epoch; one recorded before without its URL learns it.
func queueEpoch(b *pgx.Batch, tenant, contextID, epochID, url string) {
	b.Queue(`INSERT INTO document_epoch (tenant_id, epoch_id, context_id, url) VALUES ($1, $2, $3, $4)
		ON CONFLICT (epoch_id) DO UPDATE SET url = EXCLUDED.url
		WHERE document_epoch.url = '' AND EXCLUDED.url <> '' AND document_epoch.context_id = EXCLUDED.context_id`,
		tenant, epochID, contextID, url)
}

// NodeHandle implements app.RecordStore.
func (s *Store) NodeHandle(ctx context.Context, tenant, handle, sessionID string) (*app.HandleRecord, error) {
	r := app.HandleRecord{Handle: handle}
	err := s.pool.QueryRow(ctx, `SELECT c.session_id, bs.state, h.epoch_id
		FROM node_handle_record h
		JOIN document_epoch e ON e.epoch_id = h.epoch_id
		JOIN browsing_context c ON c.context_id = e.context_id
		JOIN browser_session bs ON bs.session_id = c.session_id
		WHERE h.tenant_id = $1 AND h.node_handle_id = $2
		ORDER BY c.session_id = $3 DESC, h.created_at DESC LIMIT 1`, tenant, handle, sessionID).
		Scan(&r.SessionID, &r.SessionState, &r.EpochID)
	if err != nil {
		return nil, translate(err)
	}
	return &r, nil
}

// RecordAdapters implements app.RecordStore.
func (s *Store) RecordAdapters(ctx context.Context, nodeID string, adapters []app.ProtocolAdapter) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		b.Queue(`DELETE FROM node_protocol_adapter WHERE node_id = $1`, nodeID)
		for _, a := range adapters {
			b.Queue(`INSERT INTO protocol_adapter (adapter_id, name) VALUES ($1, $2)
				ON CONFLICT (adapter_id) DO UPDATE SET name = EXCLUDED.name WHERE protocol_adapter.name <> EXCLUDED.name`, a.ID, a.Name)
			b.Queue(`INSERT INTO node_protocol_adapter (node_id, adapter_id, protocol_version, implementation)
				VALUES ($1, $2, $3, $4)`, nodeID, a.ID, a.ProtocolVersion, a.Implementation)
		}
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return fmt.Errorf("recording the protocol adapters of node %s: %w", nodeID, err)
	}
	return nil
}

// NodeAdapters implements app.RecordStore.
func (s *Store) NodeAdapters(ctx context.Context, nodeID string) ([]app.ProtocolAdapter, error) {
	rows, err := s.pool.Query(ctx, `SELECT a.adapter_id, a.name, n.protocol_version, n.implementation
		FROM node_protocol_adapter n JOIN protocol_adapter a ON a.adapter_id = n.adapter_id
		WHERE n.node_id = $1 ORDER BY a.adapter_id`, nodeID)
	if err != nil {
		return nil, fmt.Errorf("reading protocol adapters: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.ProtocolAdapter, error) {
		var a app.ProtocolAdapter
		err := r.Scan(&a.ID, &a.Name, &a.ProtocolVersion, &a.Implementation)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading protocol adapters: %w", err)
	}
	return out, nil
}

const resultColumns = `r.tenant_id, r.task_id, r.command_id, r.summary, r.verification_state, r.verification_reason,
	r.through_seq, r.manifest_artifact_id, m.sha256, r.created_at`

func (s *Store) readResult(ctx context.Context, where string, args ...any) (*app.ResultRecord, error) {
	var r app.ResultRecord
	err := s.pool.QueryRow(ctx, `SELECT `+resultColumns+` FROM task_result r
		JOIN artifact_reference m ON m.artifact_id = r.manifest_artifact_id WHERE `+where, args...).
		Scan(&r.Tenant, &r.TaskID, &r.CommandID, &r.Summary, &r.VerificationState, &r.VerificationReason,
			&r.ThroughSeq, &r.ManifestArtifactID, &r.Digest, &r.CreatedAt)
	if err != nil {
		return nil, translate(err)
	}
	utc(&r.CreatedAt)
	rows, err := s.pool.Query(ctx, `SELECT `+artifactRefColumns+` FROM task_result_evidence x
		JOIN artifact_reference r ON r.artifact_id = x.artifact_id JOIN artifact_content c ON c.sha256 = r.sha256
		WHERE x.task_id = $1 ORDER BY x.position`, r.TaskID)
	if err != nil {
		return nil, fmt.Errorf("reading the evidence of %s's result: %w", r.TaskID, err)
	}
	if r.Evidence, err = pgx.CollectRows(rows, scanArtifactRef); err != nil {
		return nil, fmt.Errorf("reading the evidence of %s's result: %w", r.TaskID, err)
	}
	return &r, nil
}

// GetTaskResult implements app.RecordStore.
func (s *Store) GetTaskResult(ctx context.Context, tenant, taskID string) (*app.ResultRecord, error) {
	return s.readResult(ctx, `r.tenant_id = $1 AND r.task_id = $2`, tenant, taskID)
}

// TaskResultByManifest implements app.RecordStore.
func (s *Store) TaskResultByManifest(ctx context.Context, tenant, artifactID string) (*app.ResultRecord, error) {
	return s.readResult(ctx, `r.tenant_id = $1 AND r.manifest_artifact_id = $2`, tenant, artifactID)
}

// ManifestReceipts implements app.RecordStore.
func (s *Store) ManifestReceipts(ctx context.Context, tenant, taskID string, throughSeq int64) ([]app.ManifestReceipt, error) {
	return manifestReceipts(ctx, s.pool, tenant, taskID, throughSeq)
}

// ManifestReceipts implements app.ResultTx.
func (t *pgTx) ManifestReceipts(ctx context.Context, tenant, taskID string, throughSeq int64) ([]app.ManifestReceipt, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	return manifestReceipts(ctx, q, tenant, taskID, throughSeq)
}

// manifestReceipts reads the receipts as task_receipt holds them now, in the order the task's
// append-only history issued them.
func manifestReceipts(ctx context.Context, q Querier, tenant, taskID string, throughSeq int64) ([]app.ManifestReceipt, error) {
	rows, err := q.Query(ctx, `SELECT r.receipt_id, r.command_id, c.operation, r.outcome, coalesce(r.problem_code, '')
		FROM agent_task_event e
		JOIN task_receipt r ON r.tenant_id = e.tenant_id AND r.receipt_id = e.data->>'receipt_id'
		JOIN task_command c ON c.command_id = r.command_id
		WHERE e.tenant_id = $1 AND e.task_id = $2 AND e.event_type = 'receipt.issued' AND e.seq <= $3
		ORDER BY e.seq`, tenant, taskID, throughSeq)
	if err != nil {
		return nil, fmt.Errorf("reading the receipts of %s: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.ManifestReceipt, error) {
		var m app.ManifestReceipt
		err := r.Scan(&m.ReceiptID, &m.CommandID, &m.Operation, &m.Outcome, &m.ProblemCode)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the receipts of %s: %w", taskID, err)
	}
	return out, nil
}

const artifactRefColumns = `r.tenant_id, r.artifact_id, r.sha256, c.size, r.media_type, r.kind, r.task_id,
	coalesce(r.session_id, ''), coalesce(r.epoch_id, ''), coalesce(r.command_id, ''), r.source_url, r.created_at`

func scanArtifactRef(row pgx.CollectableRow) (*app.Artifact, error) {
	var a app.Artifact
	if err := row.Scan(&a.Tenant, &a.ID, &a.SHA256, &a.Size, &a.MediaType, &a.Kind, &a.TaskID, &a.SessionID, &a.EpochID,
		&a.CommandID, &a.SourceURL, &a.CreatedAt); err != nil {
		return nil, err
	}
	utc(&a.CreatedAt)
	return &a, nil
}

// TaskEvidence implements app.ResultTx.
func (t *pgTx) TaskEvidence(ctx context.Context, tenant, taskID string) ([]*app.Artifact, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT `+artifactRefColumns+` FROM artifact_reference r JOIN artifact_content c ON c.sha256 = r.sha256
		WHERE r.tenant_id = $1 AND r.task_id = $2 AND r.kind IN ('screenshot', 'dom_snapshot', 'ax_snapshot')
		ORDER BY r.created_at, r.artifact_id`, tenant, taskID)
	if err != nil {
		return nil, fmt.Errorf("reading the evidence of %s: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, scanArtifactRef)
	if err != nil {
		return nil, fmt.Errorf("reading the evidence of %s: %w", taskID, err)
	}
	return out, nil
}

// InsertTaskResult implements app.ResultTx.
func (t *pgTx) InsertTaskResult(ctx context.Context, r *app.ResultRecord) error {
	t.queue(`INSERT INTO task_result (tenant_id, task_id, command_id, summary, verification_state, verification_reason,
			through_seq, manifest_artifact_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, r.Tenant, r.TaskID, r.CommandID, r.Summary, r.VerificationState,
		r.VerificationReason, r.ThroughSeq, r.ManifestArtifactID, r.CreatedAt)
	for i, a := range r.Evidence {
		t.queue(`INSERT INTO task_result_evidence (tenant_id, task_id, position, artifact_id) VALUES ($1, $2, $3, $4)`,
			r.Tenant, r.TaskID, i, a.ID)
	}
	return nil
}
