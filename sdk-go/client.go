// Package bap is the Go SDK of BAP, the Browser Agent Protocol: a Client with one method per
// operation (client.gen.go), the wire types (types.gen.go) and the event types (events.gen.go),
// all generated from spec/. Path parameters come first, then the request body, then options:
//
//	c := bap.NewClient("http://127.0.0.1:7777")
//	task, err := c.CreateTask(ctx, bap.CreateTaskRequest{Goal: "…", Policy: bap.Policy{…}})
//	var p *bap.Problem
//	if errors.As(err, &p) && p.Code == bap.ProblemCodeOriginNotAllowed { … }
//
// Mutating calls send an Idempotency-Key (WithIdempotencyKey, else a new UUID v7) and reuse it
// on the client's own retries, so a retried call has its side effect once.
//
// Subscribe and SubscribeAll follow event streams as iterators that reconnect with their cursor:
//
//	for ev, err := range c.Subscribe(ctx, taskID, 0) { … }
package bap

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Client calls one BAP server. It is safe for concurrent use.
type Client struct {
	baseURL     string
	hc          *http.Client
	tokenSource func(context.Context) (string, error)
	// credentials is the token cache of WithClientCredentials (dropped after a 401), or nil.
	credentials *ClientCredentials
	maxAttempts int
	userAgent   string

	// backoff is the wait before retry n (1-based) when the answer gives no Retry-After.
	backoff func(n int) time.Duration
	// maxWait bounds one wait between attempts; a longer Retry-After ends the retries.
	maxWait time.Duration
}

// NewClient returns a client for the server at baseURL (e.g. "http://127.0.0.1:7777" or
// "https://bap.example.com"; a path prefix is kept).
func NewClient(baseURL string, opts ...Option) *Client {
	cfg := config{maxAttempts: 3, userAgent: "bap-sdk-go"}
	for _, o := range opts {
		o(&cfg)
	}
	hc := cfg.httpClient
	if hc == nil {
		hc = &http.Client{}
	}
	if cc := cfg.credentials; cc != nil {
		if cc.HTTPClient == nil {
			cc.HTTPClient = hc // the token endpoint is reached over TCP, never the Unix socket
		}
		cfg.tokenSource = cc.Token
	}
	if cfg.socket != "" {
		cp := *hc
		cp.Transport = unixTransport(hc.Transport, cfg.socket)
		hc = &cp
		if baseURL == "" {
			baseURL = "http://localhost"
		}
	}
	return &Client{
		baseURL:     strings.TrimRight(baseURL, "/"),
		hc:          hc,
		tokenSource: cfg.tokenSource,
		credentials: cfg.credentials,
		maxAttempts: cfg.maxAttempts,
		userAgent:   cfg.userAgent,
		backoff:     defaultBackoff,
		maxWait:     30 * time.Second,
	}
}

// Blob is the answer of get_artifact: the artifact's bytes with their media type and digest.
type Blob struct {
	// Body holds the bytes.
	Body []byte
	// MediaType is the Content-Type of the answer.
	MediaType string
	// SHA256 is the digest of Body (64 lowercase hex characters), checked against the
	// answer's Repr-Digest when it has one.
	SHA256 string
	// ReprDigest is the Repr-Digest header as sent (`sha-256=:<base64>:`), or "".
	ReprDigest string
}

// ErrDigestMismatch is returned (wrapped) when an artifact's bytes do not match its Repr-Digest.
var ErrDigestMismatch = errors.New("bap: artifact bytes do not match Repr-Digest")

// request is one operation call, filled in by the generated methods.
type request struct {
	op       string
	method   string
	path     string
	query    url.Values
	body     any
	hasBody  bool
	mutating bool
}

// call performs r and decodes a 2xx JSON answer into out.
func (c *Client) call(ctx context.Context, r *request, out any, opts []CallOption) error {
	status, body, _, err := c.do(ctx, r, "application/json", opts)
	if err != nil {
		return err
	}
	if status == http.StatusNoContent || len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("bap: %s: decoding the %d answer: %w", r.op, status, err)
	}
	return nil
}

// callBlob performs r and returns the answer's bytes.
func (c *Client) callBlob(ctx context.Context, r *request, opts []CallOption) (*Blob, error) {
	_, body, header, err := c.do(ctx, r, "*/*", opts)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	blob := &Blob{Body: body, MediaType: header.Get("Content-Type"), SHA256: hex.EncodeToString(sum[:]), ReprDigest: header.Get("Repr-Digest")}
	if want, ok := reprSHA256(blob.ReprDigest); ok && !bytes.Equal(want, sum[:]) {
		return nil, fmt.Errorf("%w (%s)", ErrDigestMismatch, r.op)
	}
	return blob, nil
}

// reprSHA256 extracts the sha-256 member of an RFC 9530 Repr-Digest header.
func reprSHA256(h string) ([]byte, bool) {
	for _, member := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(member), "=")
		if !ok || !strings.EqualFold(k, "sha-256") {
			continue
		}
		v = strings.TrimSuffix(strings.TrimPrefix(v, ":"), ":")
		d, err := base64.StdEncoding.DecodeString(v)
		if err == nil && len(d) == sha256.Size {
			return d, true
		}
	}
	return nil, false
}

// do sends r, retrying as configured, and returns the 2xx answer or the error.
func (c *Client) do(ctx context.Context, r *request, accept string, opts []CallOption) (int, []byte, http.Header, error) {
	var cc callConfig
	for _, o := range opts {
		o(&cc)
	}
	var payload []byte
	if r.hasBody {
		var err error
		if payload, err = json.Marshal(r.body); err != nil {
			return 0, nil, nil, fmt.Errorf("bap: %s: encoding the request: %w", r.op, err)
		}
		// A nil map (the empty <Op>Request types are maps) marshals to null; its meaning is {}.
		if string(payload) == "null" {
			payload = []byte("{}")
		}
	}
	key := ""
	if r.mutating {
		key = cc.idempotencyKey
		if key == "" {
			key = newUUIDv7()
		}
	}
	u := c.baseURL + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	if cc.meta != nil {
		*cc.meta = ResponseMeta{IdempotencyKey: key}
	}
	reauthenticated := false
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, r.method, u, bytes.NewReader(payload))
		if err != nil {
			return 0, nil, nil, fmt.Errorf("bap: %s: %w", r.op, err)
		}
		if !r.hasBody {
			req.Body, req.ContentLength = nil, 0
		}
		for k, vs := range cc.header {
			req.Header[k] = append([]string(nil), vs...)
		}
		req.Header.Set("Accept", accept)
		if r.hasBody {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.userAgent != "" {
			req.Header.Set("User-Agent", c.userAgent)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		if c.tokenSource != nil {
			tok, err := c.tokenSource(ctx)
			if err != nil {
				return 0, nil, nil, fmt.Errorf("bap: %s: token: %w", r.op, err)
			}
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
		}
		if cc.meta != nil {
			cc.meta.Attempts = attempt
		}
		resp, err := c.hc.Do(req)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err != nil {
			if ctx.Err() != nil {
				return 0, nil, nil, fmt.Errorf("bap: %s: %w", r.op, ctx.Err())
			}
			if attempt >= c.maxAttempts {
				return 0, nil, nil, fmt.Errorf("bap: %s: %w", r.op, err)
			}
			if werr := sleep(ctx, c.backoff(attempt)); werr != nil {
				return 0, nil, nil, fmt.Errorf("bap: %s: %w (after %w)", r.op, werr, err)
			}
			continue
		}
		if cc.meta != nil {
			cc.meta.Status = resp.StatusCode
			cc.meta.Header = resp.Header
			cc.meta.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
			if accept != "*/*" || resp.StatusCode >= 300 {
				cc.meta.Body = body
			}
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return resp.StatusCode, body, resp.Header, nil
		}
		p := newProblem(resp.StatusCode, resp.Header, body)
		if p.Status == http.StatusUnauthorized && c.credentials != nil && !reauthenticated {
			// The cached token was revoked or expired early: once more with a fresh one.
			reauthenticated = true
			c.credentials.Invalidate()
			continue
		}
		if attempt < c.maxAttempts && retryable(p) {
			wait, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now())
			if !ok {
				wait = c.backoff(attempt)
			}
			if wait <= c.maxWait {
				if err := sleep(ctx, wait); err != nil {
					return 0, nil, nil, p
				}
				continue
			}
		}
		return 0, nil, nil, p
	}
}

func retryable(p *Problem) bool {
	switch p.Status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusConflict:
		return p.Code == ProblemCodeIdempotencyInFlight
	}
	return false
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(h); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(h); err == nil {
		d := t.Sub(now)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

// defaultBackoff: 250 ms, 500 ms, 1 s, … capped at 5 s, with up to 25 % jitter.
func defaultBackoff(n int) time.Duration {
	d := 250 * time.Millisecond << min(n-1, 5)
	d = min(d, 5*time.Second)
	return d + time.Duration(mrand.Int64N(int64(d/4)+1))
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newUUIDv7 returns a random RFC 9562 version 7 UUID: 48 bits of Unix milliseconds, then
// version, 12 random bits, variant and 62 random bits. Keys sort by creation time, which keeps
// the server's idempotency index compact.
func newUUIDv7() string {
	var u [16]byte
	if _, err := rand.Read(u[6:]); err != nil {
		panic("bap: crypto/rand: " + err.Error()) // crypto/rand.Read never fails on supported platforms
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(time.Now().UnixMilli()))
	copy(u[:6], ms[2:])
	u[6] = u[6]&0x0f | 0x70 // version 7
	u[8] = u[8]&0x3f | 0x80 // variant 10
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

func jsonUnmarshal(b []byte, v any) error {
	if len(b) == 0 {
		return errors.New("bap: empty body")
	}
	return json.Unmarshal(b, v)
}

// onlyFields reports whether every field of the struct v points to is its zero value, but the
// fields named keep: how a result type tells that it was decoded from a closed alternative answer
// (the InterruptedCommandResponse of a replayed key holds only Receipt).
func onlyFields(v any, keep ...string) bool {
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		if !slices.Contains(keep, rv.Type().Field(i).Name) && !rv.Field(i).IsZero() {
			return false
		}
	}
	return true
}
