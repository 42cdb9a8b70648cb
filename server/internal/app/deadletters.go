package app

import (
	"context"
	"time"
)

// DeadLetterRecord is one dead_letter_record row as the operator sees it (the console's Dead
// letters page): which task and step failed for good, after how many attempts, and why — the
// problem code and its detail, which never carry a secret's value. The row's evidence document
// is not part of it (a person reads the task's timeline and the screenshot artifact instead).
type DeadLetterRecord struct {
	ID          int64     `json:"dead_letter_id"`
	TaskID      string    `json:"task_id"`
	CommandID   string    `json:"command_id,omitempty"`
	StepIndex   *int      `json:"step_index,omitempty"`
	Op          string    `json:"op,omitempty"`
	Reason      string    `json:"reason"`
	ProblemCode Code      `json:"problem_code,omitempty"`
	Detail      string    `json:"detail,omitempty"`
	Attempts    int       `json:"attempts"`
	ArtifactID  string    `json:"artifact_id,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// ListDeadLetters lists the actor's tenant's dead letters, newest first, at most 200.
func (s *Service) ListDeadLetters(ctx context.Context, actor Actor) ([]DeadLetterRecord, error) {
	return s.store.ListDeadLetters(ctx, actor.Tenant, 200)
}
