package store

import (
	"context"
	"fmt"

	"github.com/originweave/bap/server/internal/app"
)

// InsertArtifact implements app.Tx. The content is stored once per digest; every capture gets its
// own reference.
func (t *pgTx) InsertArtifact(ctx context.Context, a *app.Artifact, content []byte) error {
	t.queue(`INSERT INTO artifact_content (sha256, size, content) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING`,
		a.SHA256, int64(len(content)), content)
	t.queue(`INSERT INTO artifact_reference (tenant_id, artifact_id, sha256, media_type, kind, task_id, session_id,
			epoch_id, command_id, source_url, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		a.Tenant, a.ID, a.SHA256, a.MediaType, a.Kind, a.TaskID, nullIfEmpty(a.SessionID), nullIfEmpty(a.EpochID),
		nullIfEmpty(a.CommandID), a.SourceURL, a.CreatedAt)
	return nil
}

// GetArtifact implements app.Store.
func (s *Store) GetArtifact(ctx context.Context, tenant, artifactID string) (*app.Artifact, []byte, error) {
	var a app.Artifact
	var content []byte
	err := s.pool.QueryRow(ctx, `SELECT r.tenant_id, r.artifact_id, r.sha256, c.size, r.media_type, r.kind, r.task_id,
			coalesce(r.session_id, ''), coalesce(r.epoch_id, ''), coalesce(r.command_id, ''), r.source_url, r.created_at, c.content
		FROM artifact_reference r JOIN artifact_content c ON c.sha256 = r.sha256
		WHERE r.tenant_id = $1 AND r.artifact_id = $2`, tenant, artifactID).
		Scan(&a.Tenant, &a.ID, &a.SHA256, &a.Size, &a.MediaType, &a.Kind, &a.TaskID, &a.SessionID, &a.EpochID,
			&a.CommandID, &a.SourceURL, &a.CreatedAt, &content)
	if err != nil {
		return nil, nil, translate(err)
	}
	utc(&a.CreatedAt)
	return &a, content, nil
}

// ArtifactChain implements app.Store.
func (s *Store) ArtifactChain(ctx context.Context, a *app.Artifact) (*app.ArtifactChain, error) {
	var c app.ArtifactChain
	err := s.pool.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM agent_task WHERE tenant_id = $1 AND task_id = $2),
			$3 = '' OR EXISTS (SELECT 1 FROM browser_session WHERE tenant_id = $1 AND session_id = $3 AND task_id = $2),
			$4 = '' OR EXISTS (SELECT 1 FROM document_epoch e JOIN browsing_context x ON x.context_id = e.context_id
				WHERE e.tenant_id = $1 AND e.epoch_id = $4 AND x.tenant_id = $1 AND x.session_id = $3),
			$5 = '' OR EXISTS (SELECT 1 FROM task_command WHERE tenant_id = $1 AND command_id = $5 AND task_id = $2),
			coalesce((SELECT receipt_id FROM task_receipt WHERE tenant_id = $1 AND command_id = $5), '')`,
		a.Tenant, a.TaskID, a.SessionID, a.EpochID, a.CommandID).
		Scan(&c.TaskOK, &c.SessionOK, &c.EpochOK, &c.CommandOK, &c.ReceiptID)
	if err != nil {
		return nil, fmt.Errorf("checking the provenance of %s: %w", a.ID, err)
	}
	return &c, nil
}
