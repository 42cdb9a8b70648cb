package orchestrator

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/originweave/bap/server/internal/app"
)

// Outcomes of one model call, as the metrics label them.
const (
	outcomeAnswered  = "answered"  // a valid answer
	outcomeFailed    = "failed"    // an outage, a timeout or an invalid answer (the next model is tried)
	outcomeCancelled = "cancelled" // the caller's context ended (cancel_task, a deadline)
	outcomeRefused   = "refused"   // the orchestrator itself refused, and kept refusing while retried (no fallback)
)

// metrics are the adapter's Prometheus instruments. Labels are the role and the model id: both come
// from the configuration or the orchestrator's own list, never from a client, so their number stays
// bounded. No label or value carries prompt or answer text.
type metrics struct {
	calls     *prometheus.CounterVec   // role, model, outcome
	duration  *prometheus.HistogramVec // role, outcome
	tokens    *prometheus.CounterVec   // role, model, kind
	cost      *prometheus.CounterVec   // role, model
	exhausted *prometheus.CounterVec   // role
	discovery *prometheus.CounterVec   // outcome
	refusals  *prometheus.CounterVec   // kind
}

func newMetrics() *metrics {
	return &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bap_model_calls_total",
			Help: "Model calls to the orchestrator by role, model and outcome (answered, failed, cancelled, refused)."},
			[]string{"role", "model", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bap_model_call_duration_seconds",
			Help:    "Latency of model calls to the orchestrator by role and outcome.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120}},
			[]string{"role", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bap_model_tokens_total",
			Help: "Tokens the orchestrator reported for model calls (failed ones included), by role, model and kind (input, output)."},
			[]string{"role", "model", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bap_model_cost_usd_total",
			Help: "Cost of model calls at the configured prices, in US dollars, by role and model (0 when prices are unknown)."},
			[]string{"role", "model"}),
		exhausted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bap_model_requests_unanswered_total",
			Help: "Model requests for which every eligible model failed, by role."},
			[]string{"role"}),
		discovery: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bap_model_discoveries_total",
			Help: "Model discoveries (GET /v1/models) by outcome (listed, failed)."},
			[]string{"outcome"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bap_orchestrator_refusals_total",
			Help: "Answers in which the orchestrator itself refused a model call, by kind (rate_limited, concurrency_limited, budget_exceeded: retried with backoff; refused: not retried)."},
			[]string{"kind"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.duration, m.tokens, m.cost, m.exhausted, m.discovery, m.refusals}
}

// call records one model call.
func (m *metrics) call(role string, model app.ModelInfo, outcome string, latency time.Duration, a answer) {
	m.calls.WithLabelValues(role, model.ID, outcome).Inc()
	m.duration.WithLabelValues(role, outcome).Observe(latency.Seconds())
	if a.unknown {
		return // no usage reported: the worst case charged to budgets is not a count
	}
	if a.in > 0 {
		m.tokens.WithLabelValues(role, model.ID, "input").Add(float64(a.in))
	}
	if a.out > 0 {
		m.tokens.WithLabelValues(role, model.ID, "output").Add(float64(a.out))
	}
	if c := cost(model, a); c > 0 {
		m.cost.WithLabelValues(role, model.ID).Add(c)
	}
}

// Describe implements prometheus.Collector.
func (c *Client) Describe(ch chan<- *prometheus.Desc) {
	for _, col := range c.metrics.collectors() {
		col.Describe(ch)
	}
}

// Collect implements prometheus.Collector: the adapter's model-call and discovery counters.
func (c *Client) Collect(ch chan<- prometheus.Metric) {
	for _, col := range c.metrics.collectors() {
		col.Collect(ch)
	}
}
