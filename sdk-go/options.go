package bap

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Option configures a Client (see NewClient).
type Option func(*config)

type config struct {
	httpClient  *http.Client
	tokenSource func(context.Context) (string, error)
	credentials *ClientCredentials
	socket      string
	maxAttempts int
	userAgent   string
}

// WithHTTPClient sends requests through hc (its Transport, Timeout, redirects). Combined with
// WithUnixSocket, hc's *http.Transport is cloned and made to dial the socket.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithToken sends `Authorization: Bearer <token>` on every request (remote profile).
func WithToken(token string) Option {
	return WithTokenSource(func(context.Context) (string, error) { return token, nil })
}

// WithTokenSource asks ts for the bearer token before every attempt, so it may refresh expired
// tokens. An empty token sends no Authorization header; an error fails the call.
func WithTokenSource(ts func(ctx context.Context) (string, error)) Option {
	return func(c *config) { c.tokenSource = ts }
}

// WithUnixSocket dials the Unix socket at path for every request (the local profile's
// `<data-dir>/bap.sock`) instead of the base URL's host; the base URL still gives the scheme and
// path prefix, and may be "" (then "http://localhost").
func WithUnixSocket(path string) Option { return func(c *config) { c.socket = path } }

// WithRetry sets how many times a call is attempted in all (default 3; 1 disables retries).
// Network errors and 409 idempotency_in_flight, 429 and 503 answers are retried, honouring
// Retry-After; mutating calls reuse the same Idempotency-Key on every attempt.
func WithRetry(maxAttempts int) Option {
	return func(c *config) {
		if maxAttempts < 1 {
			maxAttempts = 1
		}
		c.maxAttempts = maxAttempts
	}
}

// WithUserAgent sets the User-Agent header (default "bap-sdk-go").
func WithUserAgent(ua string) Option { return func(c *config) { c.userAgent = ua } }

// CallOption configures one call.
type CallOption func(*callConfig)

type callConfig struct {
	idempotencyKey string
	meta           *ResponseMeta
	header         http.Header
}

// WithIdempotencyKey sends key as the Idempotency-Key of a mutating call instead of a generated
// one; sending the same key again (after a crash, say) replays the first answer. Read-only calls
// ignore it.
func WithIdempotencyKey(key string) CallOption {
	return func(c *callConfig) { c.idempotencyKey = key }
}

// WithHeader adds a request header to one call.
func WithHeader(name, value string) CallOption {
	return func(c *callConfig) {
		if c.header == nil {
			c.header = http.Header{}
		}
		c.header.Add(name, value)
	}
}

// WithResponseMeta fills *m with the status, headers and raw body of the call's final answer
// (a problem included) and the Idempotency-Key it sent.
func WithResponseMeta(m *ResponseMeta) CallOption { return func(c *callConfig) { c.meta = m } }

// ResponseMeta describes the final HTTP answer of a call (see WithResponseMeta).
type ResponseMeta struct {
	// Status is the HTTP status code of the answer.
	Status int
	// Header holds the answer's HTTP headers.
	Header http.Header
	// Replayed is true when the server answered a replay of an earlier request with the same
	// Idempotency-Key (header `Idempotent-Replayed: true`): the side effect did not happen again.
	Replayed bool
	// IdempotencyKey is the key sent (mutating calls only).
	IdempotencyKey string
	// Attempts is how many requests the call sent (1 without retries).
	Attempts int
	// Body is the raw answer body (nil for get_artifact, whose bytes are in the Blob).
	Body []byte
}

// Decode unmarshals the raw answer body into v, e.g. an ActPendingApprovalResponse when Act
// answered 202.
func (m *ResponseMeta) Decode(v any) error { return jsonUnmarshal(m.Body, v) }

func unixTransport(base http.RoundTripper, socket string) http.RoundTripper {
	var t *http.Transport
	if bt, ok := base.(*http.Transport); ok && bt != nil {
		t = bt.Clone()
	} else {
		t = http.DefaultTransport.(*http.Transport).Clone()
	}
	t.Proxy = nil
	d := &net.Dialer{Timeout: 10 * time.Second}
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", socket)
	}
	return t
}
