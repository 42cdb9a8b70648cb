package app

import (
	"context"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/task"
)

// Reconciliation is an interrupted side-effecting command an operator must settle: did its effect
// happen (applied) or not (no_side_effect)? The command itself is never run again.
type Reconciliation struct {
	ID         string     `json:"reconciliation_id"`
	Tenant     string     `json:"tenant"`
	TaskID     string     `json:"task_id"`
	CommandID  string     `json:"command_id"`
	Operation  string     `json:"operation"`
	State      string     `json:"state"`
	Resolution string     `json:"resolution,omitempty"`
	Note       string     `json:"note,omitempty"`
	OpenedAt   time.Time  `json:"opened_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	ResolvedBy string     `json:"resolved_by,omitempty"`
}

// ListReconciliations lists reconciliations of every tenant, open ones only unless all is set
// (an operator's view: `bap reconcile list`).
func (s *Service) ListReconciliations(ctx context.Context, all bool) ([]Reconciliation, error) {
	return s.store.ListReconciliations(ctx, all)
}

// ResolveReconciliation settles an open reconciliation with the operator's finding and lets its
// task run again once none is left open.
func (s *Service) ResolveReconciliation(ctx context.Context, operator, id, outcome, note string) (*Reconciliation, error) {
	if outcome != string(task.Applied) && outcome != string(task.NoSideEffect) {
		return nil, Errorf(CodeInvalidRequest, "outcome must be applied or no_side_effect")
	}
	if len(note) > 2000 {
		return nil, Errorf(CodeInvalidRequest, "the note must be at most 2000 characters")
	}
	var out *Reconciliation
	err := s.store.InTx(ctx, func(tx Tx) error {
		peek, err := tx.GetReconciliation(ctx, id)
		if err != nil {
			return err
		}
		t, err := tx.LockTask(ctx, peek.Tenant, peek.TaskID)
		if err != nil {
			return err
		}
		rec, err := tx.GetReconciliation(ctx, id)
		if err != nil {
			return err
		}
		if rec.State != "open" {
			return Errorf(CodeInvalidTransition, "reconciliation %s is already %s", id, rec.State)
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: operator, Tenant: t.Tenant, Operation: "reconcile"}, t: t, now: s.cfg.Now()}
		now := c.now
		rec.State, rec.Resolution, rec.Note, rec.ResolvedAt, rec.ResolvedBy = "resolved", outcome, note, &now, operator
		if err := tx.ResolveReconciliation(ctx, rec); err != nil {
			return err
		}
		if err := c.emit(ctx, t, "reconciliation.resolved", "reconcile", map[string]any{
			"reconciliation_id": rec.ID, "command_id": rec.CommandID, "outcome": outcome,
		}); err != nil {
			return err
		}
		if t.State == task.WaitingForExternalInput {
			open, err := tx.CountOpenReconciliations(ctx, t.ID)
			if err != nil {
				return err
			}
			if open == 0 {
				if err := c.transition(ctx, t, task.ExternalInputResolved, "reconciliation resolved"); err != nil {
					return err
				}
			}
		}
		out = rec
		return tx.UpdateTask(ctx, t)
	})
	if err != nil {
		return nil, fmt.Errorf("resolving reconciliation %s: %w", id, err)
	}
	return out, nil
}
