package app

import (
	"context"
	"time"

	"github.com/originweave/bap/server/internal/task"
)

// Task origins: how a task came to run, for the operator's task list (bap tasks list, the console).
const (
	// OriginInteractive: a client sends each command.
	OriginInteractive = "interactive"
	// OriginDelegated: the server runs the plan create_task carried (ADR 0011).
	OriginDelegated = "delegated"
	// OriginAutonomous: the planner model proposes each step (ADR 0013).
	OriginAutonomous = "autonomous"
)

// TaskFilter narrows the operator's task list. Zero fields do not filter.
type TaskFilter struct {
	// State is one task state.
	State task.State
	// Origin is OriginInteractive, OriginDelegated or OriginAutonomous.
	Origin string
	// CreatedAfter keeps tasks created after it (the list's "age").
	CreatedAfter time.Time
	// Before keeps tasks created before it: the page cursor (the last created_at seen).
	Before time.Time
	// Limit is at most this many (1–500; 0 is 100).
	Limit int
}

// Origin says how t came to run (OriginInteractive, OriginDelegated or OriginAutonomous).
func (t *Task) Origin() string {
	switch {
	case t.Mode == ModeAutonomous:
		return OriginAutonomous
	case len(t.Plan) > 0:
		return OriginDelegated
	default:
		return OriginInteractive
	}
}

// ListTasks lists the actor's tenant's tasks, newest first, narrowed by f.
func (s *Service) ListTasks(ctx context.Context, actor Actor, f TaskFilter) ([]*Task, error) {
	if f.State != "" && !f.State.Valid() {
		return nil, Errorf(CodeInvalidRequest, "state %q is not a task state", f.State)
	}
	switch f.Origin {
	case "", OriginInteractive, OriginDelegated, OriginAutonomous:
	default:
		return nil, Errorf(CodeInvalidRequest, "origin must be interactive, delegated or autonomous")
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 1 || f.Limit > 500 {
		return nil, Errorf(CodeInvalidRequest, "limit must be between 1 and 500")
	}
	return s.store.ListTasks(ctx, actor.Tenant, f)
}

// clipRunes cuts s to at most n runes (a column's bound), never inside a character.
func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}
