package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/originweave/bap/server/internal/app"
)

// ListTasks implements app.Store: newest first, narrowed by f (agent_task_tenant_created_idx
// keeps it an index scan per tenant).
func (s *Store) ListTasks(ctx context.Context, tenant string, f app.TaskFilter) ([]*app.Task, error) {
	q := `SELECT ` + taskColumns + ` FROM agent_task t WHERE t.tenant_id = $1`
	args := []any{tenant}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.State != "" {
		q += ` AND t.state = ` + arg(string(f.State))
	}
	switch f.Origin {
	case app.OriginAutonomous:
		q += ` AND t.mode = 'autonomous'`
	case app.OriginDelegated:
		q += ` AND t.mode <> 'autonomous' AND EXISTS (SELECT 1 FROM task_plan_step p WHERE p.task_id = t.task_id)`
	case app.OriginInteractive:
		q += ` AND t.mode <> 'autonomous' AND NOT EXISTS (SELECT 1 FROM task_plan_step p WHERE p.task_id = t.task_id)`
	}
	if !f.CreatedAfter.IsZero() {
		q += ` AND t.created_at > ` + arg(f.CreatedAfter)
	}
	if !f.Before.IsZero() {
		q += ` AND t.created_at < ` + arg(f.Before)
	}
	q += ` ORDER BY t.created_at DESC, t.task_id DESC LIMIT ` + arg(f.Limit)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing tasks: %w", err)
	}
	defer rows.Close()
	var out []*app.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("listing tasks: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing tasks: %w", err)
	}
	return out, nil
}
