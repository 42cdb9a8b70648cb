package orchestrator_test

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
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/orchestrator"
	ot "github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
	"github.com/originweave/bap/server/internal/redact"

	"github.com/originweave/bap/server/internal/waitfor"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fullModel is a model whose metadata satisfies any policy of the tests.
func fullModel(id string) ot.Model {
	return ot.Model{ID: id, Provider: "acme", Region: "eu", RetentionDays: ot.Days(0), MaxClassification: "restricted"}
}

type env struct {
	srv  *ot.Server
	c    *orchestrator.Client
	logs *syncBuffer
}

func setup(t *testing.T, fake ot.Config, cfg orchestrator.Config) env {
	t.Helper()
	srv := ot.Start(t, fake)
	logs := &syncBuffer{}
	cfg.URL = srv.URL
	if cfg.Logger == nil {
		cfg.Logger = slog.New(redact.NewHandler(slog.NewJSONHandler(logs, nil), nil))
	}
	c, err := orchestrator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return env{srv: srv, c: c, logs: logs}
}

var anyPolicy = app.ModelPolicy{DataClassification: "public"}

const stepSchema = `{
	"type": "object",
	"properties": {"action": {"enum": ["navigate", "done"]}, "url": {"type": "string"}},
	"required": ["action"],
	"additionalProperties": false
}`

func request(role string) app.ModelRequest {
	return app.ModelRequest{
		Role:   role,
		Policy: app.ModelPolicy{DataClassification: "internal"},
		Messages: []app.ModelMessage{
			{Role: "system", Content: "You propose one BAP step."},
			{Role: "user", Content: "Goal: buy the red mug. Page: <shop>"},
		},
		SchemaName: "step",
		Schema:     json.RawMessage(stepSchema),
		MaxTokens:  256,
		Reasoning:  "high",
	}
}

func roles(ids ...string) orchestrator.FileConfig {
	return orchestrator.FileConfig{Roles: map[string][]string{app.RolePlanner: ids}}
}

func ids(ms []app.ModelInfo) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func TestDiscoveryMergesMetadata(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{
		{ID: "m-a", Provider: "acme", Region: "eu", RetentionDays: ot.Days(0), MaxClassification: "restricted",
			InputPricePerM: ot.Price(3), OutputPricePerM: ot.Price(15)},
		{ID: "m-b", OwnedBy: "beta"},
		{ID: "m-unapproved", Provider: "acme", Region: "eu", RetentionDays: ot.Days(0), MaxClassification: "restricted"},
	}}, orchestrator.Config{Models: orchestrator.FileConfig{
		Roles: map[string][]string{app.RolePlanner: {"m-b", "m-missing", "m-a"}},
		Models: map[string]orchestrator.ModelConfig{
			"m-a": {Region: "eu-west"},
			"m-b": {Region: "us", RetentionDays: new(30), MaxClassification: "confidential", InputPricePerM: new(0.5)},
		},
	}})
	got, err := e.c.Eligible(t.Context(), app.RolePlanner, anyPolicy)
	if err != nil {
		t.Fatal(err)
	}
	want := []app.ModelInfo{
		{ID: "m-b", Provider: "beta", Region: "us", RetentionDays: 30, MaxClassification: "confidential", InputPricePerM: 0.5},
		{ID: "m-a", Provider: "acme", Region: "eu-west", RetentionDays: 0, MaxClassification: "restricted", InputPricePerM: 3, OutputPricePerM: 15},
	}
	if len(got) != len(want) {
		t.Fatalf("eligible = %+v, want %+v (configured order, unlisted m-missing and unapproved m-unapproved left out)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("model %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// Unknown metadata stays unknown: m-b's listing alone says nothing of retention.
	if _, err := e.c.Eligible(t.Context(), app.RoleObserver, anyPolicy); !errors.Is(err, app.ErrNoCompliantModel) {
		t.Errorf("a role with no approved model: err = %v, want ErrNoCompliantModel", err)
	}
}

func TestUnknownMetadataFailsClosed(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{{ID: "bare"}}}, orchestrator.Config{Models: roles("bare")})
	// owned_by (the fake's default "fakeorch") stands in for the provider; nothing else is known.
	got, err := e.c.Eligible(t.Context(), app.RolePlanner, app.ModelPolicy{DataClassification: "public", AllowedProviders: []string{"fakeorch"}})
	if err == nil || !errors.Is(err, app.ErrNoCompliantModel) {
		t.Fatalf("eligible = %+v, %v; want ErrNoCompliantModel (classification unknown)", got, err)
	}
	if !strings.Contains(err.Error(), "bare: listed by the orchestrator but not configured") || !strings.Contains(err.Error(), "highest data classification unknown") {
		t.Errorf("error does not say why: %v", err)
	}
	for _, pol := range []app.ModelPolicy{
		{DataClassification: "public", AllowedRegions: []string{"eu"}},
		{DataClassification: "public", MaxRetentionDays: new(30)},
		{}, // "" is restricted
	} {
		if _, err := e.c.Eligible(t.Context(), app.RolePlanner, pol); !errors.Is(err, app.ErrNoCompliantModel) {
			t.Errorf("policy %+v: err = %v, want ErrNoCompliantModel", pol, err)
		}
	}
}

func TestSatisfies(t *testing.T) {
	t.Parallel()
	m := app.ModelInfo{ID: "m", Provider: "Acme", Region: "eu", RetentionDays: 7, MaxClassification: "confidential"}
	unknown := app.ModelInfo{ID: "u", RetentionDays: -1}
	for _, tc := range []struct {
		name  string
		m     app.ModelInfo
		pol   app.ModelPolicy
		ok    bool
		cause string
	}{
		{"any provider and region", m, app.ModelPolicy{DataClassification: "internal"}, true, ""},
		{"provider allowed (case-insensitive)", m, app.ModelPolicy{AllowedProviders: []string{"x", "acme"}, DataClassification: "public"}, true, ""},
		{"provider not allowed", m, app.ModelPolicy{AllowedProviders: []string{"other"}, DataClassification: "public"}, false, "provider"},
		{"provider unknown", unknown, app.ModelPolicy{AllowedProviders: []string{"acme"}}, false, "provider unknown"},
		{"region allowed", m, app.ModelPolicy{AllowedRegions: []string{"eu"}, DataClassification: "public"}, true, ""},
		{"region not allowed", m, app.ModelPolicy{AllowedRegions: []string{"us"}, DataClassification: "public"}, false, "region"},
		{"region unknown", unknown, app.ModelPolicy{AllowedRegions: []string{"eu"}}, false, "region unknown"},
		{"retention within", m, app.ModelPolicy{MaxRetentionDays: new(7), DataClassification: "public"}, true, ""},
		{"retention too long", m, app.ModelPolicy{MaxRetentionDays: new(0), DataClassification: "public"}, false, "retention 7 days exceeds 0"},
		{"retention unknown", unknown, app.ModelPolicy{MaxRetentionDays: new(365)}, false, "retention unknown"},
		{"classification equal", m, app.ModelPolicy{DataClassification: "confidential"}, true, ""},
		{"classification too high", m, app.ModelPolicy{DataClassification: "restricted"}, false, "confidential data at most"},
		{"empty classification means restricted", m, app.ModelPolicy{}, false, "restricted"},
		{"restricted model, empty classification", app.ModelInfo{MaxClassification: "restricted"}, app.ModelPolicy{}, true, ""},
		{"model classification unknown", unknown, app.ModelPolicy{DataClassification: "public"}, false, "classification unknown"},
		{"task classification unknown", app.ModelInfo{MaxClassification: "restricted"}, app.ModelPolicy{DataClassification: "secret"}, false, "unknown"},
	} {
		ok, why := orchestrator.Satisfies(tc.m, tc.pol)
		if ok != tc.ok || !strings.Contains(why, tc.cause) {
			t.Errorf("%s: Satisfies = %v, %q; want %v, containing %q", tc.name, ok, why, tc.ok, tc.cause)
		}
	}
}

func TestPolicyFiltersEligibleAndFallbacks(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{
		{ID: "us-model", Provider: "acme", Region: "us", RetentionDays: ot.Days(0), MaxClassification: "restricted"},
		{ID: "eu-model", Provider: "acme", Region: "eu", RetentionDays: ot.Days(0), MaxClassification: "restricted"},
	}}, orchestrator.Config{Models: roles("us-model", "eu-model")})
	// eu-model fails: the us-model, outside the policy, is never tried as a fallback.
	e.srv.Script("eu-model", ot.Fail(503))
	e.srv.Script("us-model", ot.JSON(map[string]string{"action": "done"}))
	req := request(app.RolePlanner)
	req.Policy.AllowedRegions = []string{"eu"}
	_, err := e.c.Complete(t.Context(), req)
	var all *app.AllModelsFailedError
	if !errors.As(err, &all) || len(all.Failures) != 1 || all.Failures[0].Model.ID != "eu-model" {
		t.Fatalf("err = %v (%+v), want all failed with eu-model only", err, all)
	}
	for _, r := range e.srv.ChatRequests() {
		if r.Chat.Model == "us-model" {
			t.Error("a model outside the policy was tried")
		}
	}
}

func TestSingleModelConfiguration(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("only"), fullModel("other")}},
		orchestrator.Config{Models: orchestrator.FileConfig{Default: []string{"only"}}})
	for _, role := range orchestrator.Roles {
		got, err := e.c.Eligible(t.Context(), role, anyPolicy)
		if err != nil || len(got) != 1 || got[0].ID != "only" {
			t.Errorf("role %s: %v, %v; want [only]", role, ids(got), err)
		}
	}
	e.srv.Script("only", ot.JSON(map[string]string{"action": "done"}))
	rep, err := e.c.Complete(t.Context(), request(app.RoleVerifier))
	if err != nil || rep.Model.ID != "only" {
		t.Fatalf("complete = %+v, %v", rep, err)
	}
}

func TestNoRoleConfigurationApprovesListedModels(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("first"), fullModel("second")}}, orchestrator.Config{})
	got, err := e.c.Eligible(t.Context(), app.RoleSafety, anyPolicy)
	if err != nil || strings.Join(ids(got), ",") != "first,second" {
		t.Fatalf("eligible = %v, %v; want first,second", ids(got), err)
	}
	if _, err := e.c.Eligible(t.Context(), "poet", anyPolicy); !errors.Is(err, app.ErrNoCompliantModel) {
		t.Errorf("unknown role: %v", err)
	}
}

func TestCompleteSendsConstrainedRequestAndProvenance(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("m")}}, orchestrator.Config{Models: orchestrator.FileConfig{
		Roles:  map[string][]string{app.RolePlanner: {"m"}},
		Models: map[string]orchestrator.ModelConfig{"m": {InputPricePerM: new(3.0), OutputPricePerM: new(15.0)}},
	}})
	a := ot.JSON(map[string]string{"action": "navigate", "url": "http://shop.test/"})
	a.PromptTokens, a.CompletionTokens = 1000, 500
	e.srv.Script("m", a)
	req := request(app.RolePlanner)
	rep, err := e.c.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if string(rep.Content) != `{"action":"navigate","url":"http://shop.test/"}` {
		t.Errorf("content = %s", rep.Content)
	}
	if rep.InputTokens != 1000 || rep.OutputTokens != 500 || rep.CostUSD < 0.010499 || rep.CostUSD > 0.010501 {
		t.Errorf("tokens %d/%d cost %v; want 1000/500 and 0.0105", rep.InputTokens, rep.OutputTokens, rep.CostUSD)
	}
	if rep.Reasoning != "high" || rep.Latency <= 0 || len(rep.Fallbacks) != 0 || rep.Model.Provider != "acme" {
		t.Errorf("provenance = %+v", rep)
	}
	// The digest is of the canonical JSON of the messages as sent.
	canon := `[{"content":"You propose one BAP step.","role":"system"},{"content":"Goal: buy the red mug. Page: \u003cshop\u003e","role":"user"}]`
	sum := sha256.Sum256([]byte(canon))
	if want := hex.EncodeToString(sum[:]); rep.PromptSHA256 != want || orchestrator.PromptDigest(req.Messages) != want {
		t.Errorf("prompt digest = %s, want %s", rep.PromptSHA256, want)
	}
	reqs := e.srv.ChatRequests()
	if len(reqs) != 1 {
		t.Fatalf("%d chat requests", len(reqs))
	}
	c := reqs[0].Chat
	if c.Model != "m" || c.MaxTokens != 256 || c.ReasoningEffort != "high" || len(c.Messages) != 2 ||
		c.ResponseFormat == nil || c.ResponseFormat.Type != "json_schema" || c.ResponseFormat.JSONSchema == nil ||
		c.ResponseFormat.JSONSchema.Name != "step" || !c.ResponseFormat.JSONSchema.Strict {
		t.Errorf("chat request = %s", reqs[0].Body)
	}
	var sent, want any
	_ = json.Unmarshal(c.ResponseFormat.JSONSchema.Schema, &sent)
	_ = json.Unmarshal([]byte(stepSchema), &want)
	if sj, wj := mustJSON(sent), mustJSON(want); sj != wj {
		t.Errorf("schema sent = %s, want %s", sj, wj)
	}
	// No reasoning setting: the field is left out.
	e.srv.Script("m", ot.JSON(map[string]string{"action": "done"}))
	req.Reasoning = ""
	if _, err := e.c.Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if last := e.srv.ChatRequests()[1]; bytes.Contains(last.Body, []byte("reasoning_effort")) {
		t.Errorf("reasoning_effort sent without a setting: %s", last.Body)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestPromptDigestStable(t *testing.T) {
	t.Parallel()
	msgs := request(app.RolePlanner).Messages
	a, b := orchestrator.PromptDigest(msgs), orchestrator.PromptDigest(append([]app.ModelMessage(nil), msgs...))
	if a != b || len(a) != 64 {
		t.Fatalf("digests %s and %s", a, b)
	}
	other := append([]app.ModelMessage(nil), msgs...)
	other[1].Content += "."
	if orchestrator.PromptDigest(other) == a {
		t.Error("different prompts, same digest")
	}
}

func TestInvalidAnswersFallBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		bad    ot.Answer
		reason string
	}{
		{"schema violation", ot.JSON(map[string]string{"action": "rm -rf"}), "does not match schema step (at /action: enum)"},
		{"extra property", ot.JSON(map[string]string{"action": "done", "why": "x"}), "does not match schema step (at /: additionalProperties)"},
		{"missing property", ot.JSON(map[string]string{"url": "x"}), "does not match schema step (at /: required)"},
		{"not JSON", ot.Text("Sure! Here is the step: navigate"), "answer is not JSON"},
		{"refusal", ot.Answer{Refusal: "I cannot help with that"}, "refused"},
		{"truncated", ot.Answer{Content: `{"action":"done"}`, FinishReason: "length"}, "max_tokens"},
		{"not a completion", ot.Answer{RawBody: `{"choices": []}`}, "no choices"},
		{"garbage body", ot.Answer{RawBody: `<html>`}, "not a chat completion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, ot.Config{Models: []ot.Model{fullModel("m1"), fullModel("m2")}}, orchestrator.Config{Models: roles("m1", "m2")})
			e.srv.Script("m1", tc.bad)
			e.srv.Script("m2", ot.JSON(map[string]string{"action": "done"}))
			rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Model.ID != "m2" || len(rep.Fallbacks) != 1 || rep.Fallbacks[0].Model.ID != "m1" {
				t.Fatalf("reply from %s, fallbacks %+v", rep.Model.ID, rep.Fallbacks)
			}
			if r := rep.Fallbacks[0].Reason; !strings.Contains(r, tc.reason) {
				t.Errorf("reason %q, want it to contain %q", r, tc.reason)
			}
			// An answer that came back (whatever its content) spent tokens; budgets count them.
			if f := rep.Fallbacks[0]; tc.bad.RawBody == "" && (f.InputTokens <= 0 || f.OutputTokens <= 0) {
				t.Errorf("failed attempt reports %d/%d tokens", f.InputTokens, f.OutputTokens)
			}
		})
	}
}

func TestFallbackOnHTTPErrorAndTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("down"), fullModel("slow"), fullModel("good")}},
		orchestrator.Config{Models: roles("down", "slow", "good"), CallTimeout: 300 * time.Millisecond})
	e.srv.Script("down", ot.Fail(500))
	e.srv.Script("slow", ot.Hang())
	e.srv.Script("good", ot.JSON(map[string]string{"action": "done"}))
	start := time.Now()
	rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	if rep.Model.ID != "good" || len(rep.Fallbacks) != 2 {
		t.Fatalf("reply from %s, fallbacks %+v", rep.Model.ID, rep.Fallbacks)
	}
	if f := rep.Fallbacks[0]; f.Model.ID != "down" || f.Reason != "HTTP 500 fake_failure" {
		t.Errorf("first fallback %+v", f)
	}
	if f := rep.Fallbacks[1]; f.Model.ID != "slow" || f.Reason != "timed out after 300ms" || f.Latency < 300*time.Millisecond {
		t.Errorf("second fallback %+v", f)
	}
	if !strings.Contains(e.logs.String(), `"msg":"model failed"`) {
		t.Errorf("fallbacks not logged: %s", e.logs.String())
	}
	waitFor(t, func() bool { return e.srv.Gone() == 1 }, "the timed-out call to end at the orchestrator")
}

func TestAllModelsFailed(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("a"), fullModel("b")}}, orchestrator.Config{Models: roles("a", "b")})
	e.srv.Script("a", ot.Fail(502))
	e.srv.Script("b", ot.Text("{"))
	rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
	var all *app.AllModelsFailedError
	if !errors.As(err, &all) {
		t.Fatalf("complete = %+v, %v; want *AllModelsFailedError", rep, err)
	}
	if all.Role != app.RolePlanner || len(all.Failures) != 2 || all.Failures[0].Model.ID != "a" || all.Failures[1].Model.ID != "b" {
		t.Errorf("failures %+v", all)
	}
}

func TestCancellationEndsInFlightCall(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("slow"), fullModel("next")}}, orchestrator.Config{Models: roles("slow", "next")})
	e.srv.Script("slow", ot.Hang())
	e.srv.Script("next", ot.JSON(map[string]string{"action": "done"}))
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := e.c.Complete(ctx, request(app.RolePlanner))
		errc <- err
	}()
	wctx, wcancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer wcancel()
	if err := e.srv.WaitPending(wctx, 1); err != nil {
		t.Fatal(err)
	}
	cancelled := time.Now()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if d := time.Since(cancelled); d > time.Second {
			t.Errorf("returned %s after the cancellation", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Complete did not return after its context was cancelled")
	}
	waitFor(t, func() bool { return e.srv.Gone() == 1 }, "the orchestrator to see the client go away")
	for _, r := range e.srv.ChatRequests() {
		if r.Chat.Model == "next" {
			t.Error("a cancelled call fell back to the next model")
		}
	}
}

func TestCallerDeadlineBoundsTheCall(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("slow"), fullModel("next")}}, orchestrator.Config{Models: roles("slow", "next")})
	if _, err := e.c.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.srv.Script("slow", ot.Hang())
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.c.Complete(ctx, request(app.RolePlanner))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("err = %v after %s; want the caller's deadline, promptly (the call timeout is 60s)", err, time.Since(start))
	}
}

func TestWorkloadCredential(t *testing.T) {
	t.Parallel()
	const token = "wl-tok-3f9a7c1e5b2d4a6f"
	dir := t.TempDir()
	file := filepath.Join(dir, "orchestrator.token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := orchestrator.ReadCredential(file, "ignored-env-token")
	if err != nil || got != token {
		t.Fatalf("ReadCredential = %q, %v", got, err)
	}
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("a"), fullModel("b")}, Token: token},
		orchestrator.Config{Models: roles("a", "b"), Token: got})
	e.srv.Script("a", ot.Fail(500))
	e.srv.Script("b", ot.JSON(map[string]string{"action": "done"}))
	if _, err := e.c.Complete(t.Context(), request(app.RolePlanner)); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.srv.Requests() {
		if h := r.Header.Get("Authorization"); h != "Bearer "+token {
			t.Errorf("%s %s: Authorization %q", r.Method, r.Path, h)
		}
		if r.Status == 401 {
			t.Errorf("%s %s refused", r.Method, r.Path)
		}
		if bytes.Contains(r.Body, []byte(token)) {
			t.Errorf("the credential is in a request body")
		}
	}
	// A wrong credential: the orchestrator refuses; neither the error nor the logs hold a token.
	wrong := "wl-wrong-9d8c7b6a5f4e3d2c"
	c2, err := orchestrator.New(orchestrator.Config{URL: e.srv.URL, Token: wrong, Models: roles("a"),
		Logger: slog.New(redact.NewHandler(slog.NewJSONHandler(e.logs, nil), nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c2.Complete(t.Context(), request(app.RolePlanner))
	if !errors.Is(err, app.ErrOrchestratorUnavailable) || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("err = %v; want orchestrator unavailable (HTTP 401)", err)
	}
	slog.New(redact.NewHandler(slog.NewJSONHandler(e.logs, nil), nil)).Info("probe", "detail", "Bearer "+token, "other", wrong)
	for _, s := range []string{token, wrong} {
		if strings.Contains(err.Error(), s) || strings.Contains(e.logs.String(), s) {
			t.Errorf("credential %q leaked: err %v\nlogs %s", s, err, e.logs.String())
		}
	}
}

func TestReadCredential(t *testing.T) {
	t.Parallel()
	if got, err := orchestrator.ReadCredential("", "  env-token \n"); err != nil || got != "env-token" {
		t.Errorf("env: %q, %v", got, err)
	}
	if got, err := orchestrator.ReadCredential("", ""); err != nil || got != "" {
		t.Errorf("none: %q, %v", got, err)
	}
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := orchestrator.ReadCredential(empty, ""); err == nil {
		t.Error("an empty credential file was accepted")
	}
	spaced := filepath.Join(dir, "spaced")
	_ = os.WriteFile(spaced, []byte("two words-secret\n"), 0o600)
	if _, err := orchestrator.ReadCredential(spaced, ""); err == nil || strings.Contains(err.Error(), "words-secret") {
		t.Errorf("a malformed credential file: %v", err)
	}
	if _, err := orchestrator.ReadCredential(filepath.Join(dir, "missing"), ""); err == nil {
		t.Error("a missing credential file was accepted")
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	good := `{"roles": {"planner": ["m-large", "m-small"], "observer": ["m-small"]},
		"default": ["m-small"],
		"models": {"m-large": {"provider": "acme", "region": "eu", "retention_days": 0,
			"max_classification": "confidential", "input_price_per_m": 3, "output_price_per_m": 15}}}`
	fc, err := orchestrator.ParseConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if m := fc.Models["m-large"]; m.RetentionDays == nil || *m.RetentionDays != 0 || *m.OutputPricePerM != 15 {
		t.Errorf("parsed %+v", fc)
	}
	for _, bad := range []string{
		`{}`,
		`{"roles": {"poet": ["m"]}}`,
		`{"roles": {"planner": []}}`,
		`{"roles": {"planner": ["m", "m"]}}`,
		`{"roles": {"planner": [""]}}`,
		`{"roles": {"planner": ["m"]}, "modles": {}}`,
		`{"roles": {"planner": ["m"]}, "models": {"m": {"retention_days": -1}}}`,
		`{"roles": {"planner": ["m"]}, "models": {"m": {"max_classification": "secret"}}}`,
		`{"roles": {"planner": ["m"]}, "models": {"m": {"input_price_per_m": -1}}}`,
		`{"roles": {"planner": ["m"]}} {}`,
	} {
		if _, err := orchestrator.ParseConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "ftp://x", "http://", "localhost:8080", "http://h/v1?x=1"} {
		if _, err := orchestrator.New(orchestrator.Config{URL: u}); err == nil {
			t.Errorf("accepted %q", u)
		}
	}
}

// clock is a settable clock for the discovery cache.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func modelListings(srv *ot.Server) int {
	n := 0
	for _, r := range srv.Requests() {
		if r.Path == "/v1/models" {
			n++
		}
	}
	return n
}

func TestDiscoveryCacheRefreshAndOutage(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("a")}},
		orchestrator.Config{Models: roles("a", "b"), DiscoveryTTL: 30 * time.Second, Now: clk.Now})
	if n, err := e.c.Refresh(t.Context()); err != nil || n != 1 {
		t.Fatalf("refresh = %d, %v", n, err)
	}
	// Within the TTL (and younger than the on-demand refresh age) the list is reused.
	for range 3 {
		if got, err := e.c.Eligible(t.Context(), app.RolePlanner, anyPolicy); err != nil || len(got) != 1 {
			t.Fatalf("eligible = %v, %v", ids(got), err)
		}
	}
	if n := modelListings(e.srv); n != 1 {
		t.Errorf("%d listings, want 1 (cached)", n)
	}
	// An approved model appears: a list older than a couple of seconds is refreshed on demand.
	e.srv.SetModels(fullModel("a"), fullModel("b"))
	clk.Add(3 * time.Second)
	got, err := e.c.Eligible(t.Context(), app.RolePlanner, anyPolicy)
	if err != nil || strings.Join(ids(got), ",") != "a,b" {
		t.Fatalf("after b appeared: %v, %v", ids(got), err)
	}
	// The orchestrator's listing fails: the previous list serves for a while.
	e.srv.FailModels(503)
	clk.Add(time.Minute)
	if got, err := e.c.Eligible(t.Context(), app.RolePlanner, anyPolicy); err != nil || len(got) != 2 {
		t.Errorf("stale list not used: %v, %v", ids(got), err)
	}
	if !strings.Contains(e.logs.String(), "model discovery failed") {
		t.Errorf("failed discovery not logged: %s", e.logs.String())
	}
	before := modelListings(e.srv)
	_, _ = e.c.Eligible(t.Context(), app.RolePlanner, anyPolicy)
	if after := modelListings(e.srv); after != before {
		t.Errorf("a failed discovery is retried at once (%d → %d listings)", before, after)
	}
	// … but not forever, and Refresh reports the failure.
	if _, err := e.c.Refresh(t.Context()); !errors.Is(err, app.ErrOrchestratorUnavailable) {
		t.Errorf("refresh during the outage: %v", err)
	}
	clk.Add(10 * time.Minute)
	if _, err := e.c.Eligible(t.Context(), app.RolePlanner, anyPolicy); !errors.Is(err, app.ErrOrchestratorUnavailable) {
		t.Errorf("after the stale limit: %v, want ErrOrchestratorUnavailable", err)
	}
}

func TestUnreachableOrchestrator(t *testing.T) {
	t.Parallel()
	srv := ot.Start(t, ot.Config{})
	url := srv.URL
	srv.Close()
	c, err := orchestrator.New(orchestrator.Config{URL: url + "/v1/", Models: roles("a")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Eligible(t.Context(), app.RolePlanner, anyPolicy); !errors.Is(err, app.ErrOrchestratorUnavailable) {
		t.Errorf("eligible = %v, want ErrOrchestratorUnavailable", err)
	}
	if _, err := c.Complete(t.Context(), request(app.RolePlanner)); !errors.Is(err, app.ErrOrchestratorUnavailable) {
		t.Errorf("complete = %v, want ErrOrchestratorUnavailable", err)
	}
}

func TestBadSchemaIsTheCallersError(t *testing.T) {
	t.Parallel()
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("a")}}, orchestrator.Config{Models: roles("a")})
	req := request(app.RolePlanner)
	for _, s := range []string{``, `{`, `{"$ref": "https://example.com/schema.json"}`, `{"type": 12}`} {
		req.Schema = json.RawMessage(s)
		if _, err := e.c.Complete(t.Context(), req); err == nil {
			t.Errorf("schema %q accepted", s)
		}
	}
	if n := len(e.srv.ChatRequests()); n != 0 {
		t.Errorf("%d model calls with a bad schema", n)
	}
}

func TestScriptFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "script.json")
	script := `{"models": [{"id": "m", "provider": "acme", "region": "eu", "retention_days": 0, "max_classification": "restricted"}],
		"answers": {"m": [{"status": 500}, {"content": {"action": "done"}}], "*": [{"content": "plain"}]},
		"repeat_last": true}`
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := ot.LoadScript(file)
	if err != nil {
		t.Fatal(err)
	}
	e := setup(t, ot.Config{}, orchestrator.Config{Models: roles("m")})
	if err := sc.Apply(e.srv); err != nil {
		t.Fatal(err)
	}
	var all *app.AllModelsFailedError
	if _, err := e.c.Complete(t.Context(), request(app.RolePlanner)); !errors.As(err, &all) {
		t.Fatalf("first answer (500): %v", err)
	}
	for range 2 { // the last answer repeats
		rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
		if err != nil || string(rep.Content) != `{"action":"done"}` {
			t.Fatalf("complete = %+v, %v", rep, err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	waitfor.True(t, 5*time.Second, what, cond)
}

func TestDiscoveryExtensionFieldForms(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object": "list", "data": [
			{"id": "nested", "owned_by": "org", "metadata": {"provider": "acme", "region": "eu", "retention_days": 3,
				"max_classification": "internal", "input_price_per_m": 1}},
			{"id": "odd", "provider": 7, "region": "eu", "retention_days": 1.5, "max_classification": "top-secret",
				"input_price_per_m": -2},
			{"id": ""}, {"object": "model"}, {"id": "nested"}
		]}`)
	}))
	t.Cleanup(srv.Close)
	c, err := orchestrator.New(orchestrator.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	// No role configuration: every listed model, but an unknown classification fails closed.
	pol := app.ModelPolicy{DataClassification: "public"}
	got, err := c.Eligible(t.Context(), app.RolePlanner, pol)
	if err != nil || len(got) != 1 {
		t.Fatalf("eligible = %+v, %v; want [nested]", got, err)
	}
	want := app.ModelInfo{ID: "nested", Provider: "acme", Region: "eu", RetentionDays: 3, MaxClassification: "internal", InputPricePerM: 1}
	if got[0] != want {
		t.Errorf("nested = %+v, want %+v", got[0], want)
	}
	_, err = c.Eligible(t.Context(), app.RolePlanner, app.ModelPolicy{DataClassification: "confidential"})
	if !errors.Is(err, app.ErrNoCompliantModel) || !strings.Contains(err.Error(), "odd: highest data classification unknown") {
		t.Errorf("malformed metadata did not stay unknown: %v", err)
	}
	_, err = c.Eligible(t.Context(), app.RolePlanner, app.ModelPolicy{DataClassification: "public", MaxRetentionDays: new(2), AllowedRegions: []string{"eu"}})
	if err == nil || !strings.Contains(err.Error(), "odd: retention unknown") {
		t.Errorf("a fractional retention was taken: %v", err)
	}
}

func TestMetadataOnlyConfiguration(t *testing.T) {
	t.Parallel()
	fc, err := orchestrator.ParseConfig([]byte(`{"models": {"b": {"provider": "acme", "region": "eu", "max_classification": "internal"}}}`))
	if err != nil || !fc.ApprovesAllListed() {
		t.Fatalf("parse = %+v, %v", fc, err)
	}
	e := setup(t, ot.Config{Models: []ot.Model{{ID: "a"}, {ID: "b"}}}, orchestrator.Config{Models: fc})
	got, err := e.c.Eligible(t.Context(), app.RoleObserver, app.ModelPolicy{DataClassification: "internal", AllowedRegions: []string{"eu"}})
	if err != nil || strings.Join(ids(got), ",") != "b" {
		t.Errorf("eligible = %v, %v; want b (a's metadata is unknown)", ids(got), err)
	}
}

// TestMetricsCountModelCalls: /metrics shows calls by role, model and outcome, the tokens and cost
// the orchestrator reported (failed attempts included), requests no model answered, and
// discoveries; no label carries prompt text.
func TestMetricsCountModelCalls(t *testing.T) {
	t.Parallel()
	priced := fullModel("good")
	priced.InputPricePerM, priced.OutputPricePerM = ot.Price(2), ot.Price(10)
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("down"), priced, fullModel("bad")}},
		orchestrator.Config{Models: orchestrator.FileConfig{Roles: map[string][]string{
			app.RolePlanner: {"down", "good"}, app.RoleVerifier: {"bad"}}}})
	e.srv.Script("down", ot.Fail(503))
	ok := ot.JSON(map[string]string{"action": "done"})
	ok.PromptTokens, ok.CompletionTokens = 1000, 100
	e.srv.Script("good", ok)
	bad := ot.Text("not json")
	bad.PromptTokens, bad.CompletionTokens = 50, 5
	e.srv.Script("bad", bad)
	if _, err := e.c.Complete(t.Context(), request(app.RolePlanner)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Complete(t.Context(), request(app.RoleVerifier)); err == nil {
		t.Fatal("the verifier's only model answered garbage, yet Complete succeeded")
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.c)
	got := gather(t, reg)
	for series, want := range map[string]float64{
		`bap_model_calls_total{model="bad",outcome="failed",role="verifier"}`:   1,
		`bap_model_calls_total{model="down",outcome="failed",role="planner"}`:   1,
		`bap_model_calls_total{model="good",outcome="answered",role="planner"}`: 1,
		`bap_model_cost_usd_total{model="good",role="planner"}`:                 0.003,
		`bap_model_requests_unanswered_total{role="verifier"}`:                  1,
		`bap_model_tokens_total{kind="input",model="bad",role="verifier"}`:      50,
		`bap_model_tokens_total{kind="input",model="good",role="planner"}`:      1000,
		`bap_model_tokens_total{kind="output",model="bad",role="verifier"}`:     5,
		`bap_model_tokens_total{kind="output",model="good",role="planner"}`:     100,
		`bap_model_call_duration_seconds{outcome="answered",role="planner"}`:    1, // observations
		`bap_model_call_duration_seconds{outcome="failed",role="planner"}`:      1,
		`bap_model_call_duration_seconds{outcome="failed",role="verifier"}`:     1,
	} {
		if v, ok := got[series]; !ok || v < want-1e-9 || v > want+1e-9 {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	if got[`bap_model_discoveries_total{outcome="listed"}`] < 1 {
		t.Errorf("no discovery counted: %v", got)
	}
	if n := len(got); n != 13 {
		t.Errorf("%d series, want 13: %v", n, got)
	}
}

// gather reads every series of g as name{label="value",…} (labels sorted) → value; a histogram
// gives its sample count.
func gather(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestReplyIDIsTheCompletionsID: a reply carries the chat completion's id, the delivery id the
// inbox deduplicates it by (issue #23 item 1); an id the inbox cannot hold (not 1–255 visible
// ASCII) is dropped rather than passed on.
func TestReplyIDIsTheCompletionsID(t *testing.T) {
	t.Parallel()
	completion := func(id string) ot.Answer {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion", "model": "m",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": `{"action":"done"}`}}},
			"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 5}})
		return ot.Answer{RawBody: string(b)}
	}
	for _, tc := range []struct {
		name, id, want string
	}{
		{"an id", "chatcmpl-abc123", "chatcmpl-abc123"},
		{"no id", "", ""},
		{"an id with a space", "chatcmpl abc", ""},
		{"an id too long", strings.Repeat("x", 256), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, ot.Config{Models: []ot.Model{fullModel("m")}}, orchestrator.Config{Models: roles("m")})
			e.srv.Script("m", completion(tc.id))
			rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
			if tc.want != "" {
				if err != nil || rep.ReplyID != tc.want {
					t.Fatalf("reply id %q (%v), want %q", rep.ReplyID, err, tc.want)
				}
				return
			}
			// Fail closed: an answer without a usable id is the model's failure, never a reply
			// the inbox cannot process exactly once (ADR 0031).
			var all *app.AllModelsFailedError
			if !errors.As(err, &all) || len(all.Failures) != 1 || !strings.Contains(all.Failures[0].Reason, "no usable id") ||
				all.Failures[0].InputTokens != 10 {
				t.Fatalf("an answer with id %q: %+v %v, want the model's failure naming the missing id (its tokens charged)", tc.id, rep, err)
			}
		})
	}
	// With a fallback, the next model answers the call.
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("m"), fullModel("n")}}, orchestrator.Config{Models: roles("m", "n")})
	e.srv.Script("m", completion(""))
	e.srv.Script("n", completion("chatcmpl-n"))
	rep, err := e.c.Complete(t.Context(), request(app.RolePlanner))
	if err != nil || rep.ReplyID != "chatcmpl-n" || len(rep.Fallbacks) != 1 || rep.Fallbacks[0].Model.ID != "m" {
		t.Fatalf("fallback after an id-less answer: %+v %v", rep, err)
	}
}
