package store

import (
	"context"
	"fmt"

	"github.com/originweave/bap/server/internal/app"
)

// ListDeadLetters implements app.Store. The step's op and the problem's detail come from the
// evidence document the plan runner wrote; the rest of that document stays in the database.
func (s *Store) ListDeadLetters(ctx context.Context, tenant string, limit int) ([]app.DeadLetterRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT dead_letter_id, task_id, coalesce(command_id, ''), step_index,
			coalesce(evidence->>'op', ''), reason, coalesce(problem_code, ''),
			coalesce(evidence->'problem'->>'detail', ''), attempts, coalesce(artifact_id, ''), created_at
		FROM dead_letter_record WHERE tenant_id = $1 ORDER BY created_at DESC, dead_letter_id DESC LIMIT $2`, tenant, limit)
	if err != nil {
		return nil, fmt.Errorf("listing dead letters: %w", err)
	}
	defer rows.Close()
	out := []app.DeadLetterRecord{}
	for rows.Next() {
		var d app.DeadLetterRecord
		var code string
		if err := rows.Scan(&d.ID, &d.TaskID, &d.CommandID, &d.StepIndex, &d.Op, &d.Reason, &code, &d.Detail, &d.Attempts,
			&d.ArtifactID, &d.CreatedAt); err != nil {
			return nil, fmt.Errorf("listing dead letters: %w", err)
		}
		d.ProblemCode, d.CreatedAt = app.Code(code), d.CreatedAt.UTC()
		out = append(out, d)
	}
	return out, rows.Err()
}
