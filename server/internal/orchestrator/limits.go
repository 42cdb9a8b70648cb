package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/originweave/bap/server/internal/app"
)

// The limits of the orchestrator, treated as what they are (issue #21, docs/orchestrator.md,
// "contextual-orchestrator"): a refusal of the orchestrator itself (its request rate, its run
// slots, its spend budget) is not a failure of the model asked, so it is retried with backoff and
// never falls back to the next model behind the same limiter; only failures of the model itself
// (its upstream failing or timing out, an invalid answer, a model the orchestrator no longer
// serves) fall back.

// Defaults of the limits.
const (
	// DefaultMaxRequestBytes is contextual-orchestrator's body limit (SecurityConfig.max_body_bytes
	// at commit e226e119): a longer request is refused 413 request_too_large.
	DefaultMaxRequestBytes = 64 << 10
	// minRequestBytes is the smallest body limit accepted: below it even a step schema does not fit.
	minRequestBytes = 4 << 10
	// DefaultRetryFor bounds the retries of orchestrator-level refusals: contextual-orchestrator's
	// rate window is 60 s, so a flood has passed well within it.
	DefaultRetryFor       = 2 * time.Minute
	defaultRetryBaseDelay = 250 * time.Millisecond
	defaultRetryMaxDelay  = 5 * time.Second
	// worstCaseOutputTokens is what an answer without usage is charged for its output when the
	// request set no max_tokens.
	worstCaseOutputTokens = 4096
	// VirtualModel is the id contextual-orchestrator lists first: not a model but its own router,
	// which answers with whichever agent it picks.
	VirtualModel = "contextual-orchestrator"
)

// Kinds of orchestrator-level refusals (the label of bap_orchestrator_refusals_total).
const (
	refusedRate        = "rate_limited"        // 429 (rate_limit_exceeded)
	refusedConcurrency = "concurrency_limited" // 503 concurrency_limit_exceeded (or 503 with Retry-After)
	refusedBudget      = "budget_exceeded"     // 429 budget_exceeded: the orchestrator's spend budget
	refusedOther       = "refused"             // 401, 403, 413, 415, an unknown route: not retried
)

// refusal is an answer of the orchestrator that is about the orchestrator, not the model.
type refusal struct {
	kind       string
	status     int
	code       string        // the error code of the answer, when it is an identifier
	retryAfter time.Duration // from Retry-After, when given
	reason     string        // set for refusals BAP makes itself (a request that cannot fit)
}

func (r *refusal) retryable() bool { return r.kind != refusedOther }

// err is the error a call ends with when the refusal stands: it wraps app.ErrOrchestratorBudget
// for the spend budget, app.ErrOrchestratorUnavailable otherwise.
func (r *refusal) err(display string, waited time.Duration) error {
	what := r.reason
	if what == "" {
		what = fmt.Sprintf("HTTP %d", r.status)
		if r.code != "" {
			what += " " + r.code
		}
	}
	if r.retryable() {
		what += fmt.Sprintf(" (still refused after retrying for %s)", waited.Round(time.Millisecond))
	}
	if r.kind == refusedBudget {
		return fmt.Errorf("%w: %s: %s", app.ErrOrchestratorBudget, display, what)
	}
	return fmt.Errorf("%w: %s refused the call: %s", app.ErrOrchestratorUnavailable, display, what)
}

// classifyRefusal tells whether an HTTP error answer is the orchestrator's own refusal (nil: a
// failure of the model, which falls back). code is the answer's error code ("" when none).
func classifyRefusal(status int, code string, h http.Header) *refusal {
	r := &refusal{status: status, code: code, retryAfter: retryAfter(h)}
	switch {
	case status == http.StatusTooManyRequests && code == "budget_exceeded":
		r.kind = refusedBudget
	case status == http.StatusTooManyRequests:
		r.kind = refusedRate
	case status == http.StatusServiceUnavailable && (code == "concurrency_limit_exceeded" || h.Get("Retry-After") != ""):
		r.kind = refusedConcurrency
	case status == http.StatusUnauthorized, status == http.StatusForbidden, status == http.StatusRequestEntityTooLarge,
		status == http.StatusUnsupportedMediaType, status == http.StatusNotFound && code != "model_not_found":
		r.kind = refusedOther
	default:
		return nil
	}
	return r
}

// retryAfter reads a Retry-After header in seconds (dates are not used by orchestrators); 0 when
// absent or malformed.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 3600 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// retryPolicy spaces the retries of orchestrator-level refusals.
type retryPolicy struct {
	horizon, base, cap time.Duration
	sleep              func(context.Context, time.Duration) error
}

func newRetryPolicy(cfg Config) retryPolicy {
	p := retryPolicy{horizon: cfg.RetryFor, base: cfg.RetryBaseDelay, cap: cfg.RetryMaxDelay, sleep: cfg.Sleep}
	if p.horizon == 0 {
		p.horizon = DefaultRetryFor
	}
	if p.base == 0 {
		p.base = defaultRetryBaseDelay
	}
	if p.cap == 0 {
		p.cap = defaultRetryMaxDelay
	}
	p.cap = max(p.cap, p.base)
	if p.sleep == nil {
		p.sleep = sleepCtx
	}
	return p
}

// delay is the wait before retry attempt+1: the Retry-After the orchestrator asked for, else full
// jitter over a doubling ceiling (so that BAP's workers do not retry in step).
func (p retryPolicy) delay(attempt int, asked time.Duration) time.Duration {
	if asked > 0 {
		return asked
	}
	ceiling := p.base << min(attempt, 20)
	if ceiling <= 0 || ceiling > p.cap {
		ceiling = p.cap
	}
	return p.base/2 + rand.N(ceiling-p.base/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// truncMarker replaces the text cut out of a message: the model is told that something is
// missing, and how much.
const truncMarker = "\n[… %d bytes left out by BAP to fit the orchestrator's request limit …]\n"

// encodeRequest encodes a chat request (no HTML escaping: a page's <, > and & stay one byte each).
func encodeRequest(cr chatRequest) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cr); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// errTooLarge: the request cannot be cut to fit the limit (its schema and fixed fields alone
// exceed it).
var errTooLarge = errors.New("the request cannot be cut to fit the orchestrator's request limit")

// fit encodes cr within limit bytes. When it is longer, the longest message is cut in its middle
// (its head and tail stay: the instructions and the latest state) and the marker says how much was
// left out, message after message, until it fits. It returns the body, the messages as sent and
// the bytes of text left out.
func fit(cr chatRequest, limit int) ([]byte, []chatMessage, int, error) {
	orig := cr.Messages
	keep := make([]int, len(orig))
	for i, m := range orig {
		keep[i] = len(m.Content)
	}
	msgs := make([]chatMessage, len(orig))
	for range 64 {
		cut := 0
		for i, m := range orig {
			var left int
			msgs[i].Role = m.Role
			msgs[i].Content, left = cutMiddle(m.Content, keep[i])
			cut += left
		}
		cr.Messages = msgs
		body, err := encodeRequest(cr)
		if err != nil {
			return nil, nil, 0, err
		}
		if len(body) <= limit {
			return body, msgs, cut, nil
		}
		longest := 0
		for i := range keep {
			if keep[i] > keep[longest] {
				longest = i
			}
		}
		if keep[longest] == 0 {
			return nil, nil, 0, errTooLarge
		}
		// A byte of text is at least a byte of JSON: cutting the excess (and a little for the
		// marker's digits) suffices unless the marker is new; the next round takes that too.
		keep[longest] = max(0, keep[longest]-(len(body)-limit)-8)
	}
	return nil, nil, 0, errTooLarge
}

// cutMiddle keeps keep bytes of s, three quarters from its head and one from its tail, on rune
// boundaries, with the marker between; it returns the text and how many bytes were left out.
func cutMiddle(s string, keep int) (string, int) {
	if keep >= len(s) {
		return s, 0
	}
	head := keep - keep/4
	tail := len(s) - keep/4
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	left := tail - head
	return s[:head] + fmt.Sprintf(truncMarker, left) + s[tail:], left
}

// modelName matches the model names recorded from an answer (ids such as
// "mlx-community/gemma-4-31b-it-4bit" or "gpt-4o-2024-08-06").
var modelName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,127}$`)

// snapshotSuffix is the suffix a provider adds to a model id for a dated snapshot of it.
var snapshotSuffix = regexp.MustCompile(`^-(\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$`)

// servedBy resolves the model an answer names as its server. The answer of contextual-orchestrator
// is the upstream's JSON unchanged, so its "model" is the model that served the call: the one
// asked for, a dated snapshot of it (recorded under the snapshot's name with the asked model's
// metadata), or — when the asked model is a router such as the virtual model — any other model,
// which must then be one of the eligible models of the call (approved for the role, satisfying the
// task's policy). Anything else is a failure of the call (reason), never recorded as the model
// asked for.
func (c *Client) servedBy(asked app.ModelInfo, named string, eligible []app.ModelInfo) (app.ModelInfo, string) {
	named = strings.TrimSpace(named)
	if named == "" || named == asked.ID {
		if c.isVirtual(asked.ID) {
			return asked, "the answer does not name the model that served it (asked the orchestrator's virtual model)"
		}
		return asked, ""
	}
	if !modelName.MatchString(named) {
		return asked, "the answer names its serving model in an unrecognisable form"
	}
	for _, m := range eligible {
		if m.ID == named && !c.isVirtual(m.ID) {
			return m, ""
		}
	}
	if !c.isVirtual(asked.ID) && strings.HasPrefix(named, asked.ID) && snapshotSuffix.MatchString(named[len(asked.ID):]) {
		m := asked
		m.ID = named
		return m, ""
	}
	return asked, fmt.Sprintf("answered by model %q, which is not an approved model of the role satisfying the task's model policy", named)
}

func (c *Client) isVirtual(id string) bool {
	for _, v := range c.virtual {
		if v == id {
			return true
		}
	}
	return false
}

// timeoutHeader is the remaining time of cctx in milliseconds, for X-Request-Timeout-Ms ("" when
// cctx has no deadline). contextual-orchestrator ignores it at commit e226e119 (its upstream call
// runs on for up to 90 s after BAP gave up); orchestrators that honour it stop in time.
func timeoutHeader(cctx context.Context) string {
	dl, ok := cctx.Deadline()
	if !ok {
		return ""
	}
	return strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10)
}
