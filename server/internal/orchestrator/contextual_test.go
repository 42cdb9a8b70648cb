package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/orchestrator"
	ot "github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
)

// The adapter against the faithful fake of contextual-orchestrator (orchestratortest's contextual
// mode, commit ot.ContextualCommit), for the limits the real service cannot be driven into cheaply.

const ctxToken = "ctx-token-5e1f"

// bare is a model as contextual-orchestrator lists it: no metadata.
func bare(id string) ot.Model { return ot.Model{ID: id, OwnedBy: "local"} }

// configured is the BAP configuration of models a and b (metadata keyed by model id).
func configured(roleModels ...string) orchestrator.FileConfig {
	meta := orchestrator.ModelConfig{Provider: "acme", Region: "eu", RetentionDays: new(0), MaxClassification: "restricted"}
	return orchestrator.FileConfig{
		Roles:  map[string][]string{app.RolePlanner: roleModels},
		Models: map[string]orchestrator.ModelConfig{"m-a": meta, "m-b": meta, ot.VirtualModel: meta, "m-a-2024-08-06": meta},
	}
}

func ctxSetup(t *testing.T, fake ot.Config, cfg orchestrator.Config) env {
	t.Helper()
	fake.Contextual, fake.Token = true, ctxToken
	if fake.Models == nil {
		fake.Models = []ot.Model{bare("m-a"), bare("m-b")}
	}
	cfg.Token = ctxToken
	if cfg.RetryBaseDelay == 0 {
		cfg.RetryBaseDelay, cfg.RetryMaxDelay = 10*time.Millisecond, 50*time.Millisecond
	}
	return setup(t, fake, cfg)
}

func done() ot.Answer { return ot.JSON(map[string]string{"action": "done"}) }

// raw sends one request to the fake and returns its status and decoded body.
func raw(t *testing.T, method, url, ctype, token string, body []byte) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	_ = json.Unmarshal(b, &v)
	return resp.StatusCode, v
}

// TestContextualFakeExchanges: the fake answers as contextual-orchestrator does at its commit —
// the listing without metadata and the virtual model first, one model by id, the error envelope
// and the codes of its limits.
func TestContextualFakeExchanges(t *testing.T) {
	t.Parallel()
	srv := ot.Start(t, ot.Config{Contextual: true, Token: ctxToken, Models: []ot.Model{bare("m-a")}, MaxBodyBytes: 1024})
	status, list := raw(t, "GET", srv.URL+"/v1/models", "", ctxToken, nil)
	data, _ := list["data"].([]any)
	if status != 200 || list["object"] != "list" || len(data) != 2 {
		t.Fatalf("GET /v1/models: %d %v", status, list)
	}
	first, second := data[0].(map[string]any), data[1].(map[string]any)
	if first["id"] != ot.VirtualModel || second["id"] != "m-a" || len(second) != 4 || second["owned_by"] != "local" {
		t.Errorf("listing: %v", data)
	}
	chat := func(extra string) []byte {
		return []byte(`{"model":"m-a","messages":[{"role":"user","content":"hi"}]` + extra + `}`)
	}
	for _, tc := range []struct {
		name, method, path, ctype, token string
		body                             []byte
		status                           int
		code                             string
	}{
		{"model by id", "GET", "/v1/models/m-a", "", ctxToken, nil, 200, ""},
		{"unknown model by id", "GET", "/v1/models/nope", "", ctxToken, nil, 404, "model_not_found"},
		{"an id with a slash", "GET", "/v1/models/a%2Fb", "", ctxToken, nil, 400, "invalid_model"},
		{"no bearer", "GET", "/v1/models", "", "", nil, 401, "unauthorized"},
		{"another bearer", "GET", "/v1/models", "", "wrong", nil, 401, "unauthorized"},
		{"not JSON", "POST", "/v1/chat/completions", "text/plain", ctxToken, chat(""), 415, "unsupported_media_type"},
		{"too large", "POST", "/v1/chat/completions", "application/json", ctxToken, chat(`,"user":"` + strings.Repeat("x", 1100) + `"`), 413, "request_too_large"},
		{"unknown key", "POST", "/v1/chat/completions", "application/json", ctxToken, chat(`,"colour":"red"`), 400, "unknown_fields"},
		{"n > 1", "POST", "/v1/chat/completions", "application/json", ctxToken, chat(`,"n":2`), 400, "invalid_n"},
		{"bad reasoning", "POST", "/v1/chat/completions", "application/json", ctxToken, chat(`,"reasoning_effort":"extreme"`), 400, "invalid_reasoning_effort"},
		{"unknown model", "POST", "/v1/chat/completions", "application/json", ctxToken, []byte(`{"model":"nope","messages":[{"role":"user","content":"x"}]}`), 400, "invalid_request"},
		{"upstream failure", "POST", "/v1/chat/completions", "application/json", ctxToken, chat(""), 500, "internal_error"},
	} {
		status, body := raw(t, tc.method, srv.URL+tc.path, tc.ctype, tc.token, tc.body)
		if status != tc.status {
			t.Errorf("%s: status %d, want %d (%v)", tc.name, status, tc.status, body)
			continue
		}
		if tc.code == "" {
			continue
		}
		e, _ := body["error"].(map[string]any)
		detail, _ := e["detail"].(map[string]any)
		if e["code"] != tc.code || body["error_code"] != tc.code || detail["request_id"] == nil || body["error_detail"] == nil {
			t.Errorf("%s: envelope %v, want code %s", tc.name, body, tc.code)
		}
	}
}

// TestVirtualModelNeverApprovedByDefault: with no role configuration every listed model is
// approved — except the virtual model, the orchestrator's router; a listed model BAP has no
// configuration for is refused, saying so.
func TestVirtualModelNeverApprovedByDefault(t *testing.T) {
	t.Parallel()
	meta := orchestrator.ModelConfig{Provider: "acme", Region: "eu", RetentionDays: new(0), MaxClassification: "restricted"}
	e := ctxSetup(t, ot.Config{}, orchestrator.Config{Models: orchestrator.FileConfig{
		Models: map[string]orchestrator.ModelConfig{"m-a": meta, ot.VirtualModel: meta}}})
	got, err := e.c.Eligible(t.Context(), app.RolePlanner, anyPolicy)
	if err != nil || strings.Join(ids(got), ",") != "m-a" {
		t.Fatalf("eligible = %v, %v; want m-a only (the virtual model left out, m-b unconfigured)", ids(got), err)
	}
	e2 := ctxSetup(t, ot.Config{}, orchestrator.Config{Models: orchestrator.FileConfig{Default: []string{"m-b"}}})
	_, err = e2.c.Eligible(t.Context(), app.RoleVerifier, anyPolicy)
	if !errors.Is(err, app.ErrNoCompliantModel) || !strings.Contains(err.Error(), `m-b: listed by the orchestrator but not configured: BAP's model configuration has no "models" entry`) {
		t.Errorf("an unconfigured model: %v", err)
	}
}

// TestServingModelRecordedFromTheAnswer: the model recorded is the one the answer names — a dated
// snapshot of the model asked for, or the model the virtual model routed to when that one is
// eligible; an answer from a model outside the eligible ones is a failure (and falls back).
func TestServingModelRecordedFromTheAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		roles          []string
		answers        map[string]ot.Answer
		model, asked   string
		fallbackReason string
	}{
		{"the model asked for", []string{"m-a"}, map[string]ot.Answer{"m-a": done()}, "m-a", "", ""},
		{"a dated snapshot", []string{"m-a"}, map[string]ot.Answer{"m-a": {Content: `{"action":"done"}`, ServedBy: "m-a-2024-08-06"}}, "m-a-2024-08-06", "m-a", ""},
		{"the virtual model routes to an eligible model", []string{ot.VirtualModel, "m-b"}, map[string]ot.Answer{"m-b": done()}, "m-b", ot.VirtualModel, ""},
		{"an answer from an unapproved model", []string{"m-a", "m-b"}, map[string]ot.Answer{"m-a": {Content: `{"action":"done"}`, ServedBy: "m-rogue"}, "m-b": done()}, "m-b", "", `answered by model "m-rogue"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := ctxSetup(t, ot.Config{VirtualServes: "m-b"}, orchestrator.Config{Models: configured(tc.roles...)})
			for m, a := range tc.answers {
				e.srv.Script(m, a)
			}
			rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Model.ID != tc.model || rep.RequestedModel != tc.asked || rep.Model.Provider != "acme" {
				t.Errorf("model %q (asked %q), want %q (asked %q)", rep.Model.ID, rep.RequestedModel, tc.model, tc.asked)
			}
			if tc.fallbackReason != "" && (len(rep.Fallbacks) != 1 || !strings.Contains(rep.Fallbacks[0].Reason, tc.fallbackReason)) {
				t.Errorf("fallbacks %+v, want one saying %q", rep.Fallbacks, tc.fallbackReason)
			}
		})
	}
}

// TestRateLimitIsRetriedNotAFallback: a 429 of the orchestrator is its own limit — the call waits
// and retries the same model (the next one sits behind the same limiter); after RetryFor it gives
// up with ErrOrchestratorUnavailable, never AllModelsFailedError.
func TestRateLimitIsRetriedNotAFallback(t *testing.T) {
	t.Parallel()
	e := ctxSetup(t, ot.Config{RateLimit: 3, RateWindow: 400 * time.Millisecond}, orchestrator.Config{Models: configured("m-a", "m-b")})
	e.srv.Script("m-a", done(), done())
	if _, err := e.c.Refresh(t.Context()); err != nil { // 1 of 3
		t.Fatal(err)
	}
	for range 2 { // 2 and 3 of 3
		_, _ = raw(t, "GET", e.srv.URL+"/v1/models", "", ctxToken, nil)
	}
	start := time.Now()
	rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
	if err != nil || rep.Model.ID != "m-a" || len(rep.Fallbacks) != 0 {
		t.Fatalf("complete = %+v, %v; want m-a after waiting, no fallback", rep, err)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("answered after %s: it did not wait for the window", waited)
	}
	limited := 0
	for _, r := range e.srv.ChatRequests() {
		if r.Status == http.StatusTooManyRequests {
			limited++
		}
		if r.Chat != nil && r.Chat.Model == "m-b" {
			t.Error("a rate-limited call fell back to the next model")
		}
	}
	if limited == 0 {
		t.Error("no call was rate-limited")
	}

	// Refused for longer than RetryFor: orchestrator unavailable.
	e2 := ctxSetup(t, ot.Config{RateLimit: 1, RateWindow: time.Hour}, orchestrator.Config{Models: configured("m-a", "m-b"),
		RetryFor: 150 * time.Millisecond})
	if _, err := e2.c.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err = e2.c.Complete(t.Context(), request(app.RolePlanner))
	var all *app.AllModelsFailedError
	if !errors.Is(err, app.ErrOrchestratorUnavailable) || errors.As(err, &all) || !strings.Contains(err.Error(), "HTTP 429 rate_limit_exceeded") {
		t.Fatalf("err = %v; want ErrOrchestratorUnavailable (429), not all models failed", err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e2.c)
	if got := gather(t, reg); got[`bap_orchestrator_refusals_total{kind="rate_limited"}`] < 2 ||
		got[`bap_model_calls_total{model="m-a",outcome="refused",role="planner"}`] != 1 {
		t.Errorf("metrics: %v", got)
	}
}

// TestBudgetRefusalIsNotAModelFailure: 429 budget_exceeded is the orchestrator's spend budget:
// retried, then ErrOrchestratorBudget — no fallback.
func TestBudgetRefusalIsNotAModelFailure(t *testing.T) {
	t.Parallel()
	e := ctxSetup(t, ot.Config{RepeatLast: true}, orchestrator.Config{Models: configured("m-a", "m-b"), RetryFor: 100 * time.Millisecond})
	e.srv.Script("m-a", ot.Answer{Status: 429, ErrorCode: "budget_exceeded"})
	_, err := e.c.Complete(t.Context(), request(app.RolePlanner))
	if !errors.Is(err, app.ErrOrchestratorBudget) || errors.Is(err, app.ErrOrchestratorUnavailable) {
		t.Fatalf("err = %v, want ErrOrchestratorBudget", err)
	}
	n := 0
	for _, r := range e.srv.ChatRequests() {
		if r.Chat != nil && r.Chat.Model == "m-b" {
			t.Error("a budget refusal fell back to the next model")
		}
		n++
	}
	if n < 2 {
		t.Errorf("%d calls: the refusal was not retried", n)
	}
}

// TestRunSlotsOutliveCancelledCalls: a cancelled call keeps its run slot at the orchestrator until
// its upstream answers; the next call meets 503 concurrency_limit_exceeded and waits for the slot
// (no fallback), and model failures (500 internal_error) still fall back.
func TestRunSlotsOutliveCancelledCalls(t *testing.T) {
	t.Parallel()
	e := ctxSetup(t, ot.Config{MaxRuns: 1, UpstreamTimeout: 300 * time.Millisecond}, orchestrator.Config{Models: configured("m-a", "m-b")})
	e.srv.Script("m-a", ot.Hang(), ot.Fail(500))
	e.srv.Script("m-b", done())
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { _, err := e.c.Complete(ctx, request(app.RolePlanner)); errc <- err }()
	wctx, wcancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer wcancel()
	if err := e.srv.WaitPending(wctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	waitFor(t, func() bool { return e.srv.Gone() == 1 }, "the orchestrator to see the client go")
	if n := e.srv.Runs(); n != 1 {
		t.Fatalf("%d run slots held after the client went away, want 1 (the upstream call runs on)", n)
	}
	rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
	if err != nil {
		t.Fatal(err)
	}
	// m-a: 503 while the slot was held (retried), then 500 internal_error (a model failure) → m-b.
	if rep.Model.ID != "m-b" || len(rep.Fallbacks) != 1 || rep.Fallbacks[0].Reason != "HTTP 500 internal_error" {
		t.Fatalf("reply from %s, fallbacks %+v", rep.Model.ID, rep.Fallbacks)
	}
	busy := 0
	for _, r := range e.srv.ChatRequests() {
		if r.Status == http.StatusServiceUnavailable {
			busy++
		}
	}
	if busy == 0 {
		t.Error("no call met the held run slot")
	}
}

// TestUnknownUsageIsTheWorstCase: an answer without usage is recorded as unknown and charged the
// worst case: the request's size in bytes and its max_tokens.
func TestUnknownUsageIsTheWorstCase(t *testing.T) {
	t.Parallel()
	e := ctxSetup(t, ot.Config{}, orchestrator.Config{Models: configured("m-a")})
	e.srv.Script("m-a", ot.Answer{Content: `{"action":"done"}`, NoUsage: true})
	rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
	if err != nil {
		t.Fatal(err)
	}
	body := e.srv.ChatRequests()[0].Body
	if !rep.UsageUnknown || rep.InputTokens != len(body) || rep.OutputTokens != 256 {
		t.Errorf("usage unknown %v, tokens %d/%d; want true, %d/256", rep.UsageUnknown, rep.InputTokens, rep.OutputTokens, len(body))
	}
}

// TestLongPromptIsCutToFit: a prompt beyond the body limit is cut in its middle with a marker, so
// that the orchestrator never answers 413; the digest is of what was sent; the deadline travels as
// X-Request-Timeout-Ms.
func TestLongPromptIsCutToFit(t *testing.T) {
	t.Parallel()
	e := ctxSetup(t, ot.Config{}, orchestrator.Config{Models: configured("m-a")})
	e.srv.Script("m-a", done())
	req := request(app.RolePlanner)
	long := "HEAD " + strings.Repeat(`<li class="item">a "quoted" thing é</li>`, 6000) + " TAIL"
	req.Messages[1].Content = long
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	rep, err := e.c.Complete(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sent := e.srv.ChatRequests()[0]
	if len(sent.Body) > orchestrator.DefaultMaxRequestBytes || sent.Status != 200 {
		t.Fatalf("sent %d bytes (status %d), limit %d", len(sent.Body), sent.Status, orchestrator.DefaultMaxRequestBytes)
	}
	text := sent.Chat.Messages[1].Content
	if !strings.HasPrefix(text, "HEAD ") || !strings.HasSuffix(text, " TAIL") || !strings.Contains(text, "bytes left out by BAP") {
		t.Errorf("cut text: %.80q … %.80q", text, text[max(0, len(text)-80):])
	}
	if rep.TruncatedBytes <= 0 || rep.TruncatedBytes != len(long)-(len(text)-markerLen(text)) {
		t.Errorf("truncated %d bytes; sent %d of %d", rep.TruncatedBytes, len(text), len(long))
	}
	msgs := []app.ModelMessage{req.Messages[0], {Role: "user", Content: text}}
	if rep.PromptSHA256 != orchestrator.PromptDigest(msgs) {
		t.Error("the digest is not of the messages as sent")
	}
	ms, err := strconv.Atoi(sent.Header.Get("X-Request-Timeout-Ms"))
	if err != nil || ms <= 0 || ms > 20000 {
		t.Errorf("X-Request-Timeout-Ms = %q, want the remaining ≤ 20000 ms", sent.Header.Get("X-Request-Timeout-Ms"))
	}
	// A limit the fixed part of the request cannot fit in is the caller's problem, not a model's.
	small := ctxSetup(t, ot.Config{}, orchestrator.Config{Models: configured("m-a", "m-b"), MaxRequestBytes: 4096})
	req.Schema = json.RawMessage(`{"type":"object","description":"` + strings.Repeat("d", 5000) + `"}`)
	_, err = small.c.Complete(t.Context(), req)
	if !errors.Is(err, app.ErrOrchestratorUnavailable) || !strings.Contains(err.Error(), "cannot be cut to fit") || len(small.srv.ChatRequests()) != 0 {
		t.Errorf("an unfittable request: %v (%d sent)", err, len(small.srv.ChatRequests()))
	}
}

// markerLen is the length of the marker inside a cut text.
func markerLen(s string) int {
	i := strings.Index(s, "\n[… ")
	j := strings.Index(s, "limit …]\n")
	if i < 0 || j < 0 {
		return 0
	}
	return j + len("limit …]\n") - i
}
