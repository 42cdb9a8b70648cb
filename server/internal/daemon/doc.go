// Package daemon is the composition root of `bap serve`: it turns a Config into a running server,
// wiring the store, the use-cases and the transports, and owns the start and stop order (database,
// migrations, node registration, listeners, background upkeep; then the reverse). It is the only
// package that imports every adapter.
package daemon
