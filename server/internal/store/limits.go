package store

import (
	"context"
	"fmt"
)

// CountQueuedTasks implements app.Tx: the tenant's tasks waiting for admission (`created`, served
// by agent_task_waiting_idx) and its delegated tasks admitted but not yet started by a worker. The
// second part reads the tenant's active tasks (agent_task_active_idx); create_task asks only for a
// task that would wait itself.
func (t *pgTx) CountQueuedTasks(ctx context.Context, tenant string) (int, error) {
	q, err := t.q(ctx)
	if err != nil {
		return 0, err
	}
	var n int
	err = q.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM agent_task WHERE tenant_id = $1 AND state = 'created')
		+ (SELECT count(*) FROM agent_task a WHERE a.tenant_id = $1 AND a.state = 'admitted'
			AND (a.mode = 'autonomous' OR EXISTS (SELECT 1 FROM task_plan_step p WHERE p.task_id = a.task_id)))`, tenant).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting queued tasks: %w", err)
	}
	return n, nil
}

// Backlog is what waits in the database, for /metrics: read at scrape time, every node sees the
// same figures.
type Backlog struct {
	// AwaitingAdmission counts tasks in `created` (over their tenant's active-task cap).
	AwaitingAdmission int64
	// AwaitingWorker counts delegated tasks whose lease is unfinished and unclaimed.
	AwaitingWorker int64
	// Leased counts delegated tasks a worker holds a lease on.
	Leased int64
	// ExpiredLeases counts held leases past their expiry, not yet taken over.
	ExpiredLeases int64
	// LeaseExpiries is how many claims took over an expired lease, ever.
	LeaseExpiries int64
	// DeadLetters counts dead_letter_record rows.
	DeadLetters int64
	// Leases tells whether the lease figures were read (task_lease exists: migration 0006).
	Leases bool
}

// ReadBacklog reads the backlog. The lease figures are left out, with Leases false, while the
// database has no task_lease table (a node older than migration 0006 shares it).
func (s *Store) ReadBacklog(ctx context.Context) (Backlog, error) {
	var b Backlog
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM agent_task WHERE state = 'created'),
		(SELECT count(*) FROM dead_letter_record),
		to_regclass('task_lease') IS NOT NULL`).Scan(&b.AwaitingAdmission, &b.DeadLetters, &b.Leases)
	if err != nil {
		return b, fmt.Errorf("reading the backlog: %w", err)
	}
	if !b.Leases {
		return b, nil
	}
	err = s.pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE owner_node IS NULL),
		count(*) FILTER (WHERE owner_node IS NOT NULL),
		count(*) FILTER (WHERE owner_node IS NOT NULL AND expires_at < now()),
		(SELECT coalesce(sum(expiries), 0) FROM task_lease)
		FROM task_lease WHERE finished_at IS NULL`).Scan(&b.AwaitingWorker, &b.Leased, &b.ExpiredLeases, &b.LeaseExpiries)
	if err != nil {
		return b, fmt.Errorf("reading the lease backlog: %w", err)
	}
	return b, nil
}
