package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/orchestrator"
	ot "github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
)

// Goal-driven tasks through the real model orchestrator (issue #21): BAP's adapter → the pinned,
// unmodified contextual-orchestrator (started here; see orchestratortest.StartContextualOrchestrator)
// → two scripted providers behind its local:// agents, with the documented agents file and BAP
// model configuration (docs/examples/contextual-orchestrator-*.json: planner, verifier, observer
// and safety each mapped to both models, with fallbacks). The browser, the shop and PostgreSQL are
// real as everywhere in e2e.

// chain is BAP → contextual-orchestrator → the providers of acme-large and beta-small.
type chain struct {
	real         *ot.Real
	large, small *ot.Server
	client       *orchestrator.Client

	mu      sync.Mutex
	planner []string // the planner's answers in order, whichever agent serves it; done when exhausted
	safety  []string // the safety role's answers (allow, public when exhausted)
	slow    bool     // planner calls hang at the provider
	started chan struct{}
}

// newChain starts the chain with the planner's scripted steps.
func newChain(t *testing.T, steps ...map[string]any) *chain {
	t.Helper()
	c := &chain{started: make(chan struct{})}
	for _, st := range steps {
		b, _ := json.Marshal(st)
		c.planner = append(c.planner, string(b))
	}
	c.large = ot.Start(t, ot.Config{Models: []ot.Model{{ID: "acme-large"}}, Handler: c.answer})
	c.small = ot.Start(t, ot.Config{Models: []ot.Model{{ID: "beta-small"}}, Handler: c.answer})
	agents, err := ot.RepoFile("docs/examples/contextual-orchestrator-agents.json")
	if err != nil {
		t.Fatal(err)
	}
	c.real = ot.StartContextualOrchestrator(t, ot.RealConfig{AgentsFile: agents,
		Providers: map[string]*ot.Server{"agent_large": c.large, "agent_small": c.small}})
	models, err := ot.RepoFile("docs/examples/contextual-orchestrator-models.json")
	if err != nil {
		t.Fatal(err)
	}
	fc, err := orchestrator.LoadConfigFile(models)
	if err != nil {
		t.Fatal(err)
	}
	c.client, err = orchestrator.New(orchestrator.Config{URL: c.real.URL, Token: c.real.Token, Models: fc,
		CallTimeout: 30 * time.Second, RetryBaseDelay: 100 * time.Millisecond, RetryMaxDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// answer is both providers' answer, by the role the request's schema names.
func (c *chain) answer(r *ot.Request) ot.Answer {
	name := ""
	if rf := r.Chat.ResponseFormat; rf != nil && rf.JSONSchema != nil {
		name = rf.JSONSchema.Name
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch name {
	case "bap_step":
		if c.slow {
			select {
			case <-c.started:
			default:
				close(c.started)
			}
			return ot.Hang()
		}
		next := `{"op":"done","args":{},"reason":"nothing left to do"}`
		if len(c.planner) > 0 {
			next, c.planner = c.planner[0], c.planner[1:]
		}
		return ot.Text(next)
	case "bap_safety":
		next := judgement("allow", "public")
		if len(c.safety) > 0 {
			next, c.safety = c.safety[0], c.safety[1:]
		}
		return ot.Text(next)
	case "bap_observation":
		return ot.JSON(map[string]any{"summary": "a page", "facts": []string{}, "controls": []any{}})
	case "bap_verdict":
		return ot.JSON(map[string]any{"verdict": "yes", "reason": "the page shows it"})
	}
	return ot.Fail(400)
}

// saw reports whether s reached the orchestrator or either provider.
func (c *chain) saw(s string) bool { return c.real.Saw(s) || c.large.Saw(s) || c.small.Saw(s) }

// roleCalls counts the model.called events of role.
func roleCalls(evs []map[string]any, role string) []map[string]any {
	var out []map[string]any
	for _, e := range ofType(evs, "model.called") {
		if data(e)["role"] == role {
			out = append(out, data(e))
		}
	}
	return out
}

// The goal is reached through the chain: every model.called names the model that served it (the
// agent's model, never the virtual one), with reported usage; the safety role judged each step;
// the verifier judged; the postcondition decided; no filled value reached the orchestrator or a
// provider.
func TestContextualGoalCompleted(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	ch := newChain(t, checkoutSteps(sh)...)
	s := newStack(t, withOrchestrator(ch.client))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "ctx-ok", map[string]any{
		"goal": "order the items in the cart", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you for your order 1"}}},
	})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" || done.str("task", "verification") != "verified" || sh.orders.Load() != 1 {
		t.Fatalf("task (orders %d): %s", sh.orders.Load(), done.raw)
	}
	evs := s.history(t, taskID)
	if n, m := len(roleCalls(evs, "planner")), len(roleCalls(evs, "safety")); n != 6 || m != 5 {
		t.Fatalf("%d planner and %d safety calls, want 6 and 5", n, m)
	}
	for _, e := range ofType(evs, "model.called") {
		d := data(e)
		want := map[string]string{"planner": "acme-large", "safety": "acme-large", "verifier": "beta-small", "observer": "beta-small"}[d["role"].(string)]
		if d["model"] != want || d["model"] == ot.VirtualModel || d["requested_model"] != nil || d["usage"] != nil ||
			d["input_tokens"].(float64) <= 0 || d["cost_usd"].(float64) <= 0 {
			t.Fatalf("model.called: %v", d)
		}
	}
	if j := ofType(evs, "verifier.judged"); len(j) != 1 || data(j[0])["verdict"] != "yes" || data(j[0])["model"] != "beta-small" {
		t.Fatalf("verifier.judged: %v", j)
	}
	for _, secret := range []string{"Ada Lovelace", "ada@example.com"} {
		if ch.saw(secret) {
			t.Fatalf("the filled value %q reached the orchestrator or a provider", secret)
		}
	}
	for _, r := range ch.real.Requests() {
		if r.Path == "/v1/chat/completions" && (r.Header.Get("X-Request-Timeout-Ms") == "" || r.Header.Get("Authorization") != "Bearer "+ch.real.Token) {
			t.Fatalf("a call without X-Request-Timeout-Ms or BAP's credential: %v", r.Header)
		}
	}
}

func checkoutSteps(sh *shop) []map[string]any {
	var out []map[string]any
	for _, st := range checkoutScript(sh) {
		out = append(out, st.(map[string]any))
	}
	return out
}

// A submission held by an approval rule waits for a person through the chain as it does anywhere.
func TestContextualHeldStepApproved(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	ch := newChain(t, checkoutSteps(sh)...)
	s := newStack(t, withOrchestrator(ch.client))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "ctx-held", map[string]any{
		"goal": "order, asking first",
		"policy": map[string]any{"allowed_origins": []string{sh.srv.URL},
			"approval_rules": []any{map[string]any{"effect": "form_submission"}}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you for your order 1"}}},
	})
	s.awaitState(t, taskID, "waiting_for_approval")
	if n := sh.orders.Load(); n != 0 {
		t.Fatalf("%d orders before the approval", n)
	}
	reqs := ofType(s.history(t, taskID), "approval.requested")
	if len(reqs) != 1 {
		t.Fatalf("approval.requested: %v", reqs)
	}
	ok := s.operator().must(t, 200, "POST", "/bap/v1/approvals/"+data(reqs[0])["approval_id"].(string)+"/resolve", "ctx-approve",
		map[string]any{"decision": "approve"})
	if ok.str("action_receipt", "outcome") != "applied" {
		t.Fatalf("approve: %s", ok.raw)
	}
	if done := s.awaitState(t, taskID, "succeeded", "failed"); done.str("task", "state") != "succeeded" || sh.orders.Load() != 1 {
		t.Fatalf("after approval: orders %d, %s", sh.orders.Load(), done.raw)
	}
}

// An off-origin proposal is refused by policy, whatever the model behind the orchestrator says.
func TestContextualOffOriginStepRefused(t *testing.T) {
	t.Parallel()
	sh, other := newShop(t), newShop(t)
	ch := newChain(t,
		step("navigate", map[string]any{"url": other.srv.URL + "/checkout?exfiltrate=1"}),
		step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}),
		step("done", nil))
	s := newStack(t, withOrchestrator(ch.client))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "ctx-origin", map[string]any{
		"goal": "look at the checkout", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Checkout"}}},
	})
	if done := s.awaitState(t, taskID, "succeeded", "failed"); done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw)
	}
	if n := other.hits.Load(); n != 0 {
		t.Fatalf("the other origin received %d requests", n)
	}
	first := data(ofType(s.history(t, taskID), "plan.step_finished")[0])
	if first["succeeded"] != false || first["problem_code"] != "origin_not_allowed" {
		t.Fatalf("the off-origin step: %v", first)
	}
	told := false
	for _, r := range ch.large.ChatRequests() {
		told = told || (r.Chat.ResponseFormat.JSONSchema.Name == "bap_step" && strings.Contains(r.Chat.Messages[1].Content, "origin_not_allowed"))
	}
	if !told {
		t.Fatal("the planner was not told of the refusal")
	}
}

// One agent's provider goes down: the orchestrator answers 500 internal_error for its model, a
// failure of that model; the next approved model (the other agent) answers, recorded as
// model.fallback. With both down the task fails all_models_failed.
func TestContextualProviderOutageFallsBack(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	ch := newChain(t, step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}), step("done", nil))
	s := newStack(t, withOrchestrator(ch.client))
	s.startWorkers(t)
	policy := map[string]any{"allowed_origins": []string{sh.srv.URL}}
	ch.large.Close()
	taskID := s.createAutonomous(t, "ctx-fallback", map[string]any{"goal": "look at the checkout", "policy": policy})
	if done := s.awaitState(t, taskID, "succeeded", "failed"); done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw)
	}
	evs := s.history(t, taskID)
	fb := ofType(evs, "model.fallback")
	if len(fb) < 3 { // both planner calls and the safety review of the step
		t.Fatalf("model.fallback: %v", fb)
	}
	for _, e := range fb {
		if d := data(e); d["from_model"] != "acme-large" || d["to_model"] != "beta-small" || d["reason"] != "HTTP 500 internal_error" {
			t.Fatalf("model.fallback: %v", d)
		}
	}
	for _, e := range ofType(evs, "model.called") {
		if d := data(e); d["model"] != "beta-small" {
			t.Fatalf("model.called: %v", d)
		}
	}
	ch.small.Close()
	taskID = s.createAutonomous(t, "ctx-allfail", map[string]any{"goal": "look at the checkout", "policy": policy})
	s.awaitState(t, taskID, "failed")
	assertFailedWith(t, s.history(t, taskID), "all_models_failed")
}

// No configured model satisfies the task's model policy: create_task answers 422 and records
// nothing — the orchestrator's listing alone (no metadata) never makes a model compliant.
func TestContextualNoCompliantModel(t *testing.T) {
	t.Parallel()
	ch := newChain(t)
	s := newStack(t, withOrchestrator(ch.client))
	policy := map[string]any{"allowed_origins": []string{"http://127.0.0.1:*"}}
	for key, mp := range map[string]map[string]any{
		"ctx-422-provider": {"allowed_providers": []string{"contextual-orchestrator"}},
		"ctx-422-region":   {"allowed_regions": []string{"us"}},
	} {
		r := s.call(t, "POST", "/bap/v1/tasks", key, map[string]any{"goal": "anything", "mode": "autonomous", "policy": policy, "model_policy": mp})
		if r.status != 422 || r.body["code"] != "model_policy_unsatisfied" {
			t.Fatalf("%s: %d %s", key, r.status, r.raw)
		}
	}
	if n := len(ch.large.ChatRequests()) + len(ch.small.ChatRequests()); n != 0 {
		t.Fatalf("%d model calls for refused tasks", n)
	}
}

// The step and token budgets end the task through the chain as they do anywhere; a planner whose
// provider reports no usage is charged the worst case, so the token budget still ends the task.
func TestContextualBudgets(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	var steps []map[string]any
	for range 10 {
		steps = append(steps, step("observe", nil))
	}
	ch := newChain(t, steps...)
	s := newStack(t, withOrchestrator(ch.client))
	s.startWorkers(t)
	policy := map[string]any{"allowed_origins": []string{sh.srv.URL}}
	taskID := s.createAutonomous(t, "ctx-steps", map[string]any{"goal": "look around forever", "policy": policy,
		"budget": map[string]any{"max_steps": 2}})
	s.awaitState(t, taskID, "failed")
	evs := s.history(t, taskID)
	if ex := ofType(evs, "budget.exhausted"); len(ex) != 1 || data(ex[0])["budget"] != "max_steps" {
		t.Fatalf("budget.exhausted: %v", ex)
	}
	assertFailedWith(t, evs, "budget_exhausted: max_steps")

	// No usage from the provider: the first call is charged its request size and max_tokens.
	ch.large.SetHandler(func(r *ot.Request) ot.Answer { a := ch.answer(r); a.NoUsage = true; return a })
	taskID = s.createAutonomous(t, "ctx-tokens", map[string]any{"goal": "look around forever", "policy": policy,
		"budget": map[string]any{"max_tokens": 3000}})
	s.awaitState(t, taskID, "failed")
	evs = s.history(t, taskID)
	ex := ofType(evs, "budget.exhausted")
	if len(ex) != 1 || data(ex[0])["budget"] != "max_tokens" || data(ex[0])["used"].(float64) < 3000 {
		t.Fatalf("budget.exhausted: %v", ex)
	}
	calls := ofType(evs, "model.called")
	if len(calls) == 0 || data(calls[0])["role"] != "planner" || data(calls[0])["usage"] != "unknown" ||
		data(calls[0])["output_tokens"] != float64(2048) || data(calls[0])["input_tokens"].(float64) < 1000 {
		t.Fatalf("model.called with unknown usage: %v", calls)
	}
	for _, c := range calls {
		if data(c)["usage"] != "unknown" {
			t.Fatalf("a call without usage recorded as reported: %v", data(c))
		}
	}
}

// cancel_task during a slow call returns at once; the call BAP abandoned keeps running at the
// orchestrator (contextual-orchestrator does not stop its upstream call), and nothing is recorded.
func TestContextualCancelDuringSlowCall(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	ch := newChain(t)
	ch.slow = true
	const cancelDeadline = 20 * time.Second
	s := newStack(t, withOrchestrator(ch.client), func(c *app.Config) { c.CancelDeadline = cancelDeadline })
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "ctx-slow", map[string]any{"goal": "think slowly",
		"policy": map[string]any{"allowed_origins": []string{sh.srv.URL}}})
	select {
	case <-ch.started:
	case <-time.After(120 * time.Second):
		t.Fatal("the planner was never called")
	}
	start := time.Now()
	r := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/cancel", "ctx-cancel", map[string]any{"reason": "changed my mind"})
	if took := time.Since(start); r.str("task", "state") != "cancelled" || took >= cancelDeadline {
		t.Fatalf("cancel_task after %s: %s", took, r.raw)
	}
	evs := s.history(t, taskID)
	if len(ofType(evs, "model.called")) != 0 || len(ofType(evs, "plan.step_started")) != 0 {
		t.Fatal("the cancelled call was recorded as answered")
	}
	// BAP went away; the orchestrator's call to the provider did not.
	gone := false
	for _, r := range ch.real.Requests() {
		gone = gone || (r.Path == "/v1/chat/completions" && r.Status == ot.StatusClientGone)
	}
	if !gone || ch.large.Pending() != 1 {
		t.Fatalf("BAP's call abandoned %v, provider calls still running %d (want true, 1)", gone, ch.large.Pending())
	}
}

// Canary secrets (a filled password the page echoes, an HttpOnly cookie) never reach the
// orchestrator's request log, what it printed, or either provider's request log.
func TestContextualCanariesNeverReachTheChain(t *testing.T) {
	t.Parallel()
	const pwCanary, cookieCanary = "pw-CANARY-ctx-5d1b", "cookie-CANARY-ctx-8e2f"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: cookieCanary, Path: "/", HttpOnly: true})
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Sign in</title><h1>Sign in</h1>
<label for="pw">Password</label><input id="pw" name="pw" type="password">
<p id="echo"></p>
<script>document.getElementById("pw").addEventListener("input", e => { document.getElementById("echo").textContent = "you typed " + e.target.value; });</script>`)
	})
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)
	ch := newChain(t,
		step("navigate", map[string]any{"url": site.URL + "/login"}),
		step("act", map[string]any{"action": "fill", "query": map[string]any{"label": "Password"}, "value": pwCanary}),
		step("observe", nil),
		step("done", nil))
	s := newStack(t, withOrchestrator(ch.client))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "ctx-canary", map[string]any{"goal": "sign in",
		"policy":        map[string]any{"allowed_origins": []string{site.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "you typed"}}}})
	if done := s.awaitState(t, taskID, "succeeded", "failed"); done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw)
	}
	if !ch.saw("you typed ***") || !ch.saw("Sign in") {
		t.Fatal("the chain was not sent the (masked) page")
	}
	for _, canary := range []string{pwCanary, cookieCanary} {
		if ch.saw(canary) {
			t.Fatalf("the canary %q reached the orchestrator or a provider", canary)
		}
	}
	evs := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	if strings.Contains(string(evs.raw), pwCanary) || strings.Contains(string(evs.raw), cookieCanary) {
		t.Fatal("a canary is in the task's history")
	}
}
