package daemon

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/originweave/bap/server/internal/admission"
	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/store"
)

// Default caps of one node, sized for a 2-core, 24 GiB machine (docs/operability.md,
// "Backpressure"): each Chromium session costs about 50–150 MiB and a share of two cores, so 32
// live sessions stay well inside memory and keep commands responsive; a tenant gets half of them;
// 64 requests in flight per tenant and 256 in all keep the 32-connection pool busy without an
// unbounded line behind it; 256 waiting tasks per tenant is hours of delegated work.
const (
	DefaultMaxSessions             = 32
	DefaultMaxSessionsPerTenant    = 16
	DefaultMaxInflight             = 256
	DefaultMaxInflightPerTenant    = 64
	DefaultMaxQueuedTasksPerTenant = 256
)

// capOf resolves a cap of Config: 0 picks def, a negative value means no cap (0 for the
// packages, which read 0 as "no cap").
func capOf(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// browserMaxSessions is the browser's MaxSessions for cfg (the browser has no "no cap").
func (c *Config) browserMaxSessions() int {
	if n := capOf(c.MaxSessions, DefaultMaxSessions); n > 0 {
		return n
	}
	return math.MaxInt32
}

// backpressure is the node's admission state, shared by the transport (in-flight requests), the
// use-cases (sessions, queued tasks) and /metrics.
type backpressure struct {
	refusals                                  *admission.Refusals
	commands                                  *admission.Slots
	sessionsPerTenant, queuedPerTenant, nodes int
}

func newBackpressure(cfg Config) *backpressure {
	return &backpressure{
		refusals:          &admission.Refusals{},
		commands:          admission.NewSlots(capOf(cfg.MaxInflightPerTenant, DefaultMaxInflightPerTenant), capOf(cfg.MaxInflight, DefaultMaxInflight)),
		sessionsPerTenant: capOf(cfg.MaxSessionsPerTenant, DefaultMaxSessionsPerTenant),
		queuedPerTenant:   capOf(cfg.MaxQueuedTasksPerTenant, DefaultMaxQueuedTasksPerTenant),
		nodes:             capOf(cfg.MaxSessions, DefaultMaxSessions),
	}
}

// api is the transport's admission.
func (b *backpressure) api() api.Admission {
	return api.Admission{Commands: b.commands, Refusals: b.refusals, RetryAfter: time.Second}
}

// registerMetrics adds the backpressure metrics to reg: in-flight requests, caps, refusals by
// reason and the browser's sessions from memory; the task queues, leases and dead letters from the
// database at scrape time (every node reports the same figures for those).
func (b *backpressure) registerMetrics(reg *prometheus.Registry, svc *app.Service, br app.Browser, st *store.Store, log *slog.Logger) {
	perTenant, total := b.commands.Caps()
	caps := map[string]int{
		"inflight_per_tenant": perTenant, "inflight": total, "sessions_per_tenant": b.sessionsPerTenant,
		"sessions": b.nodes, "queued_tasks_per_tenant": b.queuedPerTenant,
	}
	for name, v := range caps {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "bap_admission_limit",
			Help: "Caps of backpressure on this node (0: no cap).", ConstLabels: prometheus.Labels{"limit": name}})
		g.Set(float64(v))
		reg.MustRegister(g)
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bap_inflight_requests",
		Help: "BAP operations in flight on this node (event streams excluded)."},
		func() float64 { return float64(b.commands.Held()) }))
	for _, r := range admission.Reasons {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_admission_refusals_total",
			Help:        "Requests refused for capacity (429 rate_limited, 503 overloaded) by reason.",
			ConstLabels: prometheus.Labels{"reason": string(r)}},
			func() float64 { return float64(b.refusals.Count(r)) }))
	}
	load, _ := br.(app.SessionLoad)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bap_browser_sessions",
		Help: "Browser sessions of this node: open, or being opened.", ConstLabels: prometheus.Labels{"state": "open"}},
		func() float64 {
			if load == nil {
				return 0
			}
			open, _ := load.SessionLoad()
			return float64(open)
		}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bap_browser_sessions",
		Help: "Browser sessions of this node: open, or being opened.", ConstLabels: prometheus.Labels{"state": "opening"}},
		func() float64 { return float64(svc.OpeningSessions()) }))
	reg.MustRegister(&backlogCollector{st: st, log: log})
}

// backlogCollector reads what waits in the database at scrape time.
type backlogCollector struct {
	st  *store.Store
	log *slog.Logger
}

var (
	queueDepthDesc = prometheus.NewDesc("bap_task_queue_depth",
		"Tasks waiting, in every node's database: for admission (created, over the tenant's active-task cap) or for a worker (delegated, lease unclaimed).",
		[]string{"queue"}, nil)
	leasesHeldDesc = prometheus.NewDesc("bap_task_leases_held",
		"Delegated tasks a worker holds a lease on.", nil, nil)
	leasesExpiredDesc = prometheus.NewDesc("bap_task_leases_expired",
		"Held leases past their expiry, not yet taken over (a worker or its node died or stalled).", nil, nil)
	leaseExpiriesDesc = prometheus.NewDesc("bap_task_lease_expiries_total",
		"Claims that took over an expired lease.", nil, nil)
	deadLettersDesc = prometheus.NewDesc("bap_dead_letter_records",
		"Dead letters recorded (plans that failed beyond their attempts).", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueDepthDesc, leasesHeldDesc, leasesExpiredDesc, leaseExpiriesDesc, deadLettersDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. When the database does not answer within 2 s the
// figures are left out of this scrape (and a warning logged) rather than holding /metrics up.
func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b, err := c.st.ReadBacklog(ctx)
	if err != nil {
		c.log.Warn("metrics: reading the task backlog", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(b.AwaitingAdmission), "admission")
	ch <- prometheus.MustNewConstMetric(deadLettersDesc, prometheus.GaugeValue, float64(b.DeadLetters))
	if !b.Leases {
		return
	}
	ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(b.AwaitingWorker), "worker")
	ch <- prometheus.MustNewConstMetric(leasesHeldDesc, prometheus.GaugeValue, float64(b.Leased))
	ch <- prometheus.MustNewConstMetric(leasesExpiredDesc, prometheus.GaugeValue, float64(b.ExpiredLeases))
	ch <- prometheus.MustNewConstMetric(leaseExpiriesDesc, prometheus.CounterValue, float64(b.LeaseExpiries))
}
