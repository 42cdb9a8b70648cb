package orchestrator_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/orchestrator"
	ot "github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
)

// TestThroughTheRealContextualOrchestrator: the adapter against the real contextual-orchestrator
// (its pinned copy, started here: BAP → orchestrator → two scripted providers behind local://
// agents), configured with the documented files (docs/examples/contextual-orchestrator-*.json).
// Discovery approves only the configured models (never the virtual one); the model recorded is
// the one that served the call, from the answer; a provider without usage is recorded as unknown;
// a prompt beyond 64 KiB is cut to fit instead of meeting 413; one provider going down falls back
// to the other agent; the deadline travels as X-Request-Timeout-Ms.
func TestThroughTheRealContextualOrchestrator(t *testing.T) {
	t.Parallel()
	large := ot.Start(t, ot.Config{Models: []ot.Model{{ID: "acme-large"}}})
	small := ot.Start(t, ot.Config{Models: []ot.Model{{ID: "beta-small"}}})
	agents, err := ot.RepoFile("docs/examples/contextual-orchestrator-agents.json")
	if err != nil {
		t.Fatal(err)
	}
	// A third agent BAP has no configuration for.
	extra := ot.Start(t, ot.Config{Models: []ot.Model{{ID: "gamma-unvetted"}}})
	real := ot.StartContextualOrchestrator(t, ot.RealConfig{AgentsFile: agents,
		Providers: map[string]*ot.Server{"agent_large": large, "agent_small": small},
		Agents:    []ot.Agent{{ID: "agent_extra", Model: "gamma-unvetted", ProviderName: "gamma", Provider: extra}}})
	modelsFile, err := ot.RepoFile("docs/examples/contextual-orchestrator-models.json")
	if err != nil {
		t.Fatal(err)
	}
	fc, err := orchestrator.LoadConfigFile(modelsFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := orchestrator.New(orchestrator.Config{URL: real.URL, Token: real.Token, Models: fc})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.Refresh(t.Context()); err != nil || n != 4 {
		t.Fatalf("refresh = %d, %v; want 4 listed (the virtual model and three agents)", n, err)
	}
	got, err := c.Eligible(t.Context(), app.RolePlanner, app.ModelPolicy{AllowedRegions: []string{"eu"}})
	if err != nil || strings.Join(ids(got), ",") != "acme-large,beta-small" || got[0].Provider != "acme" {
		t.Fatalf("planner models = %+v, %v", got, err)
	}
	// Approving every listed model: never the virtual one; the unconfigured agent is refused, saying why.
	all, err := orchestrator.New(orchestrator.Config{URL: real.URL, Token: real.Token,
		Models: orchestrator.FileConfig{Models: fc.Models}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := all.Eligible(t.Context(), app.RoleSafety, app.ModelPolicy{}); err != nil || strings.Join(ids(got), ",") != "acme-large,beta-small" {
		t.Errorf("every listed model approved: %v, %v", ids(got), err)
	}
	_, err = all.Eligible(t.Context(), app.RoleSafety, app.ModelPolicy{AllowedProviders: []string{"gamma"}})
	if !errors.Is(err, app.ErrNoCompliantModel) || !strings.Contains(err.Error(), "gamma-unvetted: listed by the orchestrator but not configured") ||
		strings.Contains(err.Error(), ot.VirtualModel+":") {
		t.Errorf("the unconfigured model: %v", err)
	}

	// A call: served by the model asked for, named by the answer; usage reported.
	large.Script("acme-large", done())
	rep, err := c.Complete(t.Context(), request(app.RolePlanner))
	if err != nil || rep.Model.ID != "acme-large" || rep.RequestedModel != "" || rep.UsageUnknown || rep.InputTokens <= 0 {
		t.Fatalf("complete = %+v, %v", rep, err)
	}
	if reqs := large.ChatRequests(); len(reqs) != 1 || reqs[0].Chat.Model != "acme-large" || reqs[0].Chat.ResponseFormat == nil {
		t.Fatalf("the provider got %d requests", len(reqs))
	}
	// The provider sends no usage; the orchestrator passes that on: unknown, charged the worst case.
	large.Script("acme-large", ot.Answer{Content: `{"action":"done"}`, NoUsage: true})
	if rep, err = c.Complete(t.Context(), request(app.RolePlanner)); err != nil || !rep.UsageUnknown || rep.OutputTokens != 256 {
		t.Fatalf("no usage: %+v, %v", rep, err)
	}
	// A prompt of 200 KB: cut to fit (the orchestrator would answer 413 request_too_large).
	large.Script("acme-large", done())
	req := request(app.RolePlanner)
	req.Messages[1].Content = strings.Repeat("a long page ", 17000)
	if rep, err = c.Complete(t.Context(), req); err != nil || rep.TruncatedBytes <= 0 || len(rep.Fallbacks) != 0 {
		t.Fatalf("a long prompt: %+v, %v", rep, err)
	}
	// The large model's provider goes down: 500 internal_error from the orchestrator, a failure of
	// that model; the small model's agent answers.
	large.Close()
	small.Script("beta-small", done())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rep, err = c.Complete(ctx, request(app.RolePlanner))
	if err != nil || rep.Model.ID != "beta-small" || len(rep.Fallbacks) != 1 || rep.Fallbacks[0].Model.ID != "acme-large" ||
		rep.Fallbacks[0].Reason != "HTTP 500 internal_error" {
		t.Fatalf("after the outage: %+v, %v", rep, err)
	}
	var timeouts int
	for _, r := range real.Requests() {
		if r.Path != "/v1/chat/completions" {
			continue
		}
		if len(r.Body) > orchestrator.DefaultMaxRequestBytes || r.Status == 413 {
			t.Errorf("a request of %d bytes reached the orchestrator (status %d)", len(r.Body), r.Status)
		}
		if ms, err := strconv.Atoi(r.Header.Get("X-Request-Timeout-Ms")); err == nil && ms > 0 {
			timeouts++
		}
	}
	if timeouts != 5 {
		t.Errorf("%d chat requests carried X-Request-Timeout-Ms, want 5", timeouts)
	}
}
