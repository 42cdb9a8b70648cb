package store

import (
	"context"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// MCP Tasks-extension tasks bound to their BAP task (protocol_session_binding, migrations/0016,
// ADR 0019).

// errUnboundMCPTask: the call names no task or session of the tenant, so there is nothing to bind.
var errUnboundMCPTask = fmt.Errorf("the call names no task or session of its tenant: %w", app.ErrNotFound)

// BindMCPTask records a working MCP task. The BAP task is r.BAPTaskID or, when that is empty,
// the task of session r.SessionID; both are looked up within r.Tenant only. A binding recorded
// before (the same task id) is kept as it is.
func (s *Store) BindMCPTask(ctx context.Context, r app.MCPTaskRecord) error {
	tag, err := s.pool.Exec(ctx, `INSERT INTO protocol_session_binding (tenant_id, adapter_id, external_ref, task_id, session_id,
			subject, status, status_message, outcome, created_at, updated_at, expires_at, node_id, input_requests)
		SELECT $1, 'mcp', $2, t.task_id, nullif($4, ''), $5, $6, $7, $11, $8, $9, $10, nullif($12, ''), $13
		FROM agent_task t
		WHERE t.tenant_id = $1 AND t.task_id = coalesce(nullif($3, ''),
			(SELECT bs.task_id FROM browser_session bs WHERE bs.tenant_id = $1 AND bs.session_id = $4))
		ON CONFLICT (tenant_id, adapter_id, external_ref) DO NOTHING`,
		r.Tenant, r.ID, r.BAPTaskID, r.SessionID, r.Subject, r.Status, r.Message, r.Created, r.Updated, r.Expires, r.Outcome, r.NodeID,
		r.InputRequests)
	if err != nil {
		return fmt.Errorf("binding MCP task: %w", err)
	}
	if tag.RowsAffected() == 0 {
		var exists bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM protocol_session_binding
			WHERE tenant_id = $1 AND adapter_id = 'mcp' AND external_ref = $2)`, r.Tenant, r.ID).Scan(&exists); err != nil {
			return fmt.Errorf("binding MCP task: %w", err)
		}
		if !exists {
			return errUnboundMCPTask
		}
	}
	return nil
}

// UpdateMCPTask records a bound MCP task's status (working, input_required with its input
// requests) or its end (status, message and outcome); a task already ended keeps its first end.
func (s *Store) UpdateMCPTask(ctx context.Context, r app.MCPTaskRecord) error {
	_, err := s.pool.Exec(ctx, `UPDATE protocol_session_binding
		SET status = $4, status_message = $5, outcome = $6, updated_at = $7, input_requests = $8
		WHERE tenant_id = $1 AND adapter_id = 'mcp' AND external_ref = $2 AND subject = $3
			AND status IN ('working', 'input_required')`,
		r.Tenant, r.ID, r.Subject, r.Status, r.Message, r.Outcome, r.Updated, r.InputRequests)
	if err != nil {
		return fmt.Errorf("recording the end of an MCP task: %w", err)
	}
	return nil
}

// MCPTask reads the MCP task id of tenant's subject; app.ErrNotFound for an unknown id, an
// expired one, or one of another tenant or subject (the answers do not differ). RunnerGone is
// set when the node that runs it stopped or has not beaten since staleBefore.
func (s *Store) MCPTask(ctx context.Context, tenant, subject, id string, staleBefore time.Time) (*app.MCPTaskRecord, error) {
	r := app.MCPTaskRecord{Tenant: tenant, Subject: subject, ID: id}
	err := s.pool.QueryRow(ctx, `SELECT b.task_id, coalesce(b.session_id, ''), b.status, b.status_message, b.outcome, b.input_requests,
			b.created_at, b.updated_at, b.expires_at, coalesce(b.node_id, ''),
			b.node_id IS NOT NULL AND (n.stopped_at IS NOT NULL OR n.heartbeat_at < $4)
		FROM protocol_session_binding b LEFT JOIN runtime_node n ON n.node_id = b.node_id
		WHERE b.tenant_id = $1 AND b.adapter_id = 'mcp' AND b.external_ref = $2 AND b.subject = $3 AND b.expires_at > now()`,
		tenant, id, subject, staleBefore).
		Scan(&r.BAPTaskID, &r.SessionID, &r.Status, &r.Message, &r.Outcome, &r.InputRequests, &r.Created, &r.Updated, &r.Expires, &r.NodeID, &r.RunnerGone)
	if err != nil {
		return nil, translate(err)
	}
	utc(&r.Created)
	utc(&r.Updated)
	utc(&r.Expires)
	return &r, nil
}
