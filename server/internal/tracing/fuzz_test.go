package tracing

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// FuzzRemote feeds untrusted traceparent and tracestate headers (HTTP, MCP _meta) to Remote: it
// never panics, and a parent it accepts is exactly the one the header names (version 00: the
// trace id and the parent id, lower-case hex, neither all zeros).
func FuzzRemote(f *testing.F) {
	for _, s := range [][2]string{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE"},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", ""},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "a=b,c=d"},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", ""},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "x"},
		{"", ""},
		{"garbage", "=,=,="},
	} {
		f.Add(s[0], s[1])
	}
	tr := NewWithProvider(noop.NewTracerProvider(), nil)
	f.Fuzz(func(t *testing.T, traceparent, tracestate string) {
		sc := trace.SpanContextFromContext(tr.Remote(context.Background(), traceparent, tracestate))
		if !sc.IsValid() {
			return
		}
		parts := strings.Split(traceparent, "-")
		if len(parts) < 4 || !sc.IsRemote() || parts[1] != sc.TraceID().String() || parts[2] != sc.SpanID().String() {
			t.Fatalf("%q gave the parent %s/%s", traceparent, sc.TraceID(), sc.SpanID())
		}
	})
}
