// Package orchestratortest is an in-process fake of an OpenAI-compatible model orchestrator, the
// one external service BAP's tests cannot run: GET /v1/models lists configured models with BAP's
// metadata extension fields, POST /v1/chat/completions answers from scripts, and every request is
// logged (headers and body) so that tests can check what reached the "model" — that canary secrets
// never do, that the Authorization header is BAP's workload credential.
//
//	srv := orchestratortest.Start(t, orchestratortest.Config{
//		Models: []orchestratortest.Model{{ID: "m-large", Provider: "acme", Region: "eu",
//			RetentionDays: orchestratortest.Days(0), MaxClassification: "restricted"}},
//		Token: "workload-token",
//	})
//	srv.Script("m-large", orchestratortest.Fail(500), orchestratortest.JSON(map[string]any{"done": true}))
//	// point the adapter at srv.URL …
//	if srv.Saw("canary-secret") { t.Fatal("a protected value reached the orchestrator") }
//
// Answers: a queue per model (Script; the model id "*" is a queue any model answers from once its
// own is empty), then Config.Handler / SetHandler, else HTTP 500 "unscripted". An answer may be a
// JSON text, an HTTP error, a delay, or a hang until the client cancels (Slow, Hang).
//
// Tests of any package may import it; non-test code may not (archtest), except its own
// cmd/fakeorch, a standalone server for trying BAP by hand. It uses the standard library only.
package orchestratortest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Model is a model the fake lists. The fields beyond id and owned_by are BAP's metadata extension
// of the /v1/models entry; nil or empty ones are left out of the listing.
type Model struct {
	ID                string   `json:"id"`
	OwnedBy           string   `json:"owned_by,omitempty"`
	Provider          string   `json:"provider,omitempty"`
	Region            string   `json:"region,omitempty"`
	RetentionDays     *int     `json:"retention_days,omitempty"`
	MaxClassification string   `json:"max_classification,omitempty"`
	InputPricePerM    *float64 `json:"input_price_per_m,omitempty"`
	OutputPricePerM   *float64 `json:"output_price_per_m,omitempty"`
}

// Days and Price make the pointer fields of Model.
func Days(n int) *int { return &n }

// Price makes a price field of Model.
func Price(p float64) *float64 { return &p }

// Answer is one scripted answer to a chat completion.
type Answer struct {
	// Content is the assistant message (choices[0].message.content), normally a JSON text.
	Content string
	// Status, when neither 0 nor 200, answers an HTTP error with an OpenAI-style error body whose
	// code is ErrorCode (default "fake_failure").
	Status    int
	ErrorCode string
	// Delay holds the answer back this long; it is dropped when the client goes away first.
	Delay time.Duration
	// Hang holds the answer until the client goes away (or the server closes): a model that never
	// answers, for timeout and cancellation tests.
	Hang bool
	// Usage: zero estimates the tokens from the sizes of the request and the content.
	PromptTokens, CompletionTokens int
	// FinishReason defaults to "stop" ("length" marks a truncated answer).
	FinishReason string
	// Refusal, when set, is the message's refusal (and Content is ignored).
	Refusal string
	// RawBody, when set, is the whole 200 body instead of a chat completion (malformed answers).
	RawBody string
	// NoUsage leaves usage out of the answer, as an upstream may (contextual-orchestrator passes
	// the upstream's JSON on unchanged).
	NoUsage bool
	// ServedBy, when set, is the model the answer names as its server (default: the model asked
	// for; for the virtual model of the contextual mode, Config.VirtualServes).
	ServedBy string
}

// JSON answers v, marshalled, as the content.
func JSON(v any) Answer {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("orchestratortest.JSON: %v", err))
	}
	return Answer{Content: string(b)}
}

// Text answers s verbatim as the content (e.g. text that is not JSON).
func Text(s string) Answer { return Answer{Content: s} }

// Fail answers an HTTP error.
func Fail(status int) Answer { return Answer{Status: status} }

// Slow delays a.
func Slow(d time.Duration, a Answer) Answer { a.Delay = d; return a }

// Hang never answers; the request ends when the client cancels it.
func Hang() Answer { return Answer{Hang: true} }

// ChatRequest is the parsed body of a chat completion request.
type ChatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict bool            `json:"strict"`
		} `json:"json_schema"`
	} `json:"response_format"`
	MaxTokens       int    `json:"max_tokens"`
	ReasoningEffort string `json:"reasoning_effort"`
}

// Request is one logged request.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
	// Chat is the parsed body of a chat completion (nil for other requests or an unparsable body).
	Chat *ChatRequest
	// Status is the HTTP status answered (0 while pending; 499 when the client went away first).
	Status int
	At     time.Time
}

// Config configures the fake.
type Config struct {
	Models []Model
	// Token, when set, is the only credential accepted: requests without "Authorization: Bearer
	// <Token>" are answered 401 (and still logged).
	Token string
	// RepeatLast keeps the last answer of each queue instead of consuming it.
	RepeatLast bool
	// Handler answers what no queue does (nil: HTTP 500 "unscripted").
	Handler func(*Request) Answer

	// Contextual makes the fake contextual-orchestrator at commit ContextualCommit rather than a
	// plain OpenAI-compatible endpoint (see contextual.go): its listing (the virtual model first,
	// no metadata), GET /v1/models/{id}, its error envelope and codes, its limits (body size,
	// Content-Type, request rate per client IP, run slots) and calls that run on after the client
	// went away. The fields below tune its limits; zero keeps the real defaults.
	Contextual bool
	// RateLimit requests per RateWindow per client IP (default 60 per minute; negative: none).
	RateLimit  int
	RateWindow time.Duration
	// MaxRuns is how many chat completions may be in flight (default 8).
	MaxRuns int
	// MaxBodyBytes is the request body limit (default 65,536).
	MaxBodyBytes int
	// UpstreamTimeout ends a hanging answer with 500 internal_error (default 90 s, the real
	// provider timeout), whether or not the client is still there.
	UpstreamTimeout time.Duration
	// VirtualServes is the model that answers requests for the virtual model (default: the first
	// of Models).
	VirtualServes string
}

// StatusClientGone is the Status logged for a request whose client went away before the answer.
const StatusClientGone = 499

// Server is the fake orchestrator.
type Server struct {
	// URL is the base URL to configure BAP with (http://127.0.0.1:PORT; the API is under /v1).
	URL string

	mu          sync.Mutex
	models      []Model
	token       string
	repeatLast  bool
	handler     func(*Request) Answer
	queues      map[string][]Answer
	log         []*Request
	pending     int
	gone        int
	modelsFail  int
	changed     chan struct{} // closed and replaced whenever pending changes
	done        chan struct{} // closed by Close: hanging answers end
	closeOnce   sync.Once
	stopServing func()
	observer    func(Request)
	ctx         *contextual // nil unless Config.Contextual
}

// TB is the part of testing.TB Start needs.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Start serves a fake on a loopback port until the test ends.
func Start(t TB, cfg Config) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("orchestratortest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Listen serves a fake on addr until Close.
func Listen(addr string, cfg Config) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := New(cfg)
	s.URL = "http://" + l.Addr().String()
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	s.stopServing = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
	}
	return s, nil
}

// New returns a fake that is not listening: serve it (it is an http.Handler) where you like.
func New(cfg Config) *Server {
	s := &Server{
		models: append([]Model(nil), cfg.Models...), token: cfg.Token, repeatLast: cfg.RepeatLast,
		handler: cfg.Handler, queues: map[string][]Answer{},
		changed: make(chan struct{}), done: make(chan struct{}),
	}
	if cfg.Contextual {
		s.ctx = newContextual(cfg)
	}
	return s
}

// Close ends hanging answers and stops serving.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		if s.stopServing != nil {
			s.stopServing()
		}
	})
}

// SetModels replaces the model list.
func (s *Server) SetModels(models ...Model) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = append([]Model(nil), models...)
}

// FailModels makes GET /v1/models answer status (0 restores the listing).
func (s *Server) FailModels(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.modelsFail = status
}

// Script appends answers to model's queue ("*": any model's, after its own).
func (s *Server) Script(model string, answers ...Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queues[model] = append(s.queues[model], answers...)
}

// SetHandler sets the answer of last resort (see Config.Handler).
func (s *Server) SetHandler(h func(*Request) Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handler = h
}

// Requests returns a copy of the request log, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.log))
	for i, r := range s.log {
		out[i] = *r
	}
	return out
}

// ChatRequests returns the logged chat completion requests, oldest first.
func (s *Server) ChatRequests() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Path == "/v1/chat/completions" {
			out = append(out, r)
		}
	}
	return out
}

// Saw reports whether sub occurs in any logged request: a header value, the path or the body
// (JSON escapes of the body are undone first, so that a value is found however it was encoded).
func (s *Server) Saw(sub string) bool {
	if sub == "" {
		return false
	}
	for _, r := range s.Requests() {
		if strings.Contains(r.Path, sub) || bytes.Contains(r.Body, []byte(sub)) || strings.Contains(unescapeJSON(r.Body), sub) {
			return true
		}
		for _, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, sub) {
					return true
				}
			}
		}
	}
	return false
}

// unescapeJSON returns the strings of a JSON document joined, with escapes undone.
func unescapeJSON(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return ""
	}
	var sb strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case string:
			sb.WriteString(t)
			sb.WriteByte(0)
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			for k, e := range t {
				sb.WriteString(k)
				sb.WriteByte(0)
				walk(e)
			}
		}
	}
	walk(v)
	return sb.String()
}

// Pending is how many chat completions are being answered now (delayed or hanging).
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// Gone is how many chat completions ended because the client went away before the answer.
func (s *Server) Gone() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// WaitPending waits until at least n chat completions are pending (or ctx ends).
func (s *Server) WaitPending(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		p, ch := s.pending, s.changed
		s.mu.Unlock()
		if p >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d pending model calls (have %d): %w", n, p, ctx.Err())
		}
	}
}

func (s *Server) setPending(delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending += delta
	close(s.changed)
	s.changed = make(chan struct{})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	rec := &Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, At: time.Now()}
	s.mu.Lock()
	s.log = append(s.log, rec)
	token := s.token
	s.mu.Unlock()
	var status int
	if s.ctx != nil {
		status = s.serveContextual(w, r, rec, token)
	} else {
		status = s.serve(w, r, rec, token)
	}
	s.mu.Lock()
	rec.Status = status
	obs, done := s.observer, *rec
	s.mu.Unlock()
	if obs != nil {
		obs(done)
	}
}

// SetObserver calls f with each request once it is answered (or its client went away).
func (s *Server) SetObserver(f func(Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observer = f
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, rec *Request, token string) int {
	if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
		return writeError(w, http.StatusUnauthorized, "invalid_api_key")
	}
	switch {
	case r.URL.Path == "/v1/models" && r.Method == http.MethodGet:
		return s.listModels(w)
	case r.URL.Path == "/v1/chat/completions" && r.Method == http.MethodPost:
		return s.complete(w, r, rec)
	default:
		return writeError(w, http.StatusNotFound, "not_found")
	}
}

func (s *Server) listModels(w http.ResponseWriter) int {
	s.mu.Lock()
	fail := s.modelsFail
	models := append([]Model(nil), s.models...)
	s.mu.Unlock()
	if fail != 0 {
		return writeError(w, fail, "fake_failure")
	}
	type entry struct {
		Model
		Object  string `json:"object"`
		Created int64  `json:"created"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []entry `json:"data"`
	}{Object: "list", Data: []entry{}}
	for _, m := range models {
		if m.OwnedBy == "" {
			m.OwnedBy = "fakeorch"
		}
		out.Data = append(out.Data, entry{Model: m, Object: "model", Created: 1700000000})
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, rec *Request) int {
	var req ChatRequest
	if err := json.Unmarshal(rec.Body, &req); err != nil {
		return writeError(w, http.StatusBadRequest, "invalid_json")
	}
	s.mu.Lock()
	rec.Chat = &req
	known := false
	for _, m := range s.models {
		known = known || m.ID == req.Model
	}
	s.mu.Unlock()
	switch {
	case !known:
		return writeError(w, http.StatusNotFound, "model_not_found")
	case len(req.Messages) == 0:
		return writeError(w, http.StatusBadRequest, "messages_required")
	case req.ResponseFormat != nil && req.ResponseFormat.Type == "json_schema" &&
		(req.ResponseFormat.JSONSchema == nil || !json.Valid(req.ResponseFormat.JSONSchema.Schema)):
		return writeError(w, http.StatusBadRequest, "invalid_response_format")
	}
	a, ok := s.next(rec)
	if !ok {
		return writeError(w, http.StatusInternalServerError, "unscripted")
	}
	if a.Delay > 0 || a.Hang {
		s.setPending(1)
		defer s.setPending(-1)
		var timer <-chan time.Time
		if !a.Hang {
			t := time.NewTimer(a.Delay)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-timer:
		case <-r.Context().Done():
			s.mu.Lock()
			s.gone++
			s.mu.Unlock()
			return StatusClientGone
		case <-s.done:
			return writeError(w, http.StatusServiceUnavailable, "shutting_down")
		}
	}
	if a.Status != 0 && a.Status != http.StatusOK {
		code := a.ErrorCode
		if code == "" {
			code = "fake_failure"
		}
		return writeError(w, a.Status, code)
	}
	if a.RawBody != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, a.RawBody)
		return http.StatusOK
	}
	served := req.Model
	if a.ServedBy != "" {
		served = a.ServedBy
	}
	return writeJSON(w, http.StatusOK, completion(rec, a, served))
}

// completion is the chat completion answering rec with a, named as served by model.
func completion(rec *Request, a Answer, model string) map[string]any {
	in, out := a.PromptTokens, a.CompletionTokens
	if in == 0 {
		in = len(rec.Body)/4 + 1
	}
	if out == 0 {
		out = len(a.Content)/4 + 1
	}
	finish := a.FinishReason
	if finish == "" {
		finish = "stop"
	}
	msg := map[string]any{"role": "assistant", "content": a.Content, "refusal": nil}
	if a.Refusal != "" {
		msg["content"], msg["refusal"] = nil, a.Refusal
	}
	out2 := map[string]any{
		"id": fmt.Sprintf("chatcmpl-fake-%d", time.Now().UnixNano()), "object": "chat.completion",
		"created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
	}
	if !a.NoUsage {
		out2["usage"] = map[string]int{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
	}
	return out2
}

// next takes the answer for rec: its model's queue, the "*" queue, the handler.
func (s *Server) next(rec *Request) (Answer, bool) { return s.nextFor(rec, rec.Chat.Model) }

// nextFor takes the answer for rec from model's queue, the "*" queue, the handler.
func (s *Server) nextFor(rec *Request, model string) (Answer, bool) {
	s.mu.Lock()
	for _, key := range []string{model, "*"} {
		q := s.queues[key]
		if len(q) == 0 {
			continue
		}
		a := q[0]
		if !(s.repeatLast && len(q) == 1) {
			s.queues[key] = q[1:]
		}
		s.mu.Unlock()
		return a, true
	}
	h := s.handler
	s.mu.Unlock()
	if h == nil {
		return Answer{}, false
	}
	return h(rec), true
}

func writeJSON(w http.ResponseWriter, status int, v any) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
	return status
}

func writeError(w http.ResponseWriter, status int, code string) int {
	return writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": "fake orchestrator: " + strings.ReplaceAll(code, "_", " "), "type": "fake_error", "code": code,
	}})
}
