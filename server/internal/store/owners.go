package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// The directory of owner nodes (app.Owners, ADR 0012): which node holds a session, a held action
// or a task's browser work, with its advertised URL and whether it is alive.

var _ app.Owners = (*Store)(nil)

// nodeLive is the SQL test of a live node n (joined as n) against the stale cutoff $3.
const nodeLive = `(n.node_id IS NOT NULL AND n.stopped_at IS NULL AND n.heartbeat_at >= $3)`

func (s *Store) owner(ctx context.Context, what, query string, args ...any) (app.NodeRef, error) {
	var ref app.NodeRef
	err := s.pool.QueryRow(ctx, query, args...).Scan(&ref.NodeID, &ref.URL, &ref.Live)
	if errors.Is(err, pgx.ErrNoRows) {
		return app.NodeRef{}, nil
	}
	if err != nil {
		return app.NodeRef{}, fmt.Errorf("finding the owner of %s: %w", what, err)
	}
	return ref, nil
}

// SessionOwner implements app.Owners.
func (s *Store) SessionOwner(ctx context.Context, tenant, sessionID string, staleBefore time.Time) (app.NodeRef, error) {
	return s.owner(ctx, "a browser session", `SELECT coalesce(s.node_id, ''), coalesce(n.advertise_url, ''), `+nodeLive+`
		FROM browser_session s LEFT JOIN runtime_node n ON n.node_id = s.node_id
		WHERE s.tenant_id = $1 AND s.session_id = $2 AND s.state = 'open'`, tenant, sessionID, staleBefore)
}

// ApprovalOwner implements app.Owners: the node that recorded the held act (the node that holds
// the act's session, since session requests run on their owner).
func (s *Store) ApprovalOwner(ctx context.Context, tenant, approvalID string, staleBefore time.Time) (app.NodeRef, error) {
	return s.owner(ctx, "an approval", `SELECT coalesce(c.node_id, ''), coalesce(n.advertise_url, ''), `+nodeLive+`
		FROM approval_request a
		JOIN task_command c ON c.tenant_id = a.tenant_id AND c.command_id = a.command_id
		LEFT JOIN runtime_node n ON n.node_id = c.node_id
		WHERE a.tenant_id = $1 AND a.approval_id = $2 AND a.state = 'pending' AND a.effect IS NOT NULL`, tenant, approvalID, staleBefore)
}

// TaskOwner implements app.Owners.
func (s *Store) TaskOwner(ctx context.Context, tenant, taskID string, staleBefore time.Time) (app.NodeRef, error) {
	return s.owner(ctx, "a task's browser work", `SELECT coalesce(s.node_id, ''), coalesce(n.advertise_url, ''), `+nodeLive+`
		FROM browser_session s LEFT JOIN runtime_node n ON n.node_id = s.node_id
		WHERE s.tenant_id = $1 AND s.task_id = $2 AND s.state = 'open'
		ORDER BY (SELECT max(e.started_at) FROM browsing_context bc JOIN document_epoch e ON e.context_id = bc.context_id
		          WHERE bc.session_id = s.session_id) DESC NULLS LAST, s.created_at DESC
		LIMIT 1`, tenant, taskID, staleBefore)
}

// NodeLive implements app.Owners.
func (s *Store) NodeLive(ctx context.Context, nodeID string, staleBefore time.Time) (bool, error) {
	var live bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runtime_node
		WHERE node_id = $1 AND stopped_at IS NULL AND heartbeat_at >= $2)`, nodeID, staleBefore).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("reading node %s: %w", nodeID, err)
	}
	return live, nil
}
