// Package admission holds the in-memory pieces of backpressure: bounded slots per key and per node
// taken without waiting (in-flight commands), reservations checked against a durable count under a
// per-key lock (browser sessions being opened, whose rows the database does not show yet), and
// refusal counters by reason for /metrics. It owns no policy — callers choose the caps, the keys
// (tenants) and what a refusal answers (429 rate_limited for a tenant, 503 overloaded for the
// node). Standard library only (it sits with the core in docs/architecture.md), never net/http.
package admission
