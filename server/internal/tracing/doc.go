// Package tracing implements app.Tracer with OpenTelemetry: the official Go SDK, batching spans
// to an OTLP/HTTP collector (New), or to any span processor a test gives it (NewWithProvider).
//
// Tracing is off unless `bap serve --otlp-endpoint` (BAP_OTLP_ENDPOINT) is set; then the daemon
// builds one Tracer and hands it to the transports (one span per HTTP request, the parent taken
// from its W3C traceparent header, or from an MCP request's _meta), the app (per command, per
// browser call), the store (per SQL transaction) and the orchestrator adapter (per model call).
// Off, every component holds app.NoTracer and this package is not in the request path at all.
//
// No protected value is ever exported. The components set identifiers and kinds only, and this
// package holds them to it: an attribute whose key is not in its list, or whose value does not
// have the shape its key allows (an id, a token, a route template, a number), is dropped; a span
// name of another shape is replaced; a failed span carries its problem code, never an error's
// text.
package tracing
