package orchestrator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/idempotency"
	"github.com/originweave/bap/server/internal/redact"
	"github.com/originweave/bap/server/internal/version"
)

// Defaults and bounds.
const (
	DefaultCallTimeout  = 60 * time.Second
	DefaultDiscoveryTTL = 30 * time.Second
	// maxDiscoveryTimeout bounds GET /v1/models (the call timeout, if shorter, bounds it instead).
	maxDiscoveryTimeout = 10 * time.Second
	// minRefresh is how old the model list must be before a role naming a model it lacks refreshes
	// it on demand.
	minRefresh = 2 * time.Second
	// maxStale is how long a model list is still used while the orchestrator cannot be reached to
	// refresh it (its calls then fail, and fall back, on their own); retryAfterFailure spaces the
	// refresh attempts meanwhile.
	maxStale          = 5 * time.Minute
	retryAfterFailure = 5 * time.Second
	// maxBody bounds the answers read from the orchestrator.
	maxBody = 8 << 20
	// maxCachedSchemas bounds the compiled answer schemas kept.
	maxCachedSchemas = 256
)

// Config configures a Client.
type Config struct {
	// URL is the orchestrator's base URL: http(s)://host[:port][/prefix], with or without the
	// trailing /v1 (…/v1/models and …/v1/chat/completions are derived from it).
	URL string
	// Token is BAP's workload credential, sent as "Authorization: Bearer <Token>"; empty sends none.
	// It is registered with the log redaction layer (redact.Global).
	Token string
	// Models approves models per role and gives their metadata. Its zero value (no roles, no
	// default) approves every model the orchestrator lists for every role, in the order listed.
	Models FileConfig
	// CallTimeout bounds each model call (default 60 s); the caller's ctx always bounds it too.
	CallTimeout time.Duration
	// DiscoveryTTL is how long the discovered model list is reused (default 30 s).
	DiscoveryTTL time.Duration
	// HTTPClient is the client to use (default: one that follows no redirect, so that the
	// credential never leaves the configured origin).
	HTTPClient *http.Client
	// Logger receives operational logs (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of the discovery cache (default time.Now).
	Now func() time.Time

	// MaxRequestBytes bounds the body of each chat completion request (default: the
	// configuration's max_request_bytes, else DefaultMaxRequestBytes, the 64 KiB limit of
	// contextual-orchestrator): longer prompts are cut with a marker (see fit).
	MaxRequestBytes int
	// RetryFor bounds how long an orchestrator-level refusal (429 rate or budget limit, 503
	// concurrency limit) is retried with backoff before the call gives up (default
	// DefaultRetryFor); the caller's deadline bounds it too. RetryBaseDelay and RetryMaxDelay
	// shape the backoff (full jitter, doubling; defaults 250 ms and 5 s).
	RetryFor                      time.Duration
	RetryBaseDelay, RetryMaxDelay time.Duration
	// VirtualModels are listed model ids that are not models but the orchestrator's own router
	// (default: contextual-orchestrator's "contextual-orchestrator"): never approved unless a role
	// names them, and then only answers from an approved model are accepted.
	VirtualModels []string
	// Sleep waits between retries (default: a timer that ends with ctx); tests may shorten it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Tracer records one span per model call (nil: none). A span names the role, the model and
	// the outcome; never a prompt, an answer, a reason's text or the credential.
	Tracer app.Tracer
}

// Client implements app.Orchestrator over HTTP. It is safe for concurrent use.
type Client struct {
	base        string // …/v1, no trailing slash
	display     string // the URL without userinfo, for logs
	token       string
	models      FileConfig
	allListed   bool // no roles configured: every listed model is approved for every role
	callTimeout time.Duration
	ttl         time.Duration
	hc          *http.Client
	log         *slog.Logger
	now         func() time.Time
	tracer      app.Tracer

	mu         sync.Mutex
	cache      *discovered
	refreshing chan struct{} // closed when the refresh in flight ends; nil when none is
	retryAt    time.Time     // after a failed refresh, stale lists are served until then

	schemaMu sync.Mutex
	schemas  map[[32]byte]*jsonschema.Schema

	maxRequest int
	retry      retryPolicy
	virtual    []string

	metrics *metrics // see Collect
}

var _ app.Orchestrator = (*Client)(nil)

// discovered is one answer of GET /v1/models.
type discovered struct {
	at    time.Time
	order []string                 // model ids as listed
	byID  map[string]app.ModelInfo // metadata the orchestrator gave (unknown: empty, -1)
}

// New checks cfg and returns a Client. It does not contact the orchestrator (see Refresh).
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(cfg.URL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("orchestrator URL %q: want http(s)://host[:port][/path]", redact.String(cfg.URL))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("orchestrator URL: no query or fragment, please")
	}
	if !cfg.Models.ApprovesAllListed() || len(cfg.Models.Models) > 0 {
		if err := cfg.Models.Check(); err != nil {
			return nil, err
		}
	}
	if cfg.CallTimeout < 0 || cfg.DiscoveryTTL < 0 || cfg.RetryFor < 0 || cfg.RetryBaseDelay < 0 || cfg.RetryMaxDelay < 0 {
		return nil, errors.New("orchestrator timeouts must not be negative")
	}
	maxRequest := cfg.MaxRequestBytes
	if maxRequest == 0 {
		maxRequest = cfg.Models.MaxRequestBytes
	}
	if maxRequest == 0 {
		maxRequest = DefaultMaxRequestBytes
	}
	if maxRequest < minRequestBytes {
		return nil, fmt.Errorf("orchestrator max request size %d: at least %d bytes, please", maxRequest, minRequestBytes)
	}
	c := &Client{
		display:     u.Redacted(),
		token:       cfg.Token,
		models:      cfg.Models,
		allListed:   cfg.Models.ApprovesAllListed(),
		callTimeout: cfg.CallTimeout,
		ttl:         cfg.DiscoveryTTL,
		hc:          cfg.HTTPClient,
		log:         cfg.Logger,
		now:         cfg.Now,
		schemas:     map[[32]byte]*jsonschema.Schema{},
		metrics:     newMetrics(),
		maxRequest:  maxRequest,
		retry:       newRetryPolicy(cfg),
		virtual:     cfg.VirtualModels,
	}
	if c.virtual == nil {
		c.virtual = []string{VirtualModel}
	}
	path := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(path, "/v1") {
		path += "/v1"
	}
	u.Path, u.RawPath = path, ""
	c.base = u.String()
	if c.callTimeout == 0 {
		c.callTimeout = DefaultCallTimeout
	}
	if c.ttl == 0 {
		c.ttl = DefaultDiscoveryTTL
	}
	if c.hc == nil {
		c.hc = &http.Client{
			Transport: http.DefaultTransport,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return errors.New("the orchestrator answered with a redirect, which BAP does not follow")
			},
		}
	}
	c.tracer = app.TracerOrNone(cfg.Tracer)
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.token != "" {
		redact.Global.Add(c.token)
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		c.log.Warn("the orchestrator URL is plain http to a non-loopback host: prompts and the workload credential travel unencrypted", "url", c.display)
	}
	return c, nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// URL is the configured orchestrator URL without userinfo, for logs.
func (c *Client) URL() string { return c.display }

// Refresh asks the orchestrator for its models now and returns how many it lists.
func (c *Client) Refresh(ctx context.Context) (int, error) {
	d, err := c.discover(ctx, 0, true)
	if err != nil {
		return 0, err
	}
	return len(d.order), nil
}

// Eligible implements app.Orchestrator.
func (c *Client) Eligible(ctx context.Context, role string, pol app.ModelPolicy) ([]app.ModelInfo, error) {
	if !slices.Contains(Roles, role) {
		return nil, fmt.Errorf("%w (unknown model role %q)", app.ErrNoCompliantModel, role)
	}
	d, err := c.discover(ctx, c.ttl, false)
	if err != nil {
		return nil, err
	}
	ids := c.approved(role, d)
	if c.now().Sub(d.at) >= minRefresh && slices.ContainsFunc(ids, func(id string) bool { _, ok := d.byID[id]; return !ok }) {
		// A model approved for the role is not listed: it may have been added since the list was
		// fetched. Ask again (on failure the list we have stands).
		if d2, err := c.discover(ctx, minRefresh, false); err == nil {
			d, ids = d2, c.approved(role, d2)
		} else if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	var out []app.ModelInfo
	var why []string
	for _, id := range ids {
		listed, ok := d.byID[id]
		if !ok {
			why = append(why, id+": not offered by the orchestrator")
			continue
		}
		m := c.merge(listed)
		if ok, reason := Satisfies(m, pol); !ok {
			if _, configured := c.models.Models[id]; !configured && !listedMetadata(listed) {
				// The usual case with contextual-orchestrator, whose listing has no metadata.
				reason = `listed by the orchestrator but not configured: BAP's model configuration has no "models" entry for it, so its provider, region, retention and data classification are unknown (` + reason + ")"
			}
			why = append(why, id+": "+reason)
			continue
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		if len(ids) == 0 {
			why = append(why, "no model approved for the role")
		}
		return nil, fmt.Errorf("%w (role %s: %s)", app.ErrNoCompliantModel, role, strings.Join(why, "; "))
	}
	return out, nil
}

// approved lists the approved model ids of role, in order. Without a role configuration every
// listed model is approved — but never a virtual model (the orchestrator's own router, which
// would answer with a model nobody approved).
func (c *Client) approved(role string, d *discovered) []string {
	if c.allListed {
		return slices.DeleteFunc(slices.Clone(d.order), c.isVirtual)
	}
	return c.models.approved(role)
}

// listedMetadata reports whether a listing gave any of the metadata policy is judged on beyond a
// provider name (owned_by).
func listedMetadata(m app.ModelInfo) bool {
	return m.Region != "" || m.RetentionDays >= 0 || m.MaxClassification != ""
}

// merge overlays the configured metadata of a model on what the orchestrator listed.
func (c *Client) merge(m app.ModelInfo) app.ModelInfo {
	mc, ok := c.models.Models[m.ID]
	if !ok {
		return m
	}
	if mc.Provider != "" {
		m.Provider = mc.Provider
	}
	if mc.Region != "" {
		m.Region = mc.Region
	}
	if mc.RetentionDays != nil {
		m.RetentionDays = *mc.RetentionDays
	}
	if mc.MaxClassification != "" {
		m.MaxClassification = mc.MaxClassification
	}
	if mc.InputPricePerM != nil {
		m.InputPricePerM = *mc.InputPricePerM
	}
	if mc.OutputPricePerM != nil {
		m.OutputPricePerM = *mc.OutputPricePerM
	}
	return m
}

// discover returns a model list at most maxAge old (force: fetch whatever the cache holds),
// sharing one fetch among concurrent callers. When the fetch fails, a list younger than maxStale
// is still used; with none, the error wraps app.ErrOrchestratorUnavailable.
func (c *Client) discover(ctx context.Context, maxAge time.Duration, force bool) (*discovered, error) {
	for {
		c.mu.Lock()
		d := c.cache
		now := c.now()
		if d != nil && !force && (now.Sub(d.at) < maxAge || now.Before(c.retryAt)) {
			c.mu.Unlock()
			return d, nil
		}
		if wait := c.refreshing; wait != nil {
			c.mu.Unlock()
			select {
			case <-wait:
				force = false // the fetch that just ended is as fresh as this caller needs
				maxAge = max(maxAge, time.Minute)
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.refreshing = done
		c.mu.Unlock()

		nd, err := c.fetchModels(ctx)
		if err == nil {
			c.metrics.discovery.WithLabelValues("listed").Inc()
		} else if ctx.Err() == nil {
			c.metrics.discovery.WithLabelValues("failed").Inc()
		}

		c.mu.Lock()
		c.refreshing = nil
		close(done)
		if err == nil {
			c.cache, c.retryAt = nd, time.Time{}
			c.mu.Unlock()
			return nd, nil
		}
		if ctx.Err() != nil {
			c.mu.Unlock()
			return nil, ctx.Err()
		}
		stale := d != nil && c.now().Sub(d.at) < maxStale
		if stale {
			c.retryAt = c.now().Add(retryAfterFailure)
		}
		c.mu.Unlock()
		if stale && !force {
			c.log.Warn("model discovery failed; using the previous model list", "url", c.display, "err", err)
			return d, nil
		}
		return nil, fmt.Errorf("%w: %s: %w", app.ErrOrchestratorUnavailable, c.display, err)
	}
}

// fetchModels performs GET /v1/models.
func (c *Client) fetchModels(ctx context.Context) (*discovered, error) {
	timeout := min(c.callTimeout, maxDiscoveryTimeout)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, c.base+"/models", nil)
	if err != nil {
		return nil, err
	}
	c.header(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, errors.New(transportReason(err, cctx, timeout))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, errors.New(transportReason(err, cctx, timeout))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/models: %s", httpReason(resp.StatusCode, raw))
	}
	if len(raw) > maxBody {
		return nil, errors.New("GET /v1/models: answer too large")
	}
	var list struct {
		Data []map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errors.New("GET /v1/models: answer is not a model list")
	}
	d := &discovered{at: c.now(), byID: map[string]app.ModelInfo{}}
	for _, e := range list.Data {
		m, ok := parseListed(e)
		if !ok {
			continue
		}
		if _, dup := d.byID[m.ID]; dup {
			continue
		}
		d.order = append(d.order, m.ID)
		d.byID[m.ID] = m
	}
	return d, nil
}

// parseListed reads one /v1/models entry. Metadata fields may sit on the entry itself or in a
// "metadata" object beside it; a field of the wrong type or value stays unknown.
func parseListed(e map[string]json.RawMessage) (app.ModelInfo, bool) {
	var id string
	if json.Unmarshal(e["id"], &id) != nil || strings.TrimSpace(id) == "" {
		return app.ModelInfo{}, false
	}
	var meta map[string]json.RawMessage
	_ = json.Unmarshal(e["metadata"], &meta)
	field := func(k string) json.RawMessage {
		if v, ok := e[k]; ok && string(v) != "null" {
			return v
		}
		return meta[k]
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(field(k), &s)
		return strings.TrimSpace(s)
	}
	m := app.ModelInfo{ID: id, Provider: str("provider"), Region: str("region"), RetentionDays: -1}
	if m.Provider == "" {
		m.Provider = str("owned_by")
	}
	var days float64
	if json.Unmarshal(field("retention_days"), &days) == nil && days >= 0 && days == float64(int(days)) {
		m.RetentionDays = int(days)
	}
	if c := str("max_classification"); classRank(c) >= 0 {
		m.MaxClassification = c
	}
	for k, p := range map[string]*float64{"input_price_per_m": &m.InputPricePerM, "output_price_per_m": &m.OutputPricePerM} {
		var v float64
		if json.Unmarshal(field(k), &v) == nil && v >= 0 {
			*p = v
		}
	}
	return m, true
}

func (c *Client) header(req *http.Request) {
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "bap/"+version.Software)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// The chat completions request, as sent.
type (
	chatMessage struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	chatRequest struct {
		Model           string         `json:"model"`
		Messages        []chatMessage  `json:"messages"`
		ResponseFormat  responseFormat `json:"response_format"`
		MaxTokens       int            `json:"max_tokens,omitempty"`
		ReasoningEffort string         `json:"reasoning_effort,omitempty"`
		Stream          bool           `json:"stream"`
		N               int            `json:"n"`
	}
	responseFormat struct {
		Type       string         `json:"type"`
		JSONSchema jsonSchemaSpec `json:"json_schema"`
	}
	jsonSchemaSpec struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict bool            `json:"strict"`
	}
	chatResponse struct {
		ID      string `json:"id"`
		Choices []struct {
			Message struct {
				Content json.RawMessage `json:"content"`
				Refusal *string         `json:"refusal"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Model string `json:"model"`
		Usage *struct {
			PromptTokens     *int `json:"prompt_tokens"`
			CompletionTokens *int `json:"completion_tokens"`
		} `json:"usage"`
	}
)

var schemaName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// PromptDigest is the SHA-256 (hex) of the canonical JSON of messages as the adapter sends them
// ([{"content":…,"role":…},…], keys sorted, no whitespace): the prompt digest of provenance.
func PromptDigest(msgs []app.ModelMessage) string {
	return promptDigest(wireMessages(msgs))
}

func wireMessages(msgs []app.ModelMessage) []chatMessage {
	out := make([]chatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = chatMessage{Role: m.Role, Content: m.Content}
	}
	return out
}

func promptDigest(msgs []chatMessage) string {
	b, err := json.Marshal(msgs)
	if err == nil {
		if canon, cerr := idempotency.Canonical(b); cerr == nil {
			b = canon
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Complete implements app.Orchestrator.
func (c *Client) Complete(ctx context.Context, req app.ModelRequest) (*app.ModelReply, error) {
	if len(req.Messages) == 0 {
		return nil, errors.New("model request without messages")
	}
	name := req.SchemaName
	if name == "" {
		name = "answer"
	}
	if !schemaName.MatchString(name) {
		return nil, fmt.Errorf("model request: schema name %q: want 1-64 of [A-Za-z0-9_-]", name)
	}
	schema, err := c.compile(req.Schema)
	if err != nil {
		return nil, fmt.Errorf("model request %s: %w", name, err)
	}
	models, err := c.Eligible(ctx, req.Role, req.Policy)
	if err != nil {
		return nil, err
	}
	msgs := wireMessages(req.Messages)
	var failures []app.ModelFailure
	for _, m := range models {
		start := time.Now()
		a, reason, refused := c.callRetrying(ctx, m, name, schema, req, msgs, models)
		latency := time.Since(start)
		if ctx.Err() != nil {
			c.metrics.call(req.Role, m, outcomeCancelled, latency, a)
			return nil, fmt.Errorf("model call (%s, role %s): %w", m.ID, req.Role, ctx.Err())
		}
		if refused != nil {
			// The orchestrator itself refuses (and kept refusing): the next model sits behind the
			// same limiter, so there is no fallback.
			c.metrics.call(req.Role, m, outcomeRefused, latency, a)
			c.log.Warn("the orchestrator refused the model call", "role", req.Role, "model", m.ID, "err", refused,
				"failed_before", len(failures))
			return nil, fmt.Errorf("model call (%s, role %s): %w", m.ID, req.Role, refused)
		}
		if reason != "" {
			c.metrics.call(req.Role, m, outcomeFailed, latency, a)
			failures = append(failures, app.ModelFailure{Model: m, Reason: reason, Latency: latency,
				InputTokens: a.in, OutputTokens: a.out, CostUSD: cost(m, a), UsageUnknown: a.unknown})
			c.log.Warn("model failed", "role", req.Role, "model", m.ID, "reason", reason, "latency_ms", latency.Milliseconds(),
				"next", len(failures) < len(models))
			continue
		}
		c.metrics.call(req.Role, a.served, outcomeAnswered, latency, a)
		rep := &app.ModelReply{
			Model:          a.served,
			Content:        a.content,
			PromptSHA256:   a.digest,
			InputTokens:    a.in,
			OutputTokens:   a.out,
			CostUSD:        cost(a.served, a),
			Latency:        latency,
			Reasoning:      req.Reasoning,
			UsageUnknown:   a.unknown,
			TruncatedBytes: a.cut,
			Fallbacks:      failures,
			ReplyID:        a.id,
		}
		if a.served.ID != m.ID {
			rep.RequestedModel = m.ID
		}
		return rep, nil
	}
	c.metrics.exhausted.WithLabelValues(req.Role).Inc()
	return nil, &app.AllModelsFailedError{Role: req.Role, Failures: failures}
}

type answer struct {
	content json.RawMessage
	in, out int
	unknown bool          // no usage in the answer: in and out are the worst case
	served  app.ModelInfo // the model the answer names as its server
	digest  string        // of the messages as sent
	cut     int           // bytes of message text left out to fit the body limit
	id      string        // the answer's id, as app.ParseDeliveryID admits it ("" otherwise)
}

// cost is what an answer's tokens cost at the model's prices (0 when they are unknown).
func cost(m app.ModelInfo, a answer) float64 {
	return (float64(a.in)*m.InputPricePerM + float64(a.out)*m.OutputPricePerM) / 1e6
}

// callRetrying asks one model, retrying orchestrator-level refusals with backoff for up to the
// retry horizon (and never past ctx's deadline). A non-nil error is a refusal that stood; a
// non-empty reason is a failure of the model.
func (c *Client) callRetrying(ctx context.Context, m app.ModelInfo, name string, schema *jsonschema.Schema, req app.ModelRequest, msgs []chatMessage, eligible []app.ModelInfo) (answer, string, error) {
	start := time.Now()
	giveUp := start.Add(c.retry.horizon)
	if dl, ok := ctx.Deadline(); ok && dl.Before(giveUp) {
		giveUp = dl
	}
	for attempt := 0; ; attempt++ {
		a, reason, ref := c.call(ctx, m, name, schema, req, msgs, eligible)
		if ref == nil || ctx.Err() != nil {
			return a, reason, nil
		}
		c.metrics.refusals.WithLabelValues(ref.kind).Inc()
		if !ref.retryable() {
			return a, "", ref.err(c.display, 0)
		}
		d := c.retry.delay(attempt, ref.retryAfter)
		if time.Now().Add(d).After(giveUp) {
			return a, "", ref.err(c.display, time.Since(start))
		}
		c.log.Info("the orchestrator refused the model call; retrying", "model", m.ID, "status", ref.status, "code", ref.code,
			"attempt", attempt+1, "delay_ms", d.Milliseconds())
		if err := c.retry.sleep(ctx, d); err != nil {
			return answer{}, "", nil // ctx ended: the caller reports it
		}
	}
}

// call asks one model once. A non-nil refusal is the orchestrator's own (see classifyRefusal); a
// non-empty reason is a model failure (short, and free of prompt text, answer text and the
// credential: it is recorded in task history).
func (c *Client) call(ctx context.Context, m app.ModelInfo, name string, schema *jsonschema.Schema, req app.ModelRequest, msgs []chatMessage, eligible []app.ModelInfo) (a answer, reason string, ref *refusal) {
	ctx, sp := c.tracer.Start(ctx, "chat "+m.ID, app.SpanClient) // the GenAI semantic conventions' span name
	sp.SetAttr("gen_ai.operation.name", "chat")
	sp.SetAttr("gen_ai.request.model", m.ID)
	sp.SetAttr("bap.model.role", req.Role)
	defer func() {
		if a.served.ID != "" {
			sp.SetAttr("gen_ai.response.model", a.served.ID)
		}
		sp.SetInt("gen_ai.usage.input_tokens", int64(a.in))
		sp.SetInt("gen_ai.usage.output_tokens", int64(a.out))
		switch {
		case ref != nil:
			sp.SetAttr("bap.model.outcome", "refused")
		case reason != "":
			sp.SetAttr("bap.model.outcome", "failed") // the reason stays in task history
		default:
			sp.SetAttr("bap.model.outcome", "answered")
		}
		sp.End(nil)
	}()
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	body, sent, cut, err := fit(chatRequest{
		Model:    m.ID,
		Messages: msgs,
		ResponseFormat: responseFormat{Type: "json_schema", JSONSchema: jsonSchemaSpec{
			Name: name, Schema: req.Schema, Strict: true,
		}},
		MaxTokens:       req.MaxTokens,
		ReasoningEffort: req.Reasoning,
		N:               1,
	}, c.maxRequest)
	if err != nil {
		return answer{}, "", &refusal{kind: refusedOther, reason: fmt.Sprintf("%v (%d bytes)", err, c.maxRequest)}
	}
	a = answer{served: m, digest: promptDigest(sent), cut: cut}
	if cut > 0 {
		c.log.Info("prompt cut to fit the orchestrator's request limit", "role", req.Role, "model", m.ID, "cut_bytes", cut, "limit", c.maxRequest)
	}
	hreq, err := http.NewRequestWithContext(cctx, http.MethodPost, c.base+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return a, "request could not be built", nil
	}
	c.header(hreq)
	hreq.Header.Set("Content-Type", "application/json")
	if ms := timeoutHeader(cctx); ms != "" {
		hreq.Header.Set("X-Request-Timeout-Ms", ms)
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return a, transportReason(err, cctx, c.callTimeout), nil
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return a, transportReason(err, cctx, c.callTimeout), nil
	}
	if resp.StatusCode != http.StatusOK {
		if ref := classifyRefusal(resp.StatusCode, errorCode(raw), resp.Header); ref != nil {
			return a, "", ref
		}
		return a, httpReason(resp.StatusCode, raw), nil
	}
	if len(raw) > maxBody {
		return a, "answer too large", nil
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return a, "answer is not a chat completion", nil
	}
	if u := cr.Usage; u != nil && u.PromptTokens != nil && u.CompletionTokens != nil {
		a.in, a.out = max(*u.PromptTokens, 0), max(*u.CompletionTokens, 0)
	} else {
		// Unknown usage is not zero: charge the worst case (a token is at least a byte of the
		// request; the answer at most max_tokens).
		a.unknown, a.in, a.out = true, len(body), req.MaxTokens
		if a.out <= 0 {
			a.out = worstCaseOutputTokens
		}
	}
	served, why := c.servedBy(m, cr.Model, eligible)
	if why != "" {
		return a, why, nil
	}
	a.served = served
	if len(cr.Choices) == 0 {
		return a, "answer has no choices", nil
	}
	ch := cr.Choices[0]
	if ch.Message.Refusal != nil && *ch.Message.Refusal != "" {
		return a, "the model refused to answer", nil
	}
	if ch.FinishReason == "length" {
		return a, "answer cut off at max_tokens", nil
	}
	var text string
	if err := json.Unmarshal(ch.Message.Content, &text); err != nil {
		return a, "answer content is not text", nil
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return a, "answer is not JSON", nil
	}
	if err := schema.Validate(doc); err != nil {
		return a, "answer does not match schema " + name + schemaLocation(err), nil
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(text)); err != nil {
		return a, "answer is not JSON", nil
	}
	id, err := app.ParseDeliveryID(cr.ID)
	if err != nil {
		// Fail closed (ADR 0031): the inbox processes a reply exactly once by its id. A key derived
		// from the content would take a second, equal answer to another call (a planner that
		// proposes the same click twice) for a redelivery, so an answer without an id this
		// runtime can record is this model's failure, and the call falls back.
		return a, "the answer carries no usable id (a chat completion's id of 1-255 visible ASCII characters): without one it cannot be processed exactly once", nil
	}
	a.id = id
	a.content = compact.Bytes()
	return a, "", nil
}

// compile compiles (and caches) an answer schema. External references are refused.
func (c *Client) compile(raw json.RawMessage) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("no answer schema")
	}
	key := sha256.Sum256(raw)
	c.schemaMu.Lock()
	s, ok := c.schemas[key]
	c.schemaMu.Unlock()
	if ok {
		return s, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("answer schema is not JSON: %w", err)
	}
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.AssertFormat()
	comp.UseLoader(noLoader{})
	const loc = "urn:bap:model-answer"
	if err := comp.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("answer schema: %w", err)
	}
	s, err = comp.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("answer schema: %w", err)
	}
	c.schemaMu.Lock()
	if len(c.schemas) < maxCachedSchemas {
		c.schemas[key] = s
	}
	c.schemaMu.Unlock()
	return s, nil
}

type noLoader struct{}

func (noLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("answer schemas may not refer to other documents (%s)", u)
}

// schemaLocation names where an answer first breaks its schema: a JSON pointer into the answer
// and the keyword it breaks (never the answer's values).
func schemaLocation(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return ""
	}
	for len(ve.Causes) > 0 {
		ve = ve.Causes[0]
	}
	p := "/" + strings.Join(ve.InstanceLocation, "/")
	if len(p) > 120 {
		p = p[:120] + "…"
	}
	if ve.ErrorKind != nil {
		if kw := ve.ErrorKind.KeywordPath(); len(kw) > 0 {
			p += ": " + kw[len(kw)-1]
		}
	}
	return " (at " + p + ")"
}

var identifier = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// errorCode is the code of an error answer: the OpenAI-style error.code (contextual-orchestrator's
// envelope carries it there too, and as error_code), when it is an identifier; "" otherwise.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code any `json:"code"`
		} `json:"error"`
		ErrorCode string `json:"error_code"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	if code, ok := e.Error.Code.(string); ok && identifier.MatchString(code) {
		return code
	}
	if identifier.MatchString(e.ErrorCode) {
		return e.ErrorCode
	}
	return ""
}

// httpReason describes an HTTP error answer by its status and, when the body is an OpenAI-style
// error object, its type or code — never its message, which may echo the prompt.
func httpReason(status int, body []byte) string {
	reason := fmt.Sprintf("HTTP %d", status)
	var e struct {
		Error struct {
			Type string `json:"type"`
			Code any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil {
		if code, ok := e.Error.Code.(string); ok && identifier.MatchString(code) {
			return reason + " " + code
		}
		if identifier.MatchString(e.Error.Type) {
			return reason + " " + e.Error.Type
		}
	}
	return reason
}

// transportReason describes a failed exchange: a timeout of the call, or the network error
// (without the URL; passed through redaction anyway).
func transportReason(err error, cctx context.Context, timeout time.Duration) string {
	if errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("timed out after %s", timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return redact.String("request failed: " + err.Error())
}
