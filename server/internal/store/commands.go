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

// ClaimIdempotency implements app.Tx. The INSERT waits on the unique key while another
// transaction holds it, so of many concurrent requests with one key exactly one claims it and the
// others see its committed record.
//
// As the first statement of an optimistic transaction (InTx) the claim is only queued and
// reported as made: it is sent at the head of the transaction's first pipeline, as a plain INSERT
// that fails on a taken key, and merged with CompleteIdempotency into one completed row when
// the command reads nothing in between. A taken key, or a command that fails before the claim was
// sent, runs the transaction again with the claim below.
func (t *pgTx) ClaimIdempotency(ctx context.Context, c app.IdempotencyClaim) (*app.IdempotencyClaim, bool, error) {
	if t.optimistic && !t.begun && t.claim == nil && t.batch.Len() == 0 && len(t.newTasks) == 0 && len(t.pendingEvents) == 0 {
		t.claim = &queuedClaim{c: c}
		return nil, true, nil
	}
	if !t.begun && t.batch.Len() == 0 && len(t.newTasks) == 0 && len(t.pendingEvents) == 0 {
		// Claimed first after the queued claim found the key taken (or the command failed before
		// sending it): the key is most likely recorded, so its record is read first, before BEGIN.
		// A committed record answers at once (a replay, 409 or 422, decided by the caller) and
		// the transaction sends nothing more; a key with no committed record is claimed below,
		// where the INSERT waits for a concurrent first request that holds the key.
		ex, err := readIdempotency(ctx, t.conn, c.Tenant, c.Key)
		if err == nil {
			return ex, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, false, fmt.Errorf("reading claimed key: %w", err)
		}
	}
	q, err := t.q(ctx)
	if err != nil {
		return nil, false, err
	}
	for attempt := 0; attempt < 3; attempt++ {
		tag, err := q.Exec(ctx, `INSERT INTO idempotency_record (tenant_id, idempotency_key, operation, request_hash,
			request_hash_scheme, state, command_id, node_id, expires_at) VALUES ($1, $2, $3, $4, 'hmac-sha256', 'in_flight', $5, $6, $7)
			ON CONFLICT DO NOTHING`,
			c.Tenant, c.Key, c.Operation, c.Fingerprint[:], c.CommandID, nullIfEmpty(c.NodeID), c.ExpiresAt)
		if err != nil {
			return nil, false, fmt.Errorf("claiming key: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return nil, true, nil
		}
		ex, err := readIdempotency(ctx, q, c.Tenant, c.Key)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // purged between the two statements: claim again
		}
		if err != nil {
			return nil, false, fmt.Errorf("reading claimed key: %w", err)
		}
		return ex, false, nil
	}
	return nil, false, errors.New("claiming key: record kept disappearing")
}

// IdempotencyRecord implements app.Store.
func (s *Store) IdempotencyRecord(ctx context.Context, tenant, key string) (*app.IdempotencyClaim, error) {
	ex, err := readIdempotency(ctx, s.pool, tenant, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, app.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading idempotency record: %w", err)
	}
	return ex, nil
}

// readIdempotency reads the record of tenant's key; pgx.ErrNoRows when there is none.
func readIdempotency(ctx context.Context, q rowQuerier, tenant, key string) (*app.IdempotencyClaim, error) {
	var ex app.IdempotencyClaim
	var hash []byte
	var state, scheme string
	var status *int
	var nodeID *string
	err := q.QueryRow(ctx, `SELECT tenant_id, idempotency_key, operation, request_hash, request_hash_scheme, state, command_id, node_id,
		response_status, response_body, expires_at FROM idempotency_record
		WHERE tenant_id = $1 AND idempotency_key = $2`, tenant, key).
		Scan(&ex.Tenant, &ex.Key, &ex.Operation, &hash, &scheme, &state, &ex.CommandID, &nodeID, &status, &ex.Body, &ex.ExpiresAt)
	if err != nil {
		return nil, err
	}
	copy(ex.Fingerprint[:], hash)
	ex.LegacyFingerprint = scheme != "hmac-sha256" // written before ADR 0015: unkeyed
	ex.Completed = state == "completed"
	if status != nil {
		ex.Status = *status
	}
	if nodeID != nil {
		ex.NodeID = *nodeID
	}
	return &ex, nil
}

// queuedClaim is an optimistic idempotency claim not yet sent (or sent in the pipeline inFlight).
type queuedClaim struct {
	c        app.IdempotencyClaim
	sent     bool
	inFlight *pgx.Batch
	// done holds the command's response once CompleteIdempotency was called before the claim
	// was sent: the record is then written completed, in one INSERT.
	done   bool
	status int
	body   []byte
}

// queue adds the claim's INSERT to b. No ON CONFLICT: a taken key fails the pipeline (InTx then
// claims again, answered first).
func (q *queuedClaim) queue(b *pgx.Batch) {
	c := q.c
	if q.done {
		b.Queue(`INSERT INTO idempotency_record (tenant_id, idempotency_key, operation, request_hash, request_hash_scheme,
			state, command_id, node_id, expires_at, response_status, response_body, completed_at)
			VALUES ($1, $2, $3, $4, 'hmac-sha256', 'completed', $5, $6, $7, $8, $9, now())`,
			c.Tenant, c.Key, c.Operation, c.Fingerprint[:], c.CommandID, nullIfEmpty(c.NodeID), c.ExpiresAt, q.status, q.body)
		return
	}
	b.Queue(`INSERT INTO idempotency_record (tenant_id, idempotency_key, operation, request_hash,
		request_hash_scheme, state, command_id, node_id, expires_at) VALUES ($1, $2, $3, $4, 'hmac-sha256', 'in_flight', $5, $6, $7)`,
		c.Tenant, c.Key, c.Operation, c.Fingerprint[:], c.CommandID, nullIfEmpty(c.NodeID), c.ExpiresAt)
}

// CompleteIdempotency implements app.Tx.
func (t *pgTx) CompleteIdempotency(ctx context.Context, tenant, key string, status int, body []byte) error {
	if c := t.claim; c != nil && !c.sent && c.c.Tenant == tenant && c.c.Key == key {
		c.done, c.status, c.body = true, status, body
		return nil
	}
	t.queue(`UPDATE idempotency_record SET state = 'completed', response_status = $3, response_body = $4,
		completed_at = now() WHERE tenant_id = $1 AND idempotency_key = $2`, tenant, key, status, body)
	return nil
}

// PurgeIdempotency implements app.Store.
func (s *Store) PurgeIdempotency(ctx context.Context, now time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_record WHERE state = 'completed' AND expires_at <= $1`, now)
	if err != nil {
		return 0, fmt.Errorf("purging idempotency records: %w", err)
	}
	return tag.RowsAffected(), nil
}

// AppendEvent implements app.Tx: the history row with the transaction's next pipeline (all of a
// pipeline's history rows in one INSERT), the outbox message (one per task of the command, see
// outbox.go) just before commit, both in this transaction.
func (t *pgTx) AppendEvent(ctx context.Context, e *app.Event) error {
	data := e.DataJSON
	if data == nil {
		var err error
		if data, err = json.Marshal(e.Data); err != nil {
			return fmt.Errorf("encoding event data: %w", err)
		}
	}
	t.pendingEvents = append(t.pendingEvents, queuedEvent{e: *e, data: string(data)})
	t.events = append(t.events, *e)
	return nil
}

// queueEvents adds one INSERT of evs (in order: the seq trigger checks each row against the one
// before it) to b.
func queueEvents(b *pgx.Batch, evs []queuedEvent) {
	n := len(evs)
	tenants, tasks, ids, types, actors, causes := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	commands := make([]*string, n)
	seqs := make([]int64, n)
	times := make([]time.Time, n)
	data := make([]string, n)
	prevs, digests := make([][]byte, n), make([][]byte, n)
	for i, q := range evs {
		e := &evs[i].e
		if e.CommandID != "" {
			commands[i] = &e.CommandID
		}
		prevs[i], digests[i] = e.PrevDigest, e.Digest
		tenants[i], tasks[i], seqs[i], ids[i], types[i], times[i], actors[i], causes[i], data[i] =
			e.Tenant, e.TaskID, e.Seq, e.ID, e.Type, e.Time, e.Actor, e.Cause, q.data
	}
	b.Queue(`INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, occurred_at, actor, cause, command_id, data, prev_digest, digest)
		SELECT tenant_id, task_id, seq, event_id, event_type, occurred_at, actor, cause, command_id, data::jsonb, prev_digest, digest
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bytea[], $12::bytea[])
			AS e (tenant_id, task_id, seq, event_id, event_type, occurred_at, actor, cause, command_id, data, prev_digest, digest)`,
		tenants, tasks, seqs, ids, types, times, actors, causes, commands, data, prevs, digests)
}

// queuedEvent is a history row not yet sent, its data encoded.
type queuedEvent struct {
	e    app.Event
	data string
}

// RecordCommand implements app.Tx.
func (t *pgTx) RecordCommand(ctx context.Context, c *app.Command) error {
	t.queue(`INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting, node_id, recorded_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		c.Tenant, c.ID, c.TaskID, c.Operation, c.Actor, c.SideEffecting, nullIfEmpty(c.NodeID), c.RecordedAt)
	return nil
}

// IssueReceipt implements app.Tx: a VALUES row, which merges with other commands' receipts in a
// group commit (mergesql.go).
func (t *pgTx) IssueReceipt(ctx context.Context, tenant string, r *app.Receipt) error {
	t.queue(`INSERT INTO task_receipt (tenant_id, receipt_id, command_id, outcome, problem_code, detail, issued_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		tenant, r.ID, r.CommandID, string(r.Outcome), nullIfEmpty(string(r.ProblemCode)), r.Detail, r.IssuedAt)
	return nil
}

const approvalColumns = `a.tenant_id, a.approval_id, a.task_id, a.command_id, a.state, a.reason, coalesce(a.effect, ''),
	a.requested_by, coalesce(a.requested_client, ''), coalesce(a.on_behalf_of, ''), coalesce(a.on_behalf_client, ''),
	a.requested_at, a.expires_at, a.channel, coalesce(a.held_method, ''), coalesce(a.held_url, ''),
	coalesce(a.screenshot_artifact_id, ''), a.closed_at, d.decision, d.decided_by, d.channel, d.reason, d.decided_at,
	a.action_digest, d.decided_client`

const approvalFrom = ` FROM approval_request a LEFT JOIN approval_decision_current d ON d.approval_id = a.approval_id`

func scanApproval(row pgx.Row) (*app.Approval, error) {
	var a app.Approval
	var state string
	var decision, decidedBy, via, reason, workload *string
	var decidedAt *time.Time
	if err := row.Scan(&a.Tenant, &a.ID, &a.TaskID, &a.CommandID, &state, &a.Reason, &a.Effect,
		&a.RequestedBy, &a.RequestedClient, &a.OnBehalfOf, &a.OnBehalfClient,
		&a.RequestedAt, &a.ExpiresAt, &a.Channel, &a.HeldMethod, &a.HeldURL, &a.ScreenshotArtifactID, &a.ClosedAt, &decision, &decidedBy, &via, &reason, &decidedAt,
		&a.Digest, &workload); err != nil {
		return nil, translate(err)
	}
	a.State = task.ApprovalState(state)
	utc(&a.RequestedAt)
	utc(&a.ExpiresAt)
	utcp(a.ClosedAt)
	if decision != nil {
		a.Decision = &app.Decision{Decision: *decision, DecidedBy: *decidedBy, Via: *via, Reason: *reason, DecidedAt: decidedAt.UTC()}
		if workload != nil {
			a.Decision.Workload = *workload
		}
	}
	return &a, nil
}

// InsertApproval implements app.Tx.
func (t *pgTx) InsertApproval(ctx context.Context, a *app.Approval) error {
	var digest any
	if len(a.Digest) > 0 {
		digest = a.Digest
	}
	channel := a.Channel
	if channel == "" {
		channel = app.ApprovalChannelApprover
	}
	t.queue(`INSERT INTO approval_request (tenant_id, approval_id, task_id, command_id, state, reason, effect, action_digest,
		requested_by, requested_client, on_behalf_of, on_behalf_client, requested_at, expires_at, channel,
		held_method, held_url, screenshot_artifact_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)`,
		a.Tenant, a.ID, a.TaskID, a.CommandID, string(a.State), a.Reason, nullIfEmpty(a.Effect), digest, a.RequestedBy,
		nullIfEmpty(a.RequestedClient), nullIfEmpty(a.OnBehalfOf), nullIfEmpty(a.OnBehalfClient), a.RequestedAt, a.ExpiresAt, channel,
		nullIfEmpty(a.HeldMethod), nullIfEmpty(a.HeldURL), nullIfEmpty(a.ScreenshotArtifactID))
	return nil
}

// GetApproval implements app.Tx.
func (t *pgTx) GetApproval(ctx context.Context, tenant, approvalID string) (*app.Approval, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	return scanApproval(q.QueryRow(ctx, `SELECT `+approvalColumns+approvalFrom+` WHERE a.tenant_id = $1 AND a.approval_id = $2`, tenant, approvalID))
}

// GetApproval implements app.Store.
func (s *Store) GetApproval(ctx context.Context, tenant, approvalID string) (*app.Approval, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalColumns+approvalFrom+` WHERE a.tenant_id = $1 AND a.approval_id = $2`, tenant, approvalID))
	if err != nil {
		return nil, err
	}
	return a, attachDecisions(ctx, s.pool, tenant, []*app.Approval{a})
}

// LockApproval implements app.Tx.
func (t *pgTx) LockApproval(ctx context.Context, tenant, approvalID string) (*app.Approval, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	a, err := scanApproval(q.QueryRow(ctx, `SELECT `+approvalColumns+approvalFrom+` WHERE a.tenant_id = $1 AND a.approval_id = $2
		FOR UPDATE OF a`, tenant, approvalID))
	if err != nil {
		return nil, err
	}
	return a, attachDecisions(ctx, q, tenant, []*app.Approval{a}) // a decided one's chain (0015)
}

// PendingApprovals implements app.Tx.
func (t *pgTx) PendingApprovals(ctx context.Context, tenant, taskID string) ([]*app.Approval, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT `+approvalColumns+approvalFrom+`
		WHERE a.tenant_id = $1 AND a.task_id = $2 AND a.state = 'pending' ORDER BY a.requested_at FOR UPDATE OF a`, tenant, taskID)
	if err != nil {
		return nil, fmt.Errorf("reading pending approvals: %w", err)
	}
	defer rows.Close()
	var out []*app.Approval
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("reading pending approvals: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// CloseApproval implements app.Tx.
func (t *pgTx) CloseApproval(ctx context.Context, a *app.Approval, commandID string) error {
	t.queue(`UPDATE approval_request SET state = $3, closed_at = $4 WHERE tenant_id = $1 AND approval_id = $2`,
		a.Tenant, a.ID, string(a.State), a.ClosedAt)
	if a.Decision != nil {
		via := a.Decision.Via
		if via == "" {
			via = app.ViaAPI
		}
		t.queue(`INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, decided_client, channel, reason, command_id, decided_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			a.Tenant, a.ID, a.Decision.Decision, a.Decision.DecidedBy, nullIfEmpty(a.Decision.Workload), via, a.Decision.Reason, commandID, a.Decision.DecidedAt)
	}
	return nil
}

// DueApprovals implements app.Store.
func (s *Store) DueApprovals(ctx context.Context, now time.Time, limit int) ([]app.ApprovalRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, task_id, approval_id FROM approval_request
		WHERE state = 'pending' AND expires_at <= $1 ORDER BY expires_at LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("listing due approvals: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.ApprovalRef, error) {
		var ref app.ApprovalRef
		err := r.Scan(&ref.Tenant, &ref.TaskID, &ref.ApprovalID)
		return ref, err
	})
}

// ListApprovals implements app.Store.
func (s *Store) ListApprovals(ctx context.Context, tenant string, state task.ApprovalState, limit int) ([]*app.Approval, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+approvalColumns+approvalFrom+`
		WHERE a.tenant_id = $1 AND a.state = $2 ORDER BY a.requested_at, a.approval_id LIMIT $3`, tenant, string(state), limit)
	if err != nil {
		return nil, fmt.Errorf("listing approvals: %w", err)
	}
	defer rows.Close()
	out := []*app.Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("listing approvals: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing approvals: %w", err)
	}
	return out, attachDecisions(ctx, s.pool, tenant, out)
}

// RegisterNode implements app.Store.
func (s *Store) RegisterNode(ctx context.Context, n app.NodeInfo) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO runtime_node (node_id, advertise_url, software_version) VALUES ($1, $2, $3)
		ON CONFLICT (node_id) DO UPDATE SET heartbeat_at = now(), advertise_url = EXCLUDED.advertise_url, stopped_at = NULL`,
		n.ID, n.AdvertiseURL, n.SoftwareVersion)
	if err != nil {
		return fmt.Errorf("registering node: %w", err)
	}
	return nil
}

// StopNode implements app.Store. A node already stopped keeps the time it stopped: the next node
// of its data dir stops its predecessor again as it starts, which must not move that time.
func (s *Store) StopNode(ctx context.Context, nodeID string) error {
	_, err := s.pool.Exec(ctx, `UPDATE runtime_node SET stopped_at = COALESCE(stopped_at, now()) WHERE node_id = $1`, nodeID)
	if err != nil {
		return fmt.Errorf("marking node stopped: %w", err)
	}
	return nil
}

// StopNodesAt implements app.Store.
func (s *Store) StopNodesAt(ctx context.Context, advertiseURL, except string) ([]string, error) {
	if advertiseURL == "" {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `UPDATE runtime_node SET stopped_at = now()
		WHERE advertise_url = $1 AND node_id <> $2 AND stopped_at IS NULL RETURNING node_id`, advertiseURL, except)
	if err != nil {
		return nil, fmt.Errorf("marking stopped the nodes at this address: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("marking stopped the nodes at this address: %w", err)
	}
	return ids, nil
}

// OrphanedClaims implements app.Store.
func (s *Store) OrphanedClaims(ctx context.Context, staleBefore time.Time, limit int) ([]app.IdempotencyClaim, error) {
	rows, err := s.pool.Query(ctx, `SELECT r.tenant_id, r.idempotency_key, r.operation, r.command_id, coalesce(r.node_id, '')
		FROM idempotency_record r LEFT JOIN runtime_node n ON n.node_id = r.node_id
		WHERE r.state = 'in_flight'
		  AND (n.node_id IS NULL OR n.stopped_at IS NOT NULL OR n.heartbeat_at < $1)
		ORDER BY r.created_at LIMIT $2`, staleBefore, limit)
	if err != nil {
		return nil, fmt.Errorf("listing orphaned claims: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.IdempotencyClaim, error) {
		var c app.IdempotencyClaim
		err := r.Scan(&c.Tenant, &c.Key, &c.Operation, &c.CommandID, &c.NodeID)
		return c, err
	})
}

// DeleteIdempotency implements app.Tx.
func (t *pgTx) DeleteIdempotency(ctx context.Context, tenant, key string) error {
	t.queue(`DELETE FROM idempotency_record WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'in_flight'`, tenant, key)
	return nil
}

// LockCommand implements app.Tx.
func (t *pgTx) LockCommand(ctx context.Context, tenant, commandID string) (*app.Command, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	var c app.Command
	var node *string
	err = q.QueryRow(ctx, `SELECT c.tenant_id, c.command_id, c.task_id, c.operation, c.actor, c.side_effecting, c.node_id, c.recorded_at
		FROM task_command c WHERE c.tenant_id = $1 AND c.command_id = $2
		  AND NOT EXISTS (SELECT 1 FROM task_receipt r WHERE r.command_id = c.command_id)
		FOR UPDATE OF c`, tenant, commandID).
		Scan(&c.Tenant, &c.ID, &c.TaskID, &c.Operation, &c.Actor, &c.SideEffecting, &node, &c.RecordedAt)
	if err != nil {
		return nil, translate(err)
	}
	if node != nil {
		c.NodeID = *node
	}
	return &c, nil
}

// OpenReconciliation implements app.Tx.
func (t *pgTx) OpenReconciliation(ctx context.Context, tenant, reconciliationID, taskID, commandID string) error {
	t.queue(`INSERT INTO task_reconciliation (tenant_id, reconciliation_id, task_id, command_id)
		VALUES ($1, $2, $3, $4)`, tenant, reconciliationID, taskID, commandID)
	return nil
}
