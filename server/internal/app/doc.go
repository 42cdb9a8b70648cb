// Package app holds BAP's use-cases: the commands and queries of the task runtime (create, read,
// cancel, close, resume tasks; request and resolve approvals) and the background upkeep that keeps
// them honest (deadline expiry, idempotency retention, the node heartbeat, and recovery of
// two-phase commands a dead node left between dispatch and receipt).
//
// Streams (stream.go, broker.go) are the event-stream use-cases: a subscription registered with
// this node's Broker before history is replayed, then live events in feed order, each once.
//
// Each mutating use-case is one command: its idempotency claim, state change, history events,
// receipt, outbox messages and stored first response are written in one database transaction.
// The package declares the ports it needs (Store, Tx, Responder) and depends only on the pure core
// packages (task, policy, ids, idempotency). It must not import pgx, net/http, chromedp, fosite or
// any generated wire types: transports translate to and from it.
package app
