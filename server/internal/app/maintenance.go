package app

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// systemActor is the actor of state changes the runtime makes by itself (deadline expiry).
const systemActor = "system:runtime"

// expireTask moves one task past its deadline to `expired` in its own transaction. A task that is
// already terminal, or whose deadline moved, is left alone.
func (s *Service) expireTask(ctx context.Context, ref TaskRef) error {
	return s.store.InTx(ctx, func(tx Tx) error {
		t, err := tx.LockTask(ctx, ref.Tenant, ref.TaskID)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: systemActor, Operation: "expire", Tenant: ref.Tenant}, t: t, now: s.cfg.Now()}
		before := t.LastSeq
		if err := c.expireIfDue(ctx, t); err != nil {
			return err
		}
		if t.LastSeq == before {
			return nil
		}
		return tx.UpdateTask(ctx, t)
	})
}

// ExpireDue expires every task whose deadline has passed, in batches, and reports how many it
// expired. The daemon calls it periodically; readers also expire a due task on access.
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	n := 0
	for {
		due, err := s.store.DueForExpiry(ctx, s.cfg.Now(), 100)
		if err != nil {
			return n, fmt.Errorf("listing tasks past their deadline: %w", err)
		}
		for _, ref := range due {
			if err := s.expireTask(ctx, ref); err != nil {
				return n, fmt.Errorf("expiring task %s: %w", ref.TaskID, err)
			}
			n++
		}
		if len(due) < 100 {
			return n, nil
		}
	}
}

// PurgeIdempotency forgets completed idempotency records past their retention; a key reused after
// that is a new request.
func (s *Service) PurgeIdempotency(ctx context.Context) (int64, error) {
	return s.store.PurgeIdempotency(ctx, s.cfg.Now())
}

// RegisterNode records this node as running; StopNode marks it stopped.
func (s *Service) RegisterNode(ctx context.Context, advertiseURL, version string) error {
	return s.store.RegisterNode(ctx, NodeInfo{ID: s.cfg.NodeID, AdvertiseURL: advertiseURL, SoftwareVersion: version})
}

// MarkNodeStopped records that another node is gone (its process is known to have ended).
func (s *Service) MarkNodeStopped(ctx context.Context, nodeID string) error {
	if nodeID == "" || nodeID == s.cfg.NodeID {
		return nil
	}
	return s.store.StopNode(ctx, nodeID)
}

// SucceedNodesAt marks stopped the other nodes registered at advertiseURL, the address this node
// now listens on: their processes have ended (killed, or stopped without saying so), so recovery
// classifies what they left in flight at once, and no node forwards to them (to this one, which
// would refuse a credential meant for them), instead of waiting NodeStaleAfter for their
// heartbeat to age. It returns their ids. The advertise URL names one node (docs/multi-node.md).
func (s *Service) SucceedNodesAt(ctx context.Context, advertiseURL string) ([]string, error) {
	return s.store.StopNodesAt(ctx, advertiseURL, s.cfg.NodeID)
}

// StopNode marks this node stopped.
func (s *Service) StopNode(ctx context.Context) error {
	return s.store.StopNode(ctx, s.cfg.NodeID)
}

// Upkeep runs the periodic background work (deadline and approval expiry, idempotency retention, recovery of
// commands interrupted on dead nodes, node heartbeat) every interval until ctx ends. Errors are logged, never fatal: the next round retries.
func (s *Service) Upkeep(ctx context.Context, interval time.Duration, advertiseURL, version string) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		// The heartbeat first: a slow round of the work below must not make this node look dead.
		if err := s.RegisterNode(ctx, advertiseURL, version); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("node heartbeat failed", "err", err)
		}
		if n, err := s.ExpireDue(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("deadline expiry failed", "err", err)
		} else if n > 0 {
			s.cfg.Logger.Info("tasks expired", "count", n)
		}
		if n, err := s.ExpireApprovals(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("approval expiry failed", "err", err)
		} else if n > 0 {
			s.cfg.Logger.Info("approvals expired", "count", n)
		}
		if n, err := s.PurgeIdempotency(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("idempotency purge failed", "err", err)
		} else if n > 0 {
			s.cfg.Logger.Info("idempotency records purged", "count", n)
		}
		if s.cfg.InterruptedResponse != nil {
			stale := s.cfg.Now().Add(-s.cfg.NodeStaleAfter)
			if n, err := s.RecoverInterrupted(ctx, stale); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Error("recovering interrupted commands failed", "err", err)
			} else if n > 0 {
				s.cfg.Logger.Warn("interrupted commands classified", "count", n)
			}
			if n, err := s.RecoverLostSessions(ctx, stale); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Error("recovering lost browser sessions failed", "err", err)
			} else if n > 0 {
				s.cfg.Logger.Warn("browser sessions of stopped nodes marked lost", "count", n)
			}
		}
		if n, err := s.AnchorDue(ctx, s.cfg.AnchorInterval); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("anchoring history chains failed", "err", err)
		} else if n > 0 {
			s.cfg.Logger.Debug("history chains anchored", "count", n)
		}
		if n, err := s.CloseEndedSessions(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Error("closing sessions of ended tasks failed", "err", err)
		} else if n > 0 {
			s.cfg.Logger.Info("sessions of ended tasks closed", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
