package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// Goal-driven (autonomous) tasks (issue #11, ADR 0013): the workers ask the orchestrator's planner
// for one typed step at a time and run it through the same use-cases as a plan step. The
// orchestrator is an in-process fake of app.Orchestrator with scripted answers and a log of every
// request it received; the browser, the shop and PostgreSQL are real.

// fakeOrchestrator implements app.Orchestrator: models by role (filtered by model policy, fail
// closed), scripted planner answers, a verifier verdict, failing models, and a slow mode.
type fakeOrchestrator struct {
	mu      sync.Mutex
	models  map[string][]app.ModelInfo // by role, in order
	failing map[string]bool            // model id → every call to it fails
	script  []func() string            // planner answers, in order; "done" when exhausted
	// replyIDs are the ids of the planner's replies, in order (none when exhausted): one id
	// twice is a reply the orchestrator delivered again.
	replyIDs []string
	// replies numbers the replies without a scripted id.
	replies atomic.Int64
	verdict string
	log     []app.ModelRequest // every Complete request, as received
	// safety answers, in order (allow, public when exhausted); observer is the observer's answer.
	safety   []string
	observer string

	slow      bool          // planner calls block until their context ends
	started   chan struct{} // closed when a slow call started
	cancelled chan struct{} // closed when a slow call's context ended
}

func model(id, provider string) app.ModelInfo {
	return app.ModelInfo{ID: id, Provider: provider, Region: "eu", RetentionDays: 0, MaxClassification: "restricted",
		InputPricePerM: 1, OutputPricePerM: 2}
}

func newFake(steps ...any) *fakeOrchestrator {
	f := &fakeOrchestrator{
		models: map[string][]app.ModelInfo{
			app.RolePlanner:  {model("planner-large", "acme")},
			app.RoleVerifier: {model("verifier-small", "acme")},
		},
		failing: map[string]bool{}, verdict: "yes",
		started: make(chan struct{}), cancelled: make(chan struct{}),
	}
	for _, st := range steps {
		switch v := st.(type) {
		case func() string:
			f.script = append(f.script, v)
		default:
			b, _ := json.Marshal(v)
			f.script = append(f.script, func() string { return string(b) })
		}
	}
	return f
}

// judgement builds a safety answer.
func judgement(verdict, classification string) string {
	return fmt.Sprintf(`{"verdict":%q,"classification":%q,"reason":"scripted %s"}`, verdict, classification, verdict)
}

// step builds a planner answer.
func step(op string, args map[string]any) map[string]any {
	if args == nil {
		args = map[string]any{}
	}
	return map[string]any{"op": op, "args": args, "reason": "scripted " + op}
}

func satisfies(m app.ModelInfo, p app.ModelPolicy) bool {
	if len(p.AllowedProviders) > 0 && !slices.Contains(p.AllowedProviders, m.Provider) {
		return false
	}
	if len(p.AllowedRegions) > 0 && !slices.Contains(p.AllowedRegions, m.Region) {
		return false
	}
	if p.MaxRetentionDays != nil && (m.RetentionDays < 0 || m.RetentionDays > *p.MaxRetentionDays) {
		return false
	}
	need := p.DataClassification
	if need == "" {
		need = "restricted"
	}
	have := slices.Index(app.DataClassifications, m.MaxClassification)
	return have >= 0 && have >= slices.Index(app.DataClassifications, need)
}

func (f *fakeOrchestrator) Eligible(ctx context.Context, role string, pol app.ModelPolicy) ([]app.ModelInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []app.ModelInfo
	for _, m := range f.models[role] {
		if satisfies(m, pol) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, app.ErrNoCompliantModel
	}
	return out, nil
}

func (f *fakeOrchestrator) Complete(ctx context.Context, req app.ModelRequest) (*app.ModelReply, error) {
	models, err := f.Eligible(ctx, req.Role, req.Policy)
	f.mu.Lock()
	f.log = append(f.log, req)
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	prompt, _ := json.Marshal(req.Messages)
	sum := sha256.Sum256(prompt)
	var failures []app.ModelFailure
	for _, m := range models {
		f.mu.Lock()
		failing, slow := f.failing[m.ID], f.slow && req.Role == app.RolePlanner
		f.mu.Unlock()
		if failing {
			failures = append(failures, app.ModelFailure{Model: m, Reason: "scripted outage: 503 from the provider", Latency: 5 * time.Millisecond})
			continue
		}
		if slow {
			close(f.started)
			<-ctx.Done()
			close(f.cancelled)
			return nil, ctx.Err()
		}
		var content, replyID string
		switch req.Role {
		case app.RolePlanner:
			f.mu.Lock()
			if len(f.replyIDs) > 0 {
				replyID, f.replyIDs = f.replyIDs[0], f.replyIDs[1:]
			}
			content = `{"op":"done","args":{},"reason":"nothing left to do"}`
			if len(f.script) > 0 {
				next := f.script[0]
				f.script = f.script[1:]
				f.mu.Unlock()
				content = next()
			} else {
				f.mu.Unlock()
			}
		case app.RoleSafety:
			f.mu.Lock()
			content = judgement("allow", "public")
			if len(f.safety) > 0 {
				content, f.safety = f.safety[0], f.safety[1:]
			}
			f.mu.Unlock()
		case app.RoleObserver:
			f.mu.Lock()
			content = f.observer
			f.mu.Unlock()
		default:
			f.mu.Lock()
			content = fmt.Sprintf(`{"verdict":%q,"reason":"scripted verdict"}`, f.verdict)
			f.mu.Unlock()
		}
		in, out := len(prompt)/4, 25
		return &app.ModelReply{Model: m, Content: json.RawMessage(content), PromptSHA256: hex.EncodeToString(sum[:]),
			InputTokens: in, OutputTokens: out, CostUSD: float64(in)*m.InputPricePerM/1e6 + float64(out)*m.OutputPricePerM/1e6,
			Latency: 3 * time.Millisecond, Reasoning: req.Reasoning, Fallbacks: failures, ReplyID: f.replyID(replyID)}, nil
	}
	return nil, &app.AllModelsFailedError{Role: req.Role, Failures: failures}
}

// noReplyID scripts a planner reply without an id (which the orchestrator adapter never passes on).
const noReplyID = "(none)"

// replyID is scripted, or else a fresh id: every reply carries one, as the orchestrator adapter
// requires of an answer.
func (f *fakeOrchestrator) replyID(scripted string) string {
	if scripted == noReplyID {
		return ""
	}
	if scripted != "" {
		return scripted
	}
	return fmt.Sprintf("fake-%d", f.replies.Add(1))
}

// sent is everything BAP sent the fake, as one string.
func (f *fakeOrchestrator) sent() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, r := range f.log {
		for _, m := range r.Messages {
			b.WriteString(m.Content)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (f *fakeOrchestrator) requests(role string) []app.ModelRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []app.ModelRequest
	for _, r := range f.log {
		if r.Role == role {
			out = append(out, r)
		}
	}
	return out
}

func withOrchestrator(o app.Orchestrator) func(*app.Config) {
	return func(c *app.Config) { c.Orchestrator = o }
}

// createAutonomous creates an autonomous task on the shop.
func (s *stack) createAutonomous(t *testing.T, key string, body map[string]any) string {
	t.Helper()
	body["mode"] = "autonomous"
	r := s.must(t, 201, "POST", "/bap/v1/tasks", key, body)
	task, _ := r.body["task"].(map[string]any)
	if task["mode"] != "autonomous" || task["delegated"] != true {
		t.Fatalf("create_task: %s", r.raw)
	}
	return r.str("task", "task_id")
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func checkoutScript(sh *shop) []any {
	return []any{
		step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}),
		step("act", map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Ada Lovelace"}),
		step("act", map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "ada@example.com"}),
		step("act", map[string]any{"action": "check", "query": map[string]any{"role": "checkbox"}}),
		step("act", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}}),
		step("done", nil),
	}
}

// A goal is reached on the shop through planner steps: each proposed step runs as a worker command
// with its receipt; every model call records its provenance; the verifier's judgement is recorded
// beside the postcondition, which decides; close evidence is captured; no filled value is in the
// history or in what the models were sent.
func TestAutonomousGoalCompletedOnShop(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	fake := newFake(checkoutScript(sh)...)
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-ok", map[string]any{
		"goal": "order the items in the cart", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you for your order 1"}}},
	})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	task := done.body["task"].(map[string]any)
	if task["state"] != "succeeded" || task["verification"] != "verified" {
		t.Fatalf("task: %s", done.raw)
	}
	if b := task["budget"].(map[string]any); b["max_steps"] != float64(50) || b["max_wall_time_ms"] != float64(1800000) {
		t.Fatalf("budget defaults: %v", b)
	}
	if mp := task["model_policy"].(map[string]any); mp["data_classification"] != "restricted" {
		t.Fatalf("model policy defaults: %v", mp)
	}
	if n := sh.orders.Load(); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
	evs := s.history(t, taskID)
	calls := ofType(evs, "model.called")
	if len(calls) != 7 { // 6 planner answers (5 steps + done) and the verifier
		t.Fatalf("%d model.called events, want 7", len(calls))
	}
	for i, e := range calls {
		d := data(e)
		role := "planner"
		if i == 6 {
			role = "verifier"
		}
		if d["role"] != role || d["provider"] != "acme" || !sha256Hex.MatchString(fmt.Sprint(d["prompt_sha256"])) ||
			d["input_tokens"].(float64) <= 0 || d["output_tokens"] != float64(25) || d["step"] == nil {
			t.Fatalf("model.called %d: %v", i, d)
		}
		if a, _ := e["actor"].(map[string]any); a["kind"] != "worker" {
			t.Fatalf("model.called actor: %v", e["actor"])
		}
	}
	if d := data(calls[0]); d["model"] != "planner-large" || d["reasoning"] != "high" || d["step"] != float64(0) {
		t.Fatalf("first planner call: %v", d)
	}
	props := ofType(evs, "planner.proposed")
	if len(props) != 6 || data(props[5])["op"] != "done" || data(props[1])["args"].(map[string]any)["value"] != "***" {
		t.Fatalf("planner.proposed: %v", props)
	}
	finished := ofType(evs, "plan.step_finished")
	if len(finished) != 5 {
		t.Fatalf("%d steps finished, want 5", len(finished))
	}
	for i, e := range finished {
		if d := data(e); d["index"] != float64(i) || d["succeeded"] != true || d["receipt_id"] == nil {
			t.Fatalf("step %d: %v", i, d)
		}
	}
	// The verifier judged before close_task; the postcondition decided (evaluated after it).
	judged := ofType(evs, "verifier.judged")
	if len(judged) != 1 || data(judged[0])["verdict"] != "yes" || data(judged[0])["model"] != "verifier-small" {
		t.Fatalf("verifier.judged: %v", judged)
	}
	if pc := ofType(evs, "postcondition.evaluated"); len(pc) != 1 || data(pc[0])["satisfied"] != true || pc[0]["seq"].(float64) < judged[0]["seq"].(float64) {
		t.Fatalf("postcondition.evaluated: %v", pc)
	}
	if ev := ofType(evs, "evidence.captured"); len(ev) == 0 {
		t.Fatal("close_task captured no evidence")
	}
	raw, _ := json.Marshal(evs)
	for _, secret := range []string{"Ada Lovelace", "ada@example.com"} {
		if strings.Contains(string(raw), secret) {
			t.Fatalf("the history holds the filled value %q", secret)
		}
		if strings.Contains(fake.sent(), secret) {
			t.Fatalf("a model was sent the filled value %q", secret)
		}
	}
	// The planner saw the page (masked) and the outcome of earlier steps.
	reqs := fake.requests(app.RolePlanner)
	if len(reqs) != 6 || !strings.Contains(reqs[1].Messages[1].Content, "Place order") || reqs[0].SchemaName == "" || len(reqs[0].Schema) == 0 {
		t.Fatalf("planner requests: %d", len(reqs))
	}
	var steps int
	if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM task_plan_step WHERE task_id = $1 AND NOT args::text LIKE '%Ada%'`,
		taskID).Scan(&steps); err != nil || steps != 5 {
		t.Fatalf("stored steps (masked): %d, %v", steps, err)
	}
}

// An approval rule holds the planner's submission exactly as it would a client's: the task waits,
// a person approves, the held click runs once and the loop carries on to success.
func TestAutonomousHeldStepApprovedByAPerson(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t, withOrchestrator(newFake(checkoutScript(sh)...)))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-held", map[string]any{
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
	apr := data(reqs[0])["approval_id"].(string)
	ok := s.operator().must(t, 200, "POST", "/bap/v1/approvals/"+apr+"/resolve", "auto-approve", map[string]any{"decision": "approve"})
	if ok.str("action_receipt", "outcome") != "applied" {
		t.Fatalf("approve: %s", ok.raw)
	}
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" || sh.orders.Load() != 1 {
		t.Fatalf("after approval: orders %d, %s", sh.orders.Load(), done.raw)
	}
	evs := s.history(t, taskID)
	var click map[string]any
	for _, e := range ofType(evs, "plan.step_finished") {
		if data(e)["index"] == float64(4) {
			click = data(e)
		}
	}
	if click == nil || click["succeeded"] != true {
		t.Fatalf("the held click's step: %v", click)
	}
}

// A proposed navigation outside the allowed origins is refused by the policy whatever the model
// says: nothing loads, the refusal is recorded, the planner is told and carries on.
func TestAutonomousOffOriginStepRefusedByPolicy(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	other := newShop(t)
	fake := newFake(
		step("navigate", map[string]any{"url": other.srv.URL + "/checkout?exfiltrate=1"}),
		step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}),
		step("done", nil),
	)
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-origin", map[string]any{
		"goal": "look at the checkout", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Checkout"}}},
	})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw)
	}
	if n := other.hits.Load(); n != 0 {
		t.Fatalf("the other origin received %d requests", n)
	}
	evs := s.history(t, taskID)
	first := data(ofType(evs, "plan.step_finished")[0])
	if first["succeeded"] != false || first["problem_code"] != "origin_not_allowed" || first["receipt_id"] == nil {
		t.Fatalf("the off-origin step: %v", first)
	}
	reqs := fake.requests(app.RolePlanner)
	if len(reqs) != 3 || !strings.Contains(reqs[1].Messages[1].Content, "origin_not_allowed") {
		t.Fatalf("the planner was not told of the refusal (%d requests)", len(reqs))
	}
}

// A failing model falls back to the next approved one, recorded as model.fallback; when every
// approved model fails the task fails with the cause.
func TestAutonomousModelFallback(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	fake := newFake(step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}), step("done", nil))
	fake.models[app.RolePlanner] = []app.ModelInfo{model("planner-flaky", "acme"), model("planner-steady", "acme")}
	fake.failing["planner-flaky"] = true
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	policy := map[string]any{"allowed_origins": []string{sh.srv.URL}}
	taskID := s.createAutonomous(t, "auto-fallback", map[string]any{"goal": "look at the checkout", "policy": policy})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" || done.str("task", "verification") != "unverified" {
		t.Fatalf("task: %s", done.raw)
	}
	evs := s.history(t, taskID)
	fb := ofType(evs, "model.fallback")
	if len(fb) != 2 { // one per planner call
		t.Fatalf("model.fallback events: %v", fb)
	}
	if d := data(fb[0]); d["role"] != "planner" || d["from_model"] != "planner-flaky" || d["to_model"] != "planner-steady" || d["reason"] == "" {
		t.Fatalf("model.fallback: %v", d)
	}
	for _, e := range ofType(evs, "model.called") {
		if d := data(e); d["role"] == "planner" && d["model"] != "planner-steady" {
			t.Fatalf("model.called: %v", d)
		}
	}

	// Every approved planner model fails: the task fails with the cause, never a silent downgrade.
	fake.mu.Lock()
	fake.failing["planner-steady"] = true
	fake.mu.Unlock()
	taskID = s.createAutonomous(t, "auto-allfail", map[string]any{"goal": "look at the checkout", "policy": policy})
	s.awaitState(t, taskID, "failed")
	evs = s.history(t, taskID)
	fb = ofType(evs, "model.fallback")
	if len(fb) != 2 || data(fb[1])["to_model"] != nil {
		t.Fatalf("model.fallback when all fail: %v", fb)
	}
	assertFailedWith(t, evs, "all_models_failed")
}

// TestOrchestratorReplyDeliveredTwiceIsProcessedOnce: the orchestrator's reply is an inbound
// delivery (issue #23 item 1). A reply that comes again with its id — here the planner's
// navigate, delivered a second time as the answer to the next call — is recognised by the inbox:
// it is not recorded, charged or run again; the next call's fresh reply is. A planner that keeps
// redelivering stops the task (orchestrator_unavailable), never running a step twice.
func TestOrchestratorReplyDeliveredTwiceIsProcessedOnce(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	nav := step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"})
	fake := newFake(nav, nav, step("done", nil))
	fake.replyIDs = []string{"chatcmpl-nav", "chatcmpl-nav", "chatcmpl-done"}
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	policy := map[string]any{"allowed_origins": []string{sh.srv.URL}}
	taskID := s.createAutonomous(t, "auto-redelivered", map[string]any{"goal": "look at the checkout", "policy": policy})
	if done := s.awaitState(t, taskID, "succeeded", "failed"); done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw)
	}
	evs := s.history(t, taskID)
	var planner []map[string]any
	for _, e := range ofType(evs, "model.called") {
		if data(e)["role"] == "planner" {
			planner = append(planner, e)
		}
	}
	if n := len(fake.requests(app.RolePlanner)); n != 3 || len(planner) != 2 {
		t.Fatalf("%d planner calls, %d recorded; want 3 asked and 2 recorded (the redelivered reply is not)", n, len(planner))
	}
	if props := ofType(evs, "planner.proposed"); len(props) != 2 || data(props[0])["op"] != "navigate" || data(props[1])["op"] != "done" {
		t.Fatalf("planner.proposed: %v", props)
	}
	if steps := ofType(evs, "plan.step_finished"); len(steps) != 1 {
		t.Fatalf("%d steps run, want the navigate once: %v", len(steps), steps)
	}
	rows, err := s.db.Query(context.Background(), `SELECT i.delivery_id, e.event_type FROM inbox_event i
		JOIN agent_task_event e ON e.task_id = i.task_id AND e.seq = i.event_seq
		WHERE i.source = 'orchestrator' AND i.task_id = $1 AND i.delivery_id LIKE 'chatcmpl-%' ORDER BY i.event_seq`, taskID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id, typ string
		if err := rows.Scan(&id, &typ); err != nil {
			t.Fatal(err)
		}
		got = append(got, id+" "+typ)
	}
	if rows.Err() != nil || !slices.Equal(got, []string{"chatcmpl-nav model.called", "chatcmpl-done model.called"}) {
		t.Fatalf("the inbox: %v (%v)", got, rows.Err())
	}

	// An orchestrator that answers another task's calls with that reply again, twice: nothing of
	// it is recorded or run, and the task stops.
	navJSON, _ := json.Marshal(nav)
	again := func() string { return string(navJSON) }
	evs = s.failsOnReplies(t, fake, "auto-redelivering", policy, []func() string{again, again}, []string{"chatcmpl-nav", "chatcmpl-nav"})
	if n, p := len(ofType(evs, "model.called")), len(ofType(evs, "planner.proposed")); n != 0 || p != 0 {
		t.Fatalf("%d model calls and %d proposals recorded from redelivered replies, want none", n, p)
	}
	// A reply without an id cannot be processed exactly once: it is refused, never taken as the
	// step, and the task stops (ADR 0031; the adapter takes such an answer for a model failure).
	evs = s.failsOnReplies(t, fake, "auto-no-reply-id", policy, []func() string{again}, []string{noReplyID})
	if p, st := len(ofType(evs, "planner.proposed")), len(ofType(evs, "plan.step_finished")); p != 0 || st != 0 {
		t.Fatalf("%d proposals and %d steps from a reply without an id, want none", p, st)
	}
}

// failsOnReplies runs a goal-driven task whose planner answers script with ids, and returns its
// history once it failed with orchestrator_unavailable.
func (s *stack) failsOnReplies(t *testing.T, fake *fakeOrchestrator, key string, policy map[string]any, script []func() string, ids []string) []map[string]any {
	t.Helper()
	fake.mu.Lock()
	fake.script, fake.replyIDs = script, ids
	fake.mu.Unlock()
	taskID := s.createAutonomous(t, key, map[string]any{"goal": "look at the checkout", "policy": policy})
	s.awaitState(t, taskID, "failed")
	evs := s.history(t, taskID)
	assertFailedWith(t, evs, "orchestrator_unavailable")
	return evs
}

func assertFailedWith(t *testing.T, evs []map[string]any, cause string) {
	t.Helper()
	changes := ofType(evs, "task.state_changed")
	last := changes[len(changes)-1]
	reason, _ := last["cause"].(map[string]any)["reason"].(string)
	if d := data(last); d["to"] != "failed" || !strings.HasPrefix(reason, cause) {
		t.Fatalf("last state change: %v (cause %q, want %s)", d, reason, cause)
	}
}

// No approved model satisfying the model policy: create_task is refused (422), not recorded
// under the key; a model list that changes mid-task stops the task with the cause.
func TestAutonomousNoCompliantModel(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	fake := newFake()
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	policy := map[string]any{"allowed_origins": []string{sh.srv.URL}}
	r := s.call(t, "POST", "/bap/v1/tasks", "auto-422", map[string]any{"goal": "anything", "mode": "autonomous", "policy": policy,
		"model_policy": map[string]any{"allowed_providers": []string{"nowhere-ai"}}})
	if r.status != 422 || r.body["code"] != "model_policy_unsatisfied" {
		t.Fatalf("no compliant model: %d %s", r.status, r.raw)
	}
	r = s.call(t, "POST", "/bap/v1/tasks", "auto-422b", map[string]any{"goal": "anything", "mode": "autonomous", "policy": policy,
		"model_policy": map[string]any{"allowed_regions": []string{"us"}, "data_classification": "public"}})
	if r.status != 422 || r.body["code"] != "model_policy_unsatisfied" {
		t.Fatalf("no model in the region: %d %s", r.status, r.raw)
	}
	// Not recorded: the key is free for another request.
	s.must(t, 201, "POST", "/bap/v1/tasks", "auto-422", map[string]any{"goal": "anything else", "policy": policy})

	// Mid-task: after the first step, the orchestrator offers only models of another provider.
	fake.mu.Lock()
	fake.script = []func() string{func() string {
		fake.mu.Lock()
		fake.models[app.RolePlanner] = []app.ModelInfo{model("planner-elsewhere", "other-ai")}
		fake.mu.Unlock()
		b, _ := json.Marshal(step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}))
		return string(b)
	}}
	fake.mu.Unlock()
	taskID := s.createAutonomous(t, "auto-drift", map[string]any{"goal": "look at the checkout", "policy": policy,
		"model_policy": map[string]any{"allowed_providers": []string{"acme"}}})
	s.awaitState(t, taskID, "failed")
	evs := s.history(t, taskID)
	assertFailedWith(t, evs, "model_policy_unsatisfied")
	for _, e := range ofType(evs, "model.called") {
		if data(e)["provider"] != "acme" {
			t.Fatalf("a model outside the policy was used: %v", data(e))
		}
	}
}

// Budgets: the step budget and the token budget each end the task failed with budget.exhausted.
func TestAutonomousBudgetExhausted(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	var answers []any
	for i := 0; i < 10; i++ {
		answers = append(answers, step("observe", nil))
	}
	s := newStack(t, withOrchestrator(newFake(answers...)))
	s.startWorkers(t)
	policy := map[string]any{"allowed_origins": []string{sh.srv.URL}}
	taskID := s.createAutonomous(t, "auto-steps", map[string]any{"goal": "look around forever", "policy": policy,
		"budget": map[string]any{"max_steps": 2}})
	s.awaitState(t, taskID, "failed")
	evs := s.history(t, taskID)
	ex := ofType(evs, "budget.exhausted")
	if len(ex) != 1 || data(ex[0])["budget"] != "max_steps" || data(ex[0])["used"] != float64(2) || data(ex[0])["limit"] != float64(2) {
		t.Fatalf("budget.exhausted: %v", ex)
	}
	if n := len(ofType(evs, "plan.step_finished")); n != 2 {
		t.Fatalf("%d steps ran, want 2", n)
	}
	assertFailedWith(t, evs, "budget_exhausted: max_steps")

	taskID = s.createAutonomous(t, "auto-tokens", map[string]any{"goal": "look around forever", "policy": policy,
		"budget": map[string]any{"max_tokens": 10}})
	s.awaitState(t, taskID, "failed")
	evs = s.history(t, taskID)
	ex = ofType(evs, "budget.exhausted")
	if len(ex) != 1 || data(ex[0])["budget"] != "max_tokens" || data(ex[0])["limit"] != float64(10) || data(ex[0])["used"].(float64) < 10 {
		t.Fatalf("budget.exhausted: %v", ex)
	}
	if n := len(ofType(evs, "model.called")); n != 1 {
		t.Fatalf("%d model calls after the token budget ran out, want 1", n)
	}
}

// cancel_task during a slow model call cancels the call (through its context) before it answers,
// well within the cancel deadline.
func TestAutonomousCancelDuringSlowModelCall(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	fake := newFake()
	fake.slow = true
	const cancelDeadline = 20 * time.Second
	s := newStack(t, withOrchestrator(fake), func(c *app.Config) { c.CancelDeadline = cancelDeadline })
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-slow", map[string]any{"goal": "think slowly",
		"policy": map[string]any{"allowed_origins": []string{sh.srv.URL}}})
	select {
	case <-fake.started:
	case <-time.After(120 * time.Second):
		t.Fatal("the planner was never called")
	}
	start := time.Now()
	r := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/cancel", "auto-cancel", map[string]any{"reason": "changed my mind"})
	took := time.Since(start)
	if r.str("task", "state") != "cancelled" {
		t.Fatalf("cancel_task: %s", r.raw)
	}
	// cancel_task waits for the task's registered in-flight work: the model call had ended when it
	// answered, and long before the deadline (an unregistered call would leave this open; one
	// registered but not cancelled would hold cancel_task for the whole deadline).
	select {
	case <-fake.cancelled:
	default:
		t.Fatal("the model call was still running when cancel_task answered")
	}
	if took >= cancelDeadline {
		t.Fatalf("cancel_task took %v: the model call was not cancelled", took)
	}
	evs := s.history(t, taskID)
	if len(ofType(evs, "model.called")) != 0 || len(ofType(evs, "plan.step_started")) != 0 {
		t.Fatal("the cancelled call was recorded as answered")
	}
}

// Canary secrets — a password the planner filled (and the page echoes), a cookie the site set —
// never reach the orchestrator, nor the task's history.
func TestAutonomousCanarySecretsNeverReachTheModels(t *testing.T) {
	t.Parallel()
	const pwCanary, cookieCanary = "pw-CANARY-7f3a9c", "cookie-CANARY-41d2e8"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: cookieCanary, Path: "/", HttpOnly: true})
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Sign in</title><h1>Sign in</h1>
<label for="user">User</label><input id="user" name="user" value="">
<label for="pw">Password</label><input id="pw" name="pw" type="password">
<p id="echo"></p>
<script>document.getElementById("pw").addEventListener("input", e => { document.getElementById("echo").textContent = "you typed " + e.target.value; });</script>`)
	})
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)
	fake := newFake(
		step("navigate", map[string]any{"url": site.URL + "/login"}),
		step("act", map[string]any{"action": "fill", "query": map[string]any{"label": "User"}, "value": "someone-" + pwCanary}),
		step("act", map[string]any{"action": "fill", "query": map[string]any{"label": "Password"}, "value": pwCanary}),
		step("observe", nil),
		step("done", nil),
	)
	spans, tr := newCollector() // commands and browser calls are traced (tracing_test.go)
	s := newStack(t, withOrchestrator(fake), func(c *app.Config) { c.Tracer = tr })
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-canary", map[string]any{"goal": "sign in",
		"policy":        map[string]any{"allowed_origins": []string{site.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "you typed"}}}})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw) // the page did echo the password: the postcondition saw it
	}
	sent := fake.sent()
	if len(fake.requests(app.RolePlanner)) != 5 || !strings.Contains(sent, "Sign in") {
		t.Fatalf("the models were not sent the page: %d requests", len(fake.requests(app.RolePlanner)))
	}
	if !strings.Contains(sent, "you typed ***") {
		t.Fatalf("the page's echo of the password was not masked (or never observed): %s", sent)
	}
	evs := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	for _, canary := range []string{pwCanary, cookieCanary} {
		if strings.Contains(sent, canary) {
			t.Fatalf("the canary %q reached the orchestrator", canary)
		}
		if strings.Contains(string(evs.raw), canary) {
			t.Fatalf("the canary %q is in the task's history", canary)
		}
		assertNoCanaryInSpans(t, spans.Ended(), canary)
	}
}

// Without an orchestrator an autonomous task is refused at once (503), never accepted; the refusal
// is not recorded under the key. model_policy and budget belong to autonomous tasks only.
func TestAutonomousWithoutOrchestratorIsRefused(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	policy := map[string]any{"allowed_origins": []string{"http://127.0.0.1:*"}}
	r := s.call(t, "POST", "/bap/v1/tasks", "auto-503", map[string]any{"goal": "anything", "mode": "autonomous", "policy": policy})
	if r.status != 503 || r.body["code"] != "orchestrator_unavailable" || !strings.Contains(r.body["detail"].(string), "orchestrator") {
		t.Fatalf("no orchestrator: %d %s", r.status, r.raw)
	}
	created := s.must(t, 201, "POST", "/bap/v1/tasks", "auto-503", map[string]any{"goal": "anything", "policy": policy})
	if created.body["task"].(map[string]any)["mode"] != "interactive" {
		t.Fatalf("interactive task: %s", created.raw)
	}
	r = s.call(t, "POST", "/bap/v1/tasks", "auto-400", map[string]any{"goal": "anything", "policy": policy, "budget": map[string]any{"max_steps": 3}})
	if r.status != 400 || r.body["code"] != "invalid_request" {
		t.Fatalf("budget on an interactive task: %d %s", r.status, r.raw)
	}
	r = s.call(t, "POST", "/bap/v1/tasks", "auto-400b", map[string]any{"goal": "anything", "mode": "autonomous", "policy": policy,
		"plan": []any{map[string]any{"op": "observe"}}})
	if r.status != 400 {
		t.Fatalf("autonomous with a plan: %d %s", r.status, r.raw)
	}
}

// withSafety gives the fake a safety model answering the given verdicts in order.
func withSafety(f *fakeOrchestrator, answers ...string) *fakeOrchestrator {
	f.models[app.RoleSafety] = []app.ModelInfo{model("safety-guard", "acme")}
	f.safety = answers
	return f
}

// The safety role blocks a proposed step: it is never run (no order), the planner is told and
// carries on; every judgement is recorded as safety.judged, without page text.
func TestAutonomousSafetyBlocksAStep(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	fake := withSafety(newFake(
		step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}),
		step("act", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}}),
		step("done", nil),
	), judgement("allow", "public"), judgement("block", "internal"))
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-safety-block", map[string]any{
		"goal": "look at the checkout", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Checkout"}}},
	})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw)
	}
	if n := sh.orders.Load(); n != 0 {
		t.Fatalf("the blocked click placed %d orders", n)
	}
	evs := s.history(t, taskID)
	judged := ofType(evs, "safety.judged")
	if len(judged) != 2 {
		t.Fatalf("safety.judged: %v", judged)
	}
	for i, want := range []string{"allow", "block"} {
		d := data(judged[i])
		if d["verdict"] != want || d["model"] != "safety-guard" || d["provider"] != "acme" || d["step"] != float64(i) || d["classification"] == nil {
			t.Fatalf("safety.judged %d: %v", i, d)
		}
	}
	if n := len(ofType(evs, "plan.step_finished")); n != 1 {
		t.Fatalf("%d steps ran, want 1 (the navigation)", n)
	}
	var rejected map[string]any
	for _, e := range ofType(evs, "planner.proposed") {
		if data(e)["accepted"] == false {
			rejected = data(e)
		}
	}
	if rejected == nil || rejected["op"] != "act" || !strings.Contains(fmt.Sprint(rejected["problem"]), "safety review blocked") {
		t.Fatalf("the blocked proposal: %v", rejected)
	}
	roles := map[string]int{}
	for _, e := range ofType(evs, "model.called") {
		roles[fmt.Sprint(data(e)["role"])]++
	}
	if roles["safety"] != 2 || roles["planner"] != 3 {
		t.Fatalf("model calls by role: %v", roles)
	}
	reqs := fake.requests(app.RolePlanner)
	if len(reqs) != 3 || !strings.Contains(reqs[2].Messages[1].Content, "safety review blocked") {
		t.Fatalf("the planner was not told of the block (%d requests)", len(reqs))
	}
	// The safety model saw the masked step it judged.
	if sreq := fake.requests(app.RoleSafety); len(sreq) != 2 || !strings.Contains(sreq[1].Messages[1].Content, "Place order") || sreq[1].SchemaName != "bap_safety" {
		t.Fatalf("safety requests: %d", len(sreq))
	}
}

// The safety role holds a step: an approval is opened exactly as an approval rule would (the task
// waits), and once a person approves, the held click runs once.
func TestAutonomousSafetyHoldApprovedByAPerson(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	allow := judgement("allow", "internal")
	fake := withSafety(newFake(checkoutScript(sh)...), allow, allow, allow, allow, judgement("hold", "internal"))
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-safety-hold", map[string]any{
		"goal": "order the items in the cart", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"model_policy":  map[string]any{"data_classification": "internal"},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you for your order 1"}}},
	})
	s.awaitState(t, taskID, "waiting_for_approval")
	if n := sh.orders.Load(); n != 0 {
		t.Fatalf("%d orders before the approval", n)
	}
	reqs := ofType(s.history(t, taskID), "approval.requested")
	if len(reqs) != 1 || !strings.Contains(fmt.Sprint(data(reqs[0])["reason"]), "safety review holds") {
		t.Fatalf("approval.requested: %v", reqs)
	}
	apr := data(reqs[0])["approval_id"].(string)
	ok := s.operator().must(t, 200, "POST", "/bap/v1/approvals/"+apr+"/resolve", "auto-safety-approve", map[string]any{"decision": "approve"})
	if ok.str("action_receipt", "outcome") != "applied" {
		t.Fatalf("approve: %s", ok.raw)
	}
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" || sh.orders.Load() != 1 {
		t.Fatalf("after approval: orders %d, %s", sh.orders.Load(), done.raw)
	}
	evs := s.history(t, taskID)
	if j := ofType(evs, "safety.judged"); len(j) != 5 || data(j[4])["verdict"] != "hold" || data(j[4])["step"] != float64(4) {
		t.Fatalf("safety.judged: %v", j)
	}
	var click map[string]any
	for _, e := range ofType(evs, "plan.step_finished") {
		if data(e)["index"] == float64(4) {
			click = data(e)
		}
	}
	if click == nil || click["succeeded"] != true {
		t.Fatalf("the held click's step: %v", click)
	}
	if strings.Contains(fake.sent(), "Ada Lovelace") {
		t.Fatal("a model was sent a filled value")
	}
}

// Every approved safety model fails: fail closed — the step is held for a person, as a safety
// "hold" is (here a navigation: an approval as request_approval opens); approved, it runs once.
func TestAutonomousSafetyAllFailHoldsForAPerson(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	fake := withSafety(newFake(step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}), step("done", nil)))
	fake.failing["safety-guard"] = true
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-safety-down", map[string]any{
		"goal": "look at the checkout", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Checkout"}}},
	})
	s.awaitState(t, taskID, "waiting_for_approval")
	if n := sh.hits.Load(); n != 0 {
		t.Fatalf("the held navigation reached the shop (%d requests)", n)
	}
	evs := s.history(t, taskID)
	j := ofType(evs, "safety.judged")
	if len(j) != 1 || data(j[0])["verdict"] != "hold" || data(j[0])["fail_closed"] != true || data(j[0])["model"] != nil {
		t.Fatalf("safety.judged: %v", j)
	}
	if fb := ofType(evs, "model.fallback"); len(fb) != 1 || data(fb[0])["role"] != "safety" {
		t.Fatalf("model.fallback: %v", fb)
	}
	reqs := ofType(evs, "approval.requested")
	if len(reqs) != 1 {
		t.Fatalf("approval.requested: %v", reqs)
	}
	apr := data(reqs[0])["approval_id"].(string)
	s.operator().must(t, 200, "POST", "/bap/v1/approvals/"+apr+"/resolve", "auto-safety-down-approve", map[string]any{"decision": "approve"})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw)
	}
	evs = s.history(t, taskID)
	fin := ofType(evs, "plan.step_finished")
	if len(fin) != 1 || data(fin[0])["index"] != float64(0) || data(fin[0])["succeeded"] != true {
		t.Fatalf("the approved navigation ran %d times: %v", len(fin), fin)
	}
}

// A person denies the step the safety review held (a navigation, not an act): it never runs — the
// shop sees no request —, the step is recorded as failed, the planner is told, and the
// postcondition decides the task (here unmet: failed).
func TestAutonomousSafetyHoldDenied(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	fake := withSafety(newFake(step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}), step("done", nil)))
	fake.failing["safety-guard"] = true
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-safety-deny", map[string]any{
		"goal": "look at the checkout", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Checkout"}}},
	})
	s.awaitState(t, taskID, "waiting_for_approval")
	reqs := ofType(s.history(t, taskID), "approval.requested")
	if len(reqs) != 1 {
		t.Fatalf("approval.requested: %v", reqs)
	}
	apr := data(reqs[0])["approval_id"].(string)
	s.operator().must(t, 200, "POST", "/bap/v1/approvals/"+apr+"/resolve", "auto-safety-deny-resolve", map[string]any{"decision": "deny"})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	evs := s.history(t, taskID)
	if done.str("task", "state") != "failed" {
		t.Fatalf("task after the denial: %s\n%v", done.raw, evs)
	}
	if n := sh.hits.Load(); n != 0 {
		t.Fatalf("the denied navigation reached the shop (%d requests)", n)
	}
	if st := ofType(evs, "plan.step_started"); len(st) != 0 {
		t.Fatalf("the denied step started: %v", st)
	}
	fin := ofType(evs, "plan.step_finished")
	if len(fin) != 1 || data(fin[0])["succeeded"] != false || data(fin[0])["problem_code"] != "invalid_transition" {
		t.Fatalf("plan.step_finished: %v", fin)
	}
	// The planner is told and goes on (here it gives up: "done"); the postcondition decides.
	var told bool
	fake.mu.Lock()
	for _, r := range fake.log {
		if r.Role == app.RolePlanner {
			for _, m := range r.Messages {
				told = told || strings.Contains(m.Content, "denied the step")
			}
		}
	}
	fake.mu.Unlock()
	if !told || len(ofType(evs, "planner.proposed")) != 2 {
		t.Fatalf("the planner was not told of the denial (told %v): %v", told, ofType(evs, "planner.proposed"))
	}
	if pc := ofType(evs, "postcondition.evaluated"); len(pc) != 1 || data(pc[0])["satisfied"] != false {
		t.Fatalf("postcondition.evaluated: %v", pc)
	}
}

// The safety role classifies the page above the task's model_policy.data_classification: the task
// fails (data_classification_exceeded) and no further page content reaches any model.
func TestAutonomousPageAboveDataClassification(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	fake := withSafety(newFake(
		step("navigate", map[string]any{"url": sh.srv.URL + "/checkout"}),
		step("observe", nil),
		step("done", nil),
	), judgement("allow", "public"), judgement("allow", "confidential"))
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-classified", map[string]any{
		"goal": "look at the checkout", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"model_policy": map[string]any{"data_classification": "internal"},
	})
	s.awaitState(t, taskID, "failed")
	evs := s.history(t, taskID)
	assertFailedWith(t, evs, "data_classification_exceeded")
	j := ofType(evs, "safety.judged")
	if len(j) != 2 || data(j[1])["classification"] != "confidential" {
		t.Fatalf("safety.judged: %v", j)
	}
	if n := len(ofType(evs, "plan.step_finished")); n != 1 {
		t.Fatalf("%d steps ran, want 1 (the observe on the confidential page never ran)", n)
	}
	fake.mu.Lock()
	log := slices.Clone(fake.log)
	fake.mu.Unlock()
	// planner, safety, planner, safety — and nothing after the page was found confidential.
	if len(log) != 4 || log[3].Role != app.RoleSafety {
		roles := []string{}
		for _, r := range log {
			roles = append(roles, r.Role)
		}
		t.Fatalf("requests after the classification: %v", roles)
	}
}

// The observer condenses a long page (masked first) into a short summary that the planner reads
// instead of the page; a task without safety models records that once and runs as before.
func TestAutonomousObserverCondensesLongPages(t *testing.T) {
	t.Parallel()
	const prefill = "prefill-CANARY-5e7d"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /catalogue", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Catalogue</title><h1>Catalogue</h1><label for="q">Search</label><input id="q" value="`+prefill+`">`)
		for i := 0; i < 120; i++ {
			fmt.Fprintf(w, "<p>catalogue-para-%03d: a long description of an item that nobody needs to read in full, padded out.</p>\n", i)
		}
	})
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)
	fake := newFake(step("navigate", map[string]any{"url": site.URL + "/catalogue"}), step("done", nil))
	fake.models[app.RoleObserver] = []app.ModelInfo{model("observer-small", "acme")}
	fake.observer = `{"summary":"OBSERVER-SUMMARY: a catalogue of 120 items","facts":["120 items"],"controls":[{"role":"textbox","name":"Search"}]}`
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "auto-observer", map[string]any{
		"goal": "look at the catalogue", "policy": map[string]any{"allowed_origins": []string{site.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "catalogue-para-119"}}},
	})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw)
	}
	obsReqs := fake.requests(app.RoleObserver)
	if len(obsReqs) != 1 || !strings.Contains(obsReqs[0].Messages[1].Content, "catalogue-para-119") || obsReqs[0].SchemaName != "bap_observation" {
		t.Fatalf("observer requests: %d", len(obsReqs))
	}
	plans := fake.requests(app.RolePlanner)
	if len(plans) != 2 {
		t.Fatalf("%d planner requests", len(plans))
	}
	second := plans[1].Messages[1].Content
	if !strings.Contains(second, "OBSERVER-SUMMARY") || strings.Contains(second, "catalogue-para-050") ||
		len(second) >= len(obsReqs[0].Messages[1].Content)/2 {
		t.Fatalf("the planner was not given the observer's summary instead of the page (%d bytes, observer %d): %s",
			len(second), len(obsReqs[0].Messages[1].Content), truncateForLog(second))
	}
	if strings.Contains(fake.sent(), prefill) {
		t.Fatal("an unmasked form value reached a model")
	}
	evs := s.history(t, taskID)
	var observed int
	for _, e := range ofType(evs, "model.called") {
		if d := data(e); d["role"] == "observer" {
			observed++
			if d["model"] != "observer-small" || d["step"] != float64(1) {
				t.Fatalf("observer model.called: %v", d)
			}
		}
	}
	if observed != 1 {
		t.Fatalf("%d observer calls recorded", observed)
	}
	// No safety model: skipped, recorded once, and no safety call.
	if j := ofType(evs, "safety.judged"); len(j) != 1 || data(j[0])["verdict"] != "skipped" {
		t.Fatalf("safety.judged: %v", j)
	}
	if n := len(fake.requests(app.RoleSafety)); n != 0 {
		t.Fatalf("%d safety requests without a safety model", n)
	}
}

func truncateForLog(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}
