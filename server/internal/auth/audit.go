package auth

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/app"
)

// Audit writes authorization decisions to auth_decision in the background, in both profiles
// (ADR 0021): recording never
// blocks a request (the queue is bounded; when it is full the decision is dropped and counted), and
// a flood of requests costs one INSERT per flush, not one statement or round trip each.
// RecordAuthDecision is safe for concurrent use; Start and Stop follow the Start/Stop contract of
// background services (Stop waits until everything queued is written or its context ends).
type Audit struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	queue   chan app.AuthDecision
	dropped atomic.Int64
	stop    chan struct{}
	flushes chan chan struct{}
	running atomic.Bool
	done    sync.WaitGroup
	once    sync.Once
}

// NewAudit returns an audit writer on pool.
func NewAudit(pool *pgxpool.Pool, log *slog.Logger) *Audit {
	if log == nil {
		log = slog.Default()
	}
	return &Audit{pool: pool, log: log, queue: make(chan app.AuthDecision, 4096), stop: make(chan struct{}),
		flushes: make(chan chan struct{})}
}

// RecordAuthDecision queues d.
func (a *Audit) RecordAuthDecision(_ context.Context, d app.AuthDecision) {
	if d.Time.IsZero() {
		d.Time = time.Now()
	}
	select {
	case a.queue <- d:
	default:
		a.dropped.Add(1)
	}
}

// Dropped counts decisions dropped because the queue was full.
func (a *Audit) Dropped() int64 { return a.dropped.Load() }

// Start runs the writer until Stop.
func (a *Audit) Start(ctx context.Context) error {
	a.done.Add(1)
	a.running.Store(true)
	go func() {
		defer a.done.Done()
		ctx := context.WithoutCancel(ctx)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		// Purge at start too: a node restarted more often than hourly would otherwise never purge.
		a.purge(ctx)
		purge := time.NewTicker(time.Hour)
		defer purge.Stop()
		var batch []app.AuthDecision
		for {
			select {
			case d := <-a.queue:
				batch = append(batch, d)
				if len(batch) >= 500 {
					batch = a.flush(ctx, batch)
				}
			case <-tick.C:
				batch = a.flush(ctx, batch)
			case <-purge.C:
				a.purge(ctx)
			case done := <-a.flushes:
				batch = a.drain(ctx, batch)
				close(done)
			case <-a.stop:
				a.drain(ctx, batch)
				return
			}
		}
	}()
	return nil
}

// Stop writes what is queued and stops the writer.
func (a *Audit) Stop() {
	a.once.Do(func() { close(a.stop) })
	a.done.Wait()
}

// Flush writes everything queued so far and returns when it is written (tests, shutdown).
func (a *Audit) Flush(ctx context.Context) {
	if !a.running.Load() {
		a.drain(ctx, nil)
		return
	}
	done := make(chan struct{})
	select {
	case a.flushes <- done:
		<-done
	case <-ctx.Done():
	}
}

// drain writes batch and everything queued.
func (a *Audit) drain(ctx context.Context, batch []app.AuthDecision) []app.AuthDecision {
	for {
		select {
		case d := <-a.queue:
			batch = append(batch, d)
		default:
			return a.flush(ctx, batch)
		}
	}
}

func (a *Audit) flush(ctx context.Context, batch []app.AuthDecision) []app.AuthDecision {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n := len(batch)
	times := make([]time.Time, n)
	tenants, subjects, clients, ops, scopes, outcomes, reasons, points := make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	tasks, vias := make([]*string, n), make([]*string, n)
	sessions, approvals := make([]string, n), make([]string, n)
	for i := range batch {
		d := &batch[i]
		point := d.Point
		if point == "" {
			point = app.PointRequest
		}
		times[i], tenants[i], subjects[i], clients[i], ops[i], scopes[i], outcomes[i], reasons[i], points[i] =
			d.Time, d.Tenant, d.Subject, d.ClientID, d.Operation, d.Scope, d.Outcome, d.Reason, point
		tasks[i], vias[i], sessions[i], approvals[i] = strOrNil(d.TaskID), strOrNil(d.Via), d.SessionID, d.ApprovalID
	}
	// One statement for the whole batch, in the order the decisions were made: a statement's fixed
	// cost (its executor, its ten CHECK expressions) is paid once per flush, not once per request.
	// A tenant the database does not know is recorded as none. A route that names a session or an
	// approval, not a task (/browser-sessions/{id}…, /approvals/{id}…), is bound to the task that
	// session or approval belongs to, in the caller's tenant only: an id of another tenant's binds
	// nothing.
	if _, err := a.pool.Exec(ctx, `INSERT INTO auth_decision (occurred_at, tenant_id, subject, client_id, operation, task_id, scope,
			outcome, reason, decision_point, via, session_id, approval_id)
		SELECT d.occurred_at, t.tenant_id, d.subject, d.client_id, d.operation,
			coalesce(d.task_id,
				(SELECT s.task_id FROM browser_session s WHERE s.session_id = ids.session_id AND s.tenant_id = d.tenant_id),
				(SELECT r.task_id FROM approval_request r WHERE r.approval_id = ids.approval_id AND r.tenant_id = d.tenant_id)),
			d.scope, d.outcome, left(d.reason, 200), d.decision_point, d.via, ids.session_id, ids.approval_id
		FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
				$9::text[], $10::text[], $11::text[], $12::text[], $13::text[])
			WITH ORDINALITY AS d (occurred_at, tenant_id, subject, client_id, operation, task_id, scope, outcome, reason,
				decision_point, via, session_id, approval_id, n)
		CROSS JOIN LATERAL (SELECT
			CASE WHEN d.session_id ~ '^bs_[A-Za-z0-9_-]{1,64}$' THEN d.session_id END AS session_id,
			CASE WHEN d.approval_id ~ '^apr_[A-Za-z0-9_-]{1,64}$' THEN d.approval_id END AS approval_id) AS ids
		LEFT JOIN tenant_account t ON t.tenant_id = d.tenant_id
		ORDER BY d.n`,
		times, tenants, subjects, clients, ops, tasks, scopes, outcomes, reasons, points, vias, sessions, approvals); err != nil {
		a.log.Warn("writing the audit trail failed", "decisions", len(batch), "err", err)
	}
	return batch[:0]
}

// strOrNil is s, or NULL when it is empty (an element of a text[] parameter).
func strOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Retention is how long the audit trail keeps a decision.
const Retention = 90 * 24 * time.Hour

// purge deletes the decisions older than Retention (every node's writer does it; the DELETE is
// idempotent).
func (a *Audit) purge(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := a.pool.Exec(ctx, `DELETE FROM auth_decision WHERE occurred_at < $1`, time.Now().Add(-Retention)); err != nil {
		a.log.Warn("purging old audit entries failed", "err", err)
	}
}
