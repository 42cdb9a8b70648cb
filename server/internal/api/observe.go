package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/originweave/bap/server/internal/app"
)

// metrics are the transport's Prometheus instruments.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bap_http_requests_total", Help: "BAP HTTP requests by operation and status.",
		}, []string{"operation", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bap_http_request_duration_seconds", Help: "BAP HTTP request latency by operation.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"operation"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (flushing, deadlines).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type opKey struct{}

// operationLabel is a slot a handler fills with its operationId so that the outer middleware can
// label metrics and logs by operation rather than by raw path (which holds ids).
type operationLabel struct{ name string }

// observeRequests logs one line per request and records metrics, and turns a panic into a 500
// problem instead of a dropped connection.
func observeRequests(next http.Handler, log *slog.Logger, m *metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		label := &operationLabel{name: "other"}
		r = r.WithContext(withOpLabel(r.Context(), label))
		//nolint:contextcheck // the deferred recovery writes a problem to the recorder; it has no work to cancel
		defer func() {
			if p := recover(); p != nil {
				// The panic value may hold request data: log its type and the stack only.
				log.Error("handler panic", "operation", label.name, "panic_type", fmt.Sprintf("%T", p), "stack", string(debug.Stack()))
				if rec.status == 0 {
					writeProblem(rec, &app.Error{Code: app.CodeInternal, Detail: "the server failed while handling this request"})
				}
			}
			d := time.Since(start)
			m.requests.WithLabelValues(label.name, strconv.Itoa(rec.status)).Inc()
			m.duration.WithLabelValues(label.name).Observe(d.Seconds())
			level := slog.LevelInfo
			if rec.status >= 500 {
				level = slog.LevelWarn
			}
			// Paths carry opaque ids only; query strings and bodies are never logged.
			log.Log(r.Context(), level, "request", "method", r.Method, "path", r.URL.Path,
				"operation", label.name, "status", rec.status, "duration_ms", float64(d.Microseconds())/1000)
		}()
		next.ServeHTTP(rec, r)
	})
}
