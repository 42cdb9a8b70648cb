package daemon

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/worker"
)

// newWorkers builds this node's delegated-task workers (ADR 0011) and registers their counters;
// nil when cfg.Workers is 0 (a node that serves the API only). The queue's depth, held and expired
// leases and dead letters across nodes are read from the database by backpressure.go.
func newWorkers(cfg Config, svc *app.Service, orch app.Orchestrator, reg prometheus.Registerer, log *slog.Logger) (*worker.Workers, error) {
	if cfg.Workers <= 0 {
		log.Info("delegated-task workers disabled on this node")
		return nil, nil
	}
	w := worker.New(svc, orch, worker.Config{Workers: cfg.Workers, LeaseTTL: cfg.LeaseTTL, Logger: log})
	stat := func(f func(worker.Stats) int64) func() float64 {
		return func() float64 { return float64(f(w.Stats())) }
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bap_plan_runs_active",
			Help: "Delegated tasks this node's workers are running now."}, stat(func(s worker.Stats) int64 { return s.Running })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bap_plan_workers",
			Help: "Delegated tasks this node may run at once (--workers)."}, func() float64 { return float64(cfg.Workers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_plan_claim_scans_total",
			Help: "Times this node's workers looked for a delegated task to claim, found or not (their pulse)."}, stat(func(s worker.Stats) int64 { return s.Scans })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_plan_claims_total",
			Help: "Leases this node's workers claimed."}, stat(func(s worker.Stats) int64 { return s.Claims })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_plan_takeovers_total",
			Help: "Claims by this node that took over an expired lease."}, stat(func(s worker.Stats) int64 { return s.LeaseExpiries })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_plan_dead_letters_total",
			Help: "Plans this node dead-lettered."}, stat(func(s worker.Stats) int64 { return s.DeadLetters })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_plan_steps_succeeded_total",
			Help: "Plan steps this node ran that succeeded."}, stat(func(s worker.Stats) int64 { return s.StepsSucceeded })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_plan_steps_failed_total",
			Help: "Failed attempts at plan steps on this node (retried or not)."}, stat(func(s worker.Stats) int64 { return s.StepsFailed })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_plans_closed_total",
			Help: "Plans this node ran to their end and closed by their postcondition."}, stat(func(s worker.Stats) int64 { return s.PlansClosed })),
	)
	log.Info("delegated-task workers", "workers", cfg.Workers, "lease_ttl", w.LeaseTTL().String())
	return w, nil
}
