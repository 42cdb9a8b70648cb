// Package api is the BAP HTTP/JSON transport: it serves the routes of spec/openapi.yaml, validates
// every request against the spec (schemas, sizes, the Idempotency-Key header), authenticates and
// authorises the caller, calls the app use-cases, and renders their results and refusals — the
// latter as RFC 9457 problems, mapped to HTTP in exactly one place (problem.go). It translates and
// never decides: no rule of the task lifecycle lives here. It must not import pgx, chromedp or the
// store.
package api
