package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/originweave/bap/server/internal/app"
)

// Tracing is off unless --otlp-endpoint (or BAP_OTLP_ENDPOINT) names a collector: the
// OpenTelemetry SDK's own environment (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER) turns
// nothing on, so a variable an operator's shell or a container image happens to carry exports no
// span. With the endpoint set, the same collector gets the span, so its silence is meaningful.
// (Not parallel: it sets the process's environment.)
func TestTracingIsOffWithoutTheOTLPEndpointFlag(t *testing.T) {
	var exports atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		exports.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.URL+"/v1/traces")
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_SDK_DISABLED", "false")
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)

	span := func(tr app.Tracer, stop func()) {
		t.Helper()
		_, s := tr.Start(ctx, "command act", app.SpanInternal)
		s.End(nil)
		stop() // flushes what was recorded, synchronously
	}
	tr, stop, err := startTracing(ctx, Config{}, "node_off", log)
	if err != nil {
		t.Fatal(err)
	}
	if _, off := tr.(app.NoTracer); !off {
		t.Fatalf("without --otlp-endpoint the tracer is %T, want app.NoTracer", tr)
	}
	span(tr, stop)
	if n := exports.Load(); n != 0 {
		t.Fatalf("without --otlp-endpoint the collector the OTEL_ variables name got %d exports", n)
	}

	tr, stop, err = startTracing(ctx, Config{OTLPEndpoint: collector.URL}, "node_on", log)
	if err != nil {
		t.Fatal(err)
	}
	if _, off := tr.(app.NoTracer); off {
		t.Fatal("with --otlp-endpoint the tracer is app.NoTracer")
	}
	span(tr, stop)
	if n := exports.Load(); n == 0 {
		t.Fatal("with --otlp-endpoint the collector got no export: the silence above proves nothing")
	}
}
