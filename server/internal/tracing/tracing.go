package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/originweave/bap/server/internal/app"
)

// instrumentation is the name of the tracer, as OpenTelemetry names instrumentation scopes.
const instrumentation = "github.com/originweave/bap/server"

// Options configure the OTLP exporter of New.
type Options struct {
	// Endpoint is the collector's OTLP/HTTP URL: http(s)://host[:port][/path]. Without a path,
	// spans go to /v1/traces (the OTLP/HTTP default). http sends them unencrypted.
	Endpoint string
	// ServiceVersion and NodeID describe this process in every span's resource.
	ServiceVersion, NodeID string
	// Logger receives export failures, at most one line a minute (default slog.Default()).
	Logger *slog.Logger
}

// Tracer implements app.Tracer over an OpenTelemetry tracer provider. Safe for concurrent use.
type Tracer struct {
	tracer   trace.Tracer
	shutdown func(context.Context) error
	prop     propagation.TraceContext
}

var _ app.Tracer = (*Tracer)(nil)

// ParseEndpoint checks an --otlp-endpoint value and returns the URL spans are posted to.
func ParseEndpoint(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--otlp-endpoint %q: want http(s)://host[:port][/path] without credentials, query or fragment", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// New returns a Tracer batching spans to the collector at o.Endpoint over OTLP/HTTP (protobuf).
// It does not contact the collector: spans that cannot be delivered are dropped and the failure
// logged. Shutdown flushes what is buffered.
func New(ctx context.Context, o Options) (*Tracer, error) {
	endpoint, err := ParseEndpoint(o.Endpoint)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", "bap"),
		attribute.String("service.version", o.ServiceVersion),
		attribute.String("service.instance.id", o.NodeID),
	)
	// The sampler is the SDK's default: parent-based, every root sampled (OTEL_TRACES_SAMPLER
	// changes it), so a caller's traceparent flags decide for its requests.
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res),
		sdktrace.WithBatcher(&loggedExporter{SpanExporter: exp, log: o.Logger}))
	return NewWithProvider(tp, tp.Shutdown), nil
}

// NewWithProvider returns a Tracer over tp (a test gives one with a tracetest.SpanRecorder);
// Shutdown calls shutdown when it is not nil.
func NewWithProvider(tp trace.TracerProvider, shutdown func(context.Context) error) *Tracer {
	return &Tracer{tracer: tp.Tracer(instrumentation), shutdown: shutdown}
}

// Shutdown flushes buffered spans and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Start implements app.Tracer.
func (t *Tracer) Start(ctx context.Context, name string, kind app.SpanKind) (context.Context, app.TraceSpan) {
	k := trace.SpanKindInternal
	switch kind {
	case app.SpanServer:
		k = trace.SpanKindServer
	case app.SpanClient:
		k = trace.SpanKindClient
	case app.SpanInternal:
		k = trace.SpanKindInternal
	}
	ctx, sp := t.tracer.Start(ctx, spanName(name), trace.WithSpanKind(k))
	return ctx, span{sp}
}

// Remote implements app.Tracer: the W3C Trace Context propagator's parsing, nothing looser.
func (t *Tracer) Remote(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	return t.prop.Extract(ctx, carrier)
}

// span is an app.TraceSpan over an OpenTelemetry span; its setters keep only listed attributes.
type span struct{ s trace.Span }

func (s span) SetName(name string) { s.s.SetName(spanName(name)) }

func (s span) SetAttr(key, value string) {
	if allowedString(key, value) {
		s.s.SetAttributes(attribute.String(key, value))
	}
}

func (s span) SetInt(key string, value int64) {
	if allowedInt(key) {
		s.s.SetAttributes(attribute.Int64(key, value))
	}
}

func (s span) End(err error) {
	if err != nil {
		s.s.SetStatus(codes.Error, statusOf(err))
	}
	s.s.End()
}

// statusOf is a failed span's description: the problem code of an *app.Error, else "error". An
// error's text may quote a request (a URL, a selector), so it is never exported.
func statusOf(err error) string {
	if e, ok := errors.AsType[*app.Error](err); ok && token(string(e.Code)) {
		return string(e.Code)
	}
	return "error"
}

// loggedExporter logs export failures itself (at most one line a minute) and reports none to the
// SDK, whose fallback would be OpenTelemetry's process-wide error handler.
type loggedExporter struct {
	sdktrace.SpanExporter
	log  *slog.Logger
	last atomic.Int64 // unix nanoseconds of the last line logged
}

func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		return nil
	}
	now := time.Now().UnixNano()
	if last := e.last.Load(); now-last >= int64(time.Minute) && e.last.CompareAndSwap(last, now) {
		e.log.Warn("spans could not be exported to the OTLP endpoint; they are dropped", "spans", len(spans), "err", err)
	}
	return nil
}
