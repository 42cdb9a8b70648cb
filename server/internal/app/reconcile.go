package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/task"
)

// Reconciliation is an interrupted side-effecting command an operator must settle: did its effect
// happen (applied) or not (no_side_effect)? The command itself is never run again. Its resolution
// is the current one of Resolutions: a correction adds a resolution that supersedes the one before
// (migration 0013), none is ever changed.
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
	// ResolutionID identifies the current resolution (0 while open); a new resolution written
	// with it set supersedes that one.
	ResolutionID int64 `json:"resolution_id,omitempty"`
	// Resolutions is the chain, oldest first: the first resolution and each correction of it.
	Resolutions []ReconciliationResolution `json:"resolutions"`
}

// ReconciliationResolution is one resolution of a reconciliation, as recorded.
type ReconciliationResolution struct {
	ID         int64     `json:"resolution_id"`
	Outcome    string    `json:"outcome"`
	Note       string    `json:"note"`
	ResolvedBy string    `json:"resolved_by"`
	ResolvedAt time.Time `json:"resolved_at"`
	// Supersedes is the resolution this one corrects (0 for the first).
	Supersedes int64 `json:"supersedes,omitempty"`
}

// ListReconciliations lists reconciliations of every tenant, open ones only unless all is set
// (an operator's view: `bap reconcile list`).
func (s *Service) ListReconciliations(ctx context.Context, all bool) ([]Reconciliation, error) {
	return s.store.ListReconciliations(ctx, all)
}

// ResolveReconciliation settles an open reconciliation with the operator's finding and lets its
// task run again once none is left open.
func (s *Service) ResolveReconciliation(ctx context.Context, operator, id, outcome, note string) (*Reconciliation, error) {
	rec, err := s.settleReconciliation(ctx, operator, id, outcome, note, false)
	if err != nil {
		return nil, fmt.Errorf("resolving reconciliation %s: %w", id, err)
	}
	return rec, nil
}

// CorrectReconciliation records a correction of a resolved reconciliation's finding: a new
// resolution that supersedes the current one (the operator found the command did otherwise). The
// earlier resolution stays, and the command is still never run again.
func (s *Service) CorrectReconciliation(ctx context.Context, operator, id, outcome, note string) (*Reconciliation, error) {
	rec, err := s.settleReconciliation(ctx, operator, id, outcome, note, true)
	if err != nil {
		return nil, fmt.Errorf("correcting reconciliation %s: %w", id, err)
	}
	return rec, nil
}

func (s *Service) settleReconciliation(ctx context.Context, operator, id, outcome, note string, correct bool) (*Reconciliation, error) {
	if outcome != string(task.Applied) && outcome != string(task.NoSideEffect) {
		return nil, Errorf(CodeInvalidRequest, "outcome must be applied or no_side_effect")
	}
	if len(note) > 2000 {
		return nil, Errorf(CodeInvalidRequest, "the note must be at most 2000 characters")
	}
	if correct && note == "" {
		return nil, Errorf(CodeInvalidRequest, "a correction needs a note saying why")
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
		switch {
		case !correct && rec.State != "open":
			return Errorf(CodeInvalidTransition, "reconciliation %s is already %s (a correction supersedes its resolution: bap reconcile correct)", id, rec.State)
		case correct && rec.State != "resolved":
			return Errorf(CodeInvalidTransition, "reconciliation %s is %s: only a resolution is corrected", id, rec.State)
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: operator, Tenant: t.Tenant, Operation: "reconcile"}, t: t, now: s.cfg.Now()}
		now := c.now
		supersedes := rec.ResolutionID
		rec.State, rec.Resolution, rec.Note, rec.ResolvedAt, rec.ResolvedBy = "resolved", outcome, note, &now, operator
		if err := tx.ResolveReconciliation(ctx, rec); err != nil {
			return err
		}
		data := map[string]any{"reconciliation_id": rec.ID, "command_id": rec.CommandID, "outcome": outcome}
		if correct {
			data["supersedes"] = supersedes
		}
		if err := c.emit(ctx, t, "reconciliation.resolved", "reconcile", data); err != nil {
			return err
		}
		// The task runs again once nothing else holds it: no reconciliation left open and no
		// person's handoff (a person's interrupted act settled during their handoff keeps the task
		// with them until they hand it back).
		if err := c.followWaits(ctx, "reconciliation resolved"); err != nil {
			return err
		}
		if err := tx.UpdateTask(ctx, t); err != nil {
			return err
		}
		out, err = tx.GetReconciliation(ctx, id) // as it now stands, with its chain
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// followWaits moves c's task as what it now waits for outside itself says (task.AfterWaits): an
// open handoff or an open reconciliation keeps it in waiting_for_external_input (a running task
// moves there), neither lets a waiting one run again. Other states keep theirs.
func (c *commandCtx) followWaits(ctx context.Context, cause string) error {
	open, err := c.tx.CountOpenReconciliations(ctx, c.t.ID)
	if err != nil {
		return err
	}
	_, err = c.tx.OpenHandoff(ctx, c.t.Tenant, c.t.ID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	_, trigger, transition := task.AfterWaits(c.t.State, task.Waits{HandedOff: err == nil, Reconciliations: open})
	if !transition {
		return nil
	}
	return c.transition(ctx, c.t, trigger, cause)
}
