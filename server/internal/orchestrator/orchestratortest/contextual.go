package orchestratortest

import (
	"encoding/json"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// ContextualCommit is the commit of ContextualWisdomLab/contextual-orchestrator whose exchanges
// the contextual mode (Config.Contextual) reproduces; its unmodified copy is what
// StartContextualOrchestrator runs.
const ContextualCommit = "e226e119"

// VirtualModel is the model id contextual-orchestrator always lists first: its own router.
const VirtualModel = "contextual-orchestrator"

// The contextual mode reproduces, for the exchanges BAP has with it, contextual-orchestrator at
// ContextualCommit (server.py and orchestrator.py there), so that tests can drive it into the
// cases the real service cannot be driven into cheaply:
//
//   - GET /healthz answers without authentication or rate limit;
//   - every other request counts against a fixed window of RateLimit requests per RateWindow per
//     client IP (60 per minute; discovery included): beyond it 429 rate_limit_exceeded, and the
//     refused request is not counted;
//   - a missing bearer (or, with Token set, another one) is 401 unauthorized;
//   - GET /v1/models lists {id, object, created, owned_by} only, the virtual model first; GET
//     /v1/models/{id} answers one entry, 404 model_not_found, or 400 invalid_model for an id
//     with a slash;
//   - a POST whose Content-Type is not application/json is 415 unsupported_media_type, one whose
//     Content-Length exceeds MaxBodyBytes (65,536) 413 request_too_large, a body that is not a
//     JSON object 400 invalid_json;
//   - POST /v1/chat/completions: an unknown top-level key is 400 unknown_fields, n other than 1
//     400 invalid_n, a bad reasoning_effort 400 invalid_reasoning_effort, no model 400
//     invalid_model, a model no agent serves 400 invalid_request; more than MaxRuns calls in
//     flight 503 concurrency_limit_exceeded;
//   - with response_format (or tools) the call goes to the agent of the model asked for (the
//     virtual model: to VirtualServes) and its answer comes back unchanged — "model" names the
//     serving model, usage is the upstream's (Answer.NoUsage leaves it out); without, the answer
//     names the model asked for (the orchestrator's own routing);
//   - an upstream failure (a scripted status 500) is 500 internal_error; a scripted status with an
//     ErrorCode answers that code (e.g. 429 budget_exceeded);
//   - a client that goes away does not stop the call: its run slot stays held until the upstream
//     answers (Delay) or times out (Hang: UpstreamTimeout, 90 s), and X-Request-Timeout-Ms is
//     ignored;
//   - every error is the envelope {"error": {"code", "message", "detail": {"request_id"}},
//     "error_code", "error_message", "error_detail"}.
type contextual struct {
	rateLimit       int
	window          time.Duration
	maxRuns         int
	maxBody         int64
	upstreamTimeout time.Duration
	virtualServes   string

	mu      sync.Mutex
	buckets map[string]bucket
	runs    int
	seq     int
}

type bucket struct {
	count   int
	resetAt time.Time
}

func newContextual(cfg Config) *contextual {
	c := &contextual{rateLimit: cfg.RateLimit, window: cfg.RateWindow, maxRuns: cfg.MaxRuns,
		maxBody: int64(cfg.MaxBodyBytes), upstreamTimeout: cfg.UpstreamTimeout, virtualServes: cfg.VirtualServes,
		buckets: map[string]bucket{}}
	if c.rateLimit == 0 {
		c.rateLimit = 60
	}
	if c.window <= 0 {
		c.window = time.Minute
	}
	if c.maxRuns <= 0 {
		c.maxRuns = 8
	}
	if c.maxBody <= 0 {
		c.maxBody = 64 << 10
	}
	if c.upstreamTimeout <= 0 {
		c.upstreamTimeout = 90 * time.Second
	}
	return c
}

// allow counts a request of ip against its window (a refused one is not counted).
func (c *contextual) allow(ip string) bool {
	if c.rateLimit < 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	b, ok := c.buckets[ip]
	if !ok || !now.Before(b.resetAt) {
		b = bucket{resetAt: now.Add(c.window)}
	}
	if b.count >= c.rateLimit {
		return false
	}
	b.count++
	c.buckets[ip] = b
	return true
}

func (c *contextual) acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs >= c.maxRuns {
		return false
	}
	c.runs++
	return true
}

func (c *contextual) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs--
}

// Runs is how many chat completions hold a run slot now (contextual mode; 0 otherwise): a call
// whose client went away still holds one until its upstream answers or times out.
func (s *Server) Runs() int {
	if s.ctx == nil {
		return 0
	}
	s.ctx.mu.Lock()
	defer s.ctx.mu.Unlock()
	return s.ctx.runs
}

// chatKeys are the top-level keys POST /v1/chat/completions accepts at ContextualCommit
// (ALLOWED_CHAT_KEYS with OPENAI_PASSTHROUGH_PARAM_KEYS).
var chatKeys = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`model messages orchestration orchestration_mode mode include_orchestration_trace stream
		attribution routing max_tool_calls temperature top_p max_tokens max_completion_tokens n stop seed presence_penalty
		frequency_penalty logit_bias logprobs top_logprobs user metadata parallel_tool_calls reasoning_effort response_format
		tools tool_choice functions function_call modalities prediction store service_tier stream_options audio
		web_search_options prompt_cache_key safety_identifier verbosity prompt_cache_retention reasoning background include
		tool_resources`) {
		chatKeys[k] = true
	}
}

func (s *Server) serveContextual(w http.ResponseWriter, r *http.Request, rec *Request, token string) int {
	c := s.ctx
	if r.URL.Path == "/healthz" && r.Method == http.MethodGet {
		return writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "service": "contextual-orchestrator"})
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	if !c.allow(ip) {
		return c.fail(w, http.StatusTooManyRequests, "rate_limit_exceeded", "request rate limit exceeded")
	}
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(strings.ToLower(auth), "bearer ") {
		return c.fail(w, http.StatusUnauthorized, "unauthorized", "bearer token is required")
	}
	if token != "" && strings.TrimSpace(auth[len("bearer "):]) != token {
		return c.fail(w, http.StatusUnauthorized, "unauthorized", "bearer token is invalid for this scope")
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": s.contextualListing()})
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/models/"):
		id, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/v1/models/"))
		if err != nil || id == "" || strings.Contains(id, "/") {
			return c.fail(w, http.StatusBadRequest, "invalid_model", "model id path must be a single segment")
		}
		for _, e := range s.contextualListing() {
			if e["id"] == strings.TrimSpace(id) {
				return writeJSON(w, http.StatusOK, e)
			}
		}
		return c.fail(w, http.StatusNotFound, "model_not_found", fmt.Sprintf("model %q not found", id))
	case r.Method == http.MethodPost:
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if mt != "application/json" {
			return c.fail(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "content-type must be application/json")
		}
		if r.ContentLength > c.maxBody {
			return c.fail(w, http.StatusRequestEntityTooLarge, "request_too_large", "request body exceeds configured limit")
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body, &body); err != nil || body == nil {
			return c.fail(w, http.StatusBadRequest, "invalid_json", "request body must be a JSON object")
		}
		if r.URL.Path != "/v1/chat/completions" {
			return c.fail(w, http.StatusNotFound, "route_not_found", "not found")
		}
		return s.contextualComplete(w, r, rec, body)
	default:
		return c.fail(w, http.StatusNotFound, "route_not_found", "not found")
	}
}

// contextualListing is GET /v1/models at ContextualCommit: the virtual model, then each model
// once, with owned_by its agent's provider_name.
func (s *Server) contextualListing() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]any{{"id": VirtualModel, "object": "model", "created": 1700000000, "owned_by": VirtualModel}}
	seen := map[string]bool{VirtualModel: true}
	for _, m := range s.models {
		if seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		owner := m.OwnedBy
		if owner == "" {
			owner = m.Provider
		}
		if owner == "" {
			owner = "agent_pool"
		}
		out = append(out, map[string]any{"id": m.ID, "object": "model", "created": 1700000000, "owned_by": owner})
	}
	return out
}

func (s *Server) contextualComplete(w http.ResponseWriter, r *http.Request, rec *Request, body map[string]json.RawMessage) int {
	c := s.ctx
	for k := range body {
		if !chatKeys[k] {
			return c.fail(w, http.StatusBadRequest, "unknown_fields", "unknown fields: "+k)
		}
	}
	present := func(k string) bool { v, ok := body[k]; return ok && string(v) != "null" }
	if present("n") {
		var n float64
		if json.Unmarshal(body["n"], &n) != nil || n != 1 {
			return c.fail(w, http.StatusBadRequest, "invalid_n", "n must be 1 on /v1/chat/completions")
		}
	}
	if present("reasoning_effort") {
		var e string
		_ = json.Unmarshal(body["reasoning_effort"], &e)
		switch strings.ToLower(strings.TrimSpace(e)) {
		case "", "none", "minimal", "low", "medium", "high":
		default:
			return c.fail(w, http.StatusBadRequest, "invalid_reasoning_effort", "reasoning_effort must be one of none, minimal, low, medium, high on /v1/chat/completions")
		}
	}
	var req ChatRequest
	if err := json.Unmarshal(rec.Body, &req); err != nil {
		return c.fail(w, http.StatusBadRequest, "invalid_request", "malformed chat completion request")
	}
	req.Model = strings.TrimSpace(req.Model)
	s.mu.Lock()
	rec.Chat = &req
	known, first := false, ""
	for _, m := range s.models {
		known = known || m.ID == req.Model
		if first == "" {
			first = m.ID
		}
	}
	s.mu.Unlock()
	if req.Model == "" {
		return c.fail(w, http.StatusBadRequest, "invalid_model", "model is required")
	}
	serving := req.Model
	if req.Model == VirtualModel {
		serving = c.virtualServes
		if serving == "" {
			serving = first
		}
	} else if !known {
		return c.fail(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("requested model %q is not configured", req.Model))
	}
	if len(req.Messages) == 0 {
		return c.fail(w, http.StatusBadRequest, "invalid_messages", "messages must be a non-empty array")
	}
	if !c.acquire() {
		return c.fail(w, http.StatusServiceUnavailable, "concurrency_limit_exceeded", "too many concurrent orchestration runs")
	}
	a, ok := s.nextFor(rec, serving)
	if !ok {
		a = Answer{Status: http.StatusInternalServerError}
	}
	status, gone := s.runUpstream(r, a)
	c.release()
	s.setPending(0) // wake waiters: a run slot was released
	if status == 0 && (a.Status == 0 || a.Status == http.StatusOK) {
		named := req.Model // the orchestrator's own routing names the model asked for
		if present("response_format") || present("tools") {
			named = serving // passthrough: the upstream's answer, unchanged
		}
		if a.ServedBy != "" {
			named = a.ServedBy
		}
		if a.RawBody != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(a.RawBody))
		} else {
			writeJSON(w, http.StatusOK, completion(rec, a, named))
		}
		status = http.StatusOK
	} else {
		if status == 0 {
			status = a.Status
		}
		code := a.ErrorCode
		if code == "" || status == http.StatusInternalServerError {
			// Every upstream failure arrives as 500 internal_error.
			code, status = "internal_error", http.StatusInternalServerError
		}
		c.fail(w, status, code, strings.ReplaceAll(code, "_", " "))
	}
	if gone {
		return StatusClientGone
	}
	return status
}

// runUpstream waits for the scripted upstream: its Delay, or UpstreamTimeout for a Hang (then a
// 500). The client going away does not end it (it is counted in Gone); Close does (503).
func (s *Server) runUpstream(r *http.Request, a Answer) (status int, gone bool) {
	d := a.Delay
	if a.Hang {
		d = s.ctx.upstreamTimeout
	}
	if d <= 0 {
		return 0, false
	}
	s.setPending(1)
	defer s.setPending(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	clientGone := r.Context().Done()
	for {
		select {
		case <-t.C:
			if a.Hang {
				return http.StatusInternalServerError, gone
			}
			return 0, gone
		case <-clientGone:
			clientGone, gone = nil, true
			s.mu.Lock()
			s.gone++
			s.mu.Unlock()
		case <-s.done:
			return http.StatusServiceUnavailable, gone
		}
	}
}

// fail writes contextual-orchestrator's error envelope.
func (c *contextual) fail(w http.ResponseWriter, status int, code, message string) int {
	c.mu.Lock()
	c.seq++
	id := fmt.Sprintf("req%029d", c.seq)
	c.mu.Unlock()
	detail := map[string]any{"request_id": id}
	return writeJSON(w, status, map[string]any{
		"error":      map[string]any{"code": code, "message": message, "detail": detail},
		"error_code": code, "error_message": message, "error_detail": detail,
	})
}
