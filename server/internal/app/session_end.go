package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/page"
)

// An ended task's browser sessions are closed: they hold a browser context (memory, a slot of
// the node's session cap) and nothing may act in them any more. The transaction that ends the
// task only asks for it once it has committed (Tx.AfterCommit, closeSessionsSoon); a background
// pass then closes the sessions, and the upkeep repeats the pass for what a crash or an expiry
// left. (Woken before the commit, a pass under load ran before the task had ended, found
// nothing, and the sessions stayed open until the upkeep's next round.)

// closeSessionsSoon wakes the closing pass without blocking.
func (s *Service) closeSessionsSoon() {
	select {
	case s.endedTasks <- struct{}{}:
	default:
	}
}

// RunSessionCloser closes the sessions of ended tasks whenever a task ends, until ctx ends.
func (s *Service) RunSessionCloser(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.endedTasks:
		}
		if _, err := s.CloseEndedSessions(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("closing sessions of ended tasks failed", "err", err)
		}
	}
}

// CloseEndedSessions closes the open browser sessions whose task has ended: recorded closed
// (browser_session.closed, cause task_ended), then closed in the browser when this node holds
// them. It returns how many it closed.
func (s *Service) CloseEndedSessions(ctx context.Context) (int, error) {
	recs, err := s.store.OpenSessionsOfEndedTasks(ctx, 100)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, rec := range recs {
		if elsewhere, err := s.heldByOtherLiveNode(ctx, &rec); err != nil || elsewhere {
			continue // its node closes it (recorded and in its browser); a dead node's is recovered
		}
		closed := false
		err := s.store.InTx(ctx, func(tx Tx) error {
			closed = false
			t, err := tx.LockTask(ctx, rec.Tenant, rec.TaskID)
			if err != nil {
				return err
			}
			cur, err := tx.LockSession(ctx, rec.Tenant, rec.ID)
			if err != nil || cur.State != SessionOpen || !t.State.Terminal() {
				return err
			}
			c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: systemActor, Tenant: rec.Tenant, Operation: "task_ended"}, t: t, now: s.cfg.Now()}
			end := c.now
			cur.State, cur.EndedAt = SessionClosed, &end
			if err := tx.UpdateSession(ctx, cur); err != nil {
				return err
			}
			if err := c.emit(ctx, t, "browser_session.closed", "task_ended", map[string]any{"session_id": rec.ID}); err != nil {
				return err
			}
			closed = true
			return tx.UpdateTask(ctx, t)
		})
		if err != nil {
			return n, fmt.Errorf("closing session %s of ended task %s: %w", rec.ID, rec.TaskID, err)
		}
		if !closed {
			continue
		}
		n++
		if s.cfg.Browser == nil {
			continue
		}
		if sess, ok := s.cfg.Browser.Session(rec.ID); ok {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := sess.Close(cctx); err != nil && !errors.Is(err, page.ErrSessionClosed) {
				s.cfg.Logger.Warn("closing browser session of ended task", "session_id", rec.ID, "err", err)
			}
			cancel()
		}
	}
	return n, nil
}
