package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/originweave/bap/server/internal/app"
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

// Config tunes a node's workers.
type Config struct {
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
	// Logger receives the workers' logs (default slog.Default()).
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
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
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Workers is the pool of one node's plan workers.
type Workers struct {
	s   Service
	m   Models
	cfg Config

	running                                  atomic.Int64
	scans, claims, takeovers, deadLetters    atomic.Int64
	stepsSucceeded, stepsFailed, plansClosed atomic.Int64
}

// Stats are counters of one node's workers since it started (for /metrics).
type Stats struct {
	Running        int64 // delegated tasks this node runs now
	Scans          int64 // looks for a claimable lease, found or not: the workers' pulse
	Claims         int64 // leases claimed
	LeaseExpiries  int64 // claims that took over an expired lease
	DeadLetters    int64 // plans this node dead-lettered
	StepsSucceeded int64
	StepsFailed    int64 // failed attempts, retried or not
	PlansClosed    int64 // plans run to their end and closed by their postcondition
}

// New builds the workers that drive s; m is the model port of autonomous tasks (nil: none is
// configured, and an autonomous task stops with orchestrator_unavailable).
func New(s Service, m Models, cfg Config) *Workers {
	cfg.setDefaults()
	return &Workers{s: s, m: m, cfg: cfg}
}

// LeaseTTL is the length of the leases these workers take.
func (w *Workers) LeaseTTL() time.Duration { return w.cfg.LeaseTTL }

// Stats reads the counters.
func (w *Workers) Stats() Stats {
	return Stats{
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
		claim, err := w.s.ClaimLease(ctx, w.cfg.LeaseTTL)
		w.scans.Add(1)
		if err != nil {
			<-sem
			if !errors.Is(err, app.ErrNotFound) && ctx.Err() == nil {
				w.cfg.Logger.Error("claiming a delegated task failed", "err", err)
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
			w.cfg.Logger.Warn("took over an expired lease", "task_id", claim.TaskID, "epoch", claim.Epoch)
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
func (w *Workers) runClaim(parent context.Context, claim *app.LeaseClaim) {
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

	r := &planRun{w: w, s: w.s, log: w.cfg.Logger, ctx: ctx, stopping: parent, claim: claim,
		actor: app.Actor{Tenant: claim.Tenant, Subject: "worker:" + w.s.NodeID()}, sessionID: claim.SessionID}
	release, delay := r.run() //nolint:contextcheck // the run carries ctx itself (planRun.ctx)
	if errors.Is(context.Cause(ctx), app.ErrLeaseLost) {
		w.cfg.Logger.Warn("lease lost; another worker owns the task now", "task_id", claim.TaskID)
		return
	}
	if release {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(parent), 10*time.Second)
		defer rcancel()
		if err := w.s.ReleaseLease(rctx, claim, delay); err != nil {
			w.cfg.Logger.Error("releasing a lease failed; it will expire", "task_id", claim.TaskID, "err", err)
		}
	}
}

// heartbeat renews the lease every third of its length; when the lease is found lost it cancels
// the run.
func (w *Workers) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, claim *app.LeaseClaim) {
	tick := time.NewTicker(w.cfg.LeaseTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ok, err := w.s.RenewLease(ctx, claim, w.cfg.LeaseTTL)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				w.cfg.Logger.Warn("renewing a lease failed", "task_id", claim.TaskID, "err", err)
			}
		case !ok:
			cancel(app.ErrLeaseLost)
			return
		}
	}
}
