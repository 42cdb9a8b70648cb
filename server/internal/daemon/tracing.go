package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/tracing"
	"github.com/originweave/bap/server/internal/version"
)

// tracingShutdownTimeout bounds the flush of buffered spans at shutdown.
const tracingShutdownTimeout = 5 * time.Second

// startTracing builds the OpenTelemetry tracer of --otlp-endpoint, or app.NoTracer (nothing is
// recorded, nothing is exported) when none is set. The returned function flushes buffered spans.
func startTracing(ctx context.Context, cfg Config, nodeID string, log *slog.Logger) (app.Tracer, func(), error) {
	if cfg.OTLPEndpoint == "" {
		return app.NoTracer{}, func() {}, nil
	}
	t, err := tracing.New(ctx, tracing.Options{Endpoint: cfg.OTLPEndpoint, ServiceVersion: version.Software, NodeID: nodeID, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	endpoint, _ := tracing.ParseEndpoint(cfg.OTLPEndpoint) // checked by New; holds no credential
	log.Info("traces are exported over OTLP/HTTP", "endpoint", endpoint)
	return t, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingShutdownTimeout)
		defer cancel()
		if err := t.Shutdown(sctx); err != nil {
			log.Warn("flushing spans at shutdown", "err", err)
		}
	}, nil
}
