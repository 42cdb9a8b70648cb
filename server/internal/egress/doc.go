// Package egress is the policy proxy at the browser's boundary: every browser context sends all
// its traffic (documents, subresources, workers, service workers, WebSockets, redirects, tunnels
// for TLS) through a [Proxy] of its own on loopback, which checks each request and each CONNECT
// against the session's origin policy before any byte leaves the machine.
//
// Interception in the browser (CDP Fetch, package browser) sees most requests first and refuses
// them with more context; the proxy is the layer that cannot be talked around. It sees what
// interception misses — WebSocket handshakes, a service worker's own requests, preconnects,
// requests of documents the browser sniffed or of workers whose script carried no CSP — and it
// checks where a connection really goes: a host name is resolved once, its addresses are checked,
// and the proxy connects to the checked address itself, so DNS rebinding cannot swap it.
//
// # Private networks
//
// Loopback, link-local (cloud metadata included), RFC 1918, CGNAT, unique-local, unspecified and
// multicast addresses ([policy.PrivateAddr]) are reached only when an allowed origin pattern names
// that host explicitly ([policy.Policy.NamesExplicitly]); a host wildcard never covers them.
//
// # Failing closed
//
// Anything the proxy cannot read or classify (a request that is neither absolute-form HTTP nor a
// CONNECT, a scheme other than http, a malformed authority, a session without a policy yet) is
// refused, and every refusal is reported through [Config.OnBlocked] so the session can record a
// request.blocked event. The proxy never follows redirects: each hop is a new request the browser
// sends through it again.
//
// egress is an adapter: it uses only the standard library and package policy.
package egress
