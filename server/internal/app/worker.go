package app

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Workers run delegated tasks (ADR 0011, docs/delegated.md). Every node runs some; each claims a
// runnable task's lease (FOR UPDATE SKIP LOCKED), renews it while it works, and runs the plan's
// steps in order as ordinary BAP commands of the actor "worker:<node>" — so policy, approval
// rules, two-phase recording, receipts and events apply exactly as for a client — each under an
// Idempotency-Key derived from the task, the lease epoch, the step and the attempt. A step that
// has a side effect is followed by a checkpoint of the session. After the last step the worker
// closes the task by its postcondition.
//
// A lease that expires (its node died) returns the task to the queue; the next worker restores a
// session from the last checkpoint, runs the safe steps after it again, never runs a side effect
// twice (an act interrupted in flight is settled by recovery: its key replays applied, or a
// reconciliation holds the task in waiting_for_external_input) and carries on.

// WorkerConfig tunes a node's workers.
type WorkerConfig struct {
	// Workers is how many delegated tasks this node runs at once (default 4).
	Workers int
	// LeaseTTL is how long a lease lasts without renewal (default 15 s); it is renewed every third.
	LeaseTTL time.Duration
	// Poll is how often an idle node looks for runnable tasks (default 500 ms).
	Poll time.Duration
	// BackoffBase is the wait after a step's first failed attempt; it doubles with each further
	// one, up to BackoffMax (defaults 1 s and 30 s).
	BackoffBase, BackoffMax time.Duration
	// DefaultMaxAttempts applies to steps without max_attempts (default 3).
	DefaultMaxAttempts int
	// Drain is how long a step in flight may finish once the node shuts down (default 10 s).
	Drain time.Duration
}

func (c *WorkerConfig) setDefaults() {
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 15 * time.Second
	}
	if c.Poll <= 0 {
		c.Poll = 500 * time.Millisecond
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 30 * time.Second
	}
	if c.DefaultMaxAttempts <= 0 {
		c.DefaultMaxAttempts = 3
	}
	if c.Drain <= 0 {
		c.Drain = 10 * time.Second
	}
}

// Workers is the pool of one node's plan workers.
type Workers struct {
	s   *Service
	ps  PlanStore
	cfg WorkerConfig

	running                                  atomic.Int64
	scans, claims, takeovers, deadLetters    atomic.Int64
	stepsSucceeded, stepsFailed, plansClosed atomic.Int64
}

// WorkerStats are counters of one node's workers since it started (for /metrics).
type WorkerStats struct {
	Running        int64 // delegated tasks this node runs now
	Scans          int64 // looks for a claimable lease, found or not: the workers' pulse
	Claims         int64 // leases claimed
	LeaseExpiries  int64 // claims that took over an expired lease
	DeadLetters    int64 // plans this node dead-lettered
	StepsSucceeded int64
	StepsFailed    int64 // failed attempts, retried or not
	PlansClosed    int64 // plans run to their end and closed by their postcondition
}

// NewWorkers builds the workers of s; the store must implement PlanStore and PlanTx.
func NewWorkers(s *Service, cfg WorkerConfig) (*Workers, error) {
	cfg.setDefaults()
	return &Workers{s: s, ps: s.store, cfg: cfg}, nil
}

// LeaseTTL is the length of the leases these workers take.
func (w *Workers) LeaseTTL() time.Duration { return w.cfg.LeaseTTL }

// Stats reads the counters.
func (w *Workers) Stats() WorkerStats {
	return WorkerStats{
		Running: w.running.Load(), Scans: w.scans.Load(), Claims: w.claims.Load(), LeaseExpiries: w.takeovers.Load(),
		DeadLetters: w.deadLetters.Load(), StepsSucceeded: w.stepsSucceeded.Load(), StepsFailed: w.stepsFailed.Load(),
		PlansClosed: w.plansClosed.Load(),
	}
}

// Run claims and runs delegated tasks until ctx ends. Then it claims nothing more, lets each
// running step finish (at most Drain), gives the leases back and returns.
func (w *Workers) Run(ctx context.Context) {
	sem := make(chan struct{}, w.cfg.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		claim, err := w.ps.ClaimPlanTask(ctx, w.s.cfg.NodeID, w.cfg.LeaseTTL)
		w.scans.Add(1)
		if err != nil {
			<-sem
			if !errors.Is(err, ErrNotFound) && ctx.Err() == nil {
				w.s.cfg.Logger.Error("claiming a delegated task failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(w.cfg.Poll):
			}
			continue
		}
		w.claims.Add(1)
		if claim.TookOver {
			w.takeovers.Add(1)
			w.s.cfg.Logger.Warn("took over an expired lease", "task_id", claim.TaskID, "epoch", claim.Epoch)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			w.runClaim(ctx, claim)
		}()
	}
}

// runClaim runs one claimed task until its plan ends, it must wait, or the lease is lost.
func (w *Workers) runClaim(parent context.Context, claim *LeaseClaim) {
	w.running.Add(1)
	defer w.running.Add(-1)
	// The run outlives a shutdown by at most Drain (a step in flight may finish) and ends at once
	// when the lease is lost.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	defer cancel(nil)
	go func() {
		select {
		case <-ctx.Done():
		case <-parent.Done():
			select {
			case <-ctx.Done():
			case <-time.After(w.cfg.Drain):
				cancel(errors.New("the node is shutting down"))
			}
		}
	}()
	go w.heartbeat(ctx, cancel, claim)

	r := &planRun{w: w, s: w.s, ctx: ctx, stopping: parent, claim: claim,
		actor: Actor{Tenant: claim.Tenant, Subject: "worker:" + w.s.cfg.NodeID}, sessionID: claim.SessionID}
	release, delay := r.run()
	if context.Cause(ctx) == errLeaseLost {
		w.s.cfg.Logger.Warn("lease lost; another worker owns the task now", "task_id", claim.TaskID)
		return
	}
	if release {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(parent), 10*time.Second)
		defer rcancel()
		if err := w.ps.ReleaseLease(rctx, claim.TaskID, w.s.cfg.NodeID, claim.Epoch, delay); err != nil {
			w.s.cfg.Logger.Error("releasing a lease failed; it will expire", "task_id", claim.TaskID, "err", err)
		}
	}
}

// heartbeat renews the lease every third of its length; when the lease is found lost it cancels
// the run.
func (w *Workers) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, claim *LeaseClaim) {
	tick := time.NewTicker(w.cfg.LeaseTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ok, err := w.ps.RenewLease(ctx, claim.TaskID, w.s.cfg.NodeID, claim.Epoch, w.cfg.LeaseTTL)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				w.s.cfg.Logger.Warn("renewing a lease failed", "task_id", claim.TaskID, "err", err)
			}
		case !ok:
			cancel(errLeaseLost)
			return
		}
	}
}
