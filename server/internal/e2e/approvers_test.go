package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// Out-of-band approvers (issue #24 item 4) on the real browser: who may resolve a held action, and
// what an approval's expiry does to it.

// clock is a controllable app clock: the real time plus an offset a test moves forward.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time            { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration)   { c.offset.Add(int64(d)) }
func (c *clock) config() func(*app.Config) { return func(cfg *app.Config) { cfg.Now = c.now } }

// fillCheckout fills the shop's checkout form on session sess (as the caller s is).
func fillCheckout(t *testing.T, s *stack, sess, key string) {
	t.Helper()
	for _, step := range []map[string]any{
		{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Barbara"},
		{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "bl@example.com"},
		{"action": "check", "query": map[string]any{"role": "checkbox"}},
	} {
		s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/act", fmt.Sprint(key, "-", step["action"], step["value"]), step)
	}
}

var placeOrder = map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}}

// heldShopTask opens a task whose rule (with extra fields) holds form submissions, on the checkout,
// driven by s (the agent, or the operator).
func heldShopTask(t *testing.T, s *stack, sh *shop, key string, rule map[string]any) (taskID, sess string) {
	t.Helper()
	rule["effect"] = "form_submission"
	r := s.must(t, 201, "POST", "/bap/v1/tasks", key+"-task", map[string]any{
		"goal": "order, but ask first", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "approval_rules": []any{rule}},
	})
	taskID = r.str("task", "task_id")
	sess = s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", key+"-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/navigate", key+"-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	return taskID, sess
}

// An approval past its expires_at is never revived: resolving it answers 409 approval_not_pending
// (it is expired first, with its approval.resolved event), the upkeep's sweep expires one nobody
// calls about, and in both cases the held click never reaches the shop; the task runs again.
func TestExpiredApprovalNeverRuns(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	clk := &clock{}
	s := newStack(t, clk.config())
	op := s.operator()
	taskID, sess := heldShopTask(t, s, sh, "ttl", map[string]any{"ttl": "PT2M"})
	fillCheckout(t, s, sess, "ttl-1")
	held := s.must(t, 202, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "ttl-click-1", placeOrder)
	apr := held.str("approval", "approval_id")
	requested, _ := time.Parse(time.RFC3339Nano, held.str("approval", "requested_at"))
	expires, err := time.Parse(time.RFC3339Nano, held.str("approval", "expires_at"))
	if err != nil || expires.Sub(requested) != 2*time.Minute {
		t.Fatalf("expires_at %q (requested %q): want the rule's ttl later (%v)", held.str("approval", "expires_at"), held.str("approval", "requested_at"), err)
	}
	pending := op.must(t, 200, "GET", "/bap/v1/approvals", "", nil)
	if list, _ := pending.body["approvals"].([]any); len(list) != 1 {
		t.Fatalf("pending approvals: %s", pending.raw)
	}

	// 1. Due, not yet swept: the operator's resolve finds it expired.
	clk.advance(2*time.Minute + time.Second)
	late := op.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "ttl-approve-1", map[string]any{"decision": "approve"})
	if late.status != 409 || late.body["code"] != "approval_not_pending" || sh.orders.Load() != 0 {
		t.Fatalf("approving an expired approval: orders %d, %d %s", sh.orders.Load(), late.status, late.raw)
	}
	expiredEvent(t, s, taskID, apr)
	if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "running" {
		t.Fatalf("task %s after its only approval expired", st)
	}

	// 2. Nobody calls: the upkeep's sweep (Service.ExpireApprovals) expires it.
	held2 := s.must(t, 202, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "ttl-click-2", placeOrder)
	apr2 := held2.str("approval", "approval_id")
	if n, err := s.svc.ExpireApprovals(context.Background()); err != nil || n != 0 {
		t.Fatalf("sweep before the expiry: %d, %v", n, err)
	}
	clk.advance(2*time.Minute + time.Second)
	if n, err := s.svc.ExpireApprovals(context.Background()); err != nil || n != 1 {
		t.Fatalf("sweep after the expiry: %d, %v", n, err)
	}
	expiredEvent(t, s, taskID, apr2)
	list := op.must(t, 200, "GET", "/bap/v1/approvals?state=expired", "", nil)
	if l, _ := list.body["approvals"].([]any); len(l) != 2 {
		t.Fatalf("expired approvals: %s", list.raw)
	}
	if p := op.must(t, 200, "GET", "/bap/v1/approvals", "", nil); len(p.body["approvals"].([]any)) != 0 {
		t.Fatalf("pending approvals after the sweep: %s", p.raw)
	}
	for _, d := range []string{"approve", "deny"} {
		if r := op.call(t, "POST", "/bap/v1/approvals/"+apr2+"/resolve", "ttl-"+d+"-2", map[string]any{"decision": d}); r.status != 409 || r.body["code"] != "approval_not_pending" {
			t.Fatalf("%s after the sweep: %d %s", d, r.status, r.raw)
		}
	}
	if sh.orders.Load() != 0 {
		t.Fatalf("an expired approval's click reached the shop: %d orders", sh.orders.Load())
	}
}

// expiredEvent checks the history records apr's expiry: approval.resolved, state expired, by the
// runtime, with no decision.
func expiredEvent(t *testing.T, s *stack, taskID, apr string) {
	t.Helper()
	for _, e := range s.events(t, taskID) {
		d, _ := e["data"].(map[string]any)
		if e["type"] != "approval.resolved" || d["approval_id"] != apr {
			continue
		}
		actor, _ := e["actor"].(map[string]any)
		if d["state"] != "expired" || d["decision"] != nil || actor["kind"] != "system" {
			t.Fatalf("the expiry's event: %v", e)
		}
		return
	}
	t.Fatalf("no approval.resolved event for %s", apr)
}

// Whoever caused a hold never resolves it: the operator driving a session itself cannot approve its
// own held click (403 approver_not_permitted, recorded), nor can the agent (no resolve scope); the
// click never runs.
func TestOperatorCannotApproveItsOwnHold(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	op := s.operator()
	taskID, sess := heldShopTask(t, op, sh, "own", map[string]any{})
	fillCheckout(t, op, sess, "own")
	held := op.must(t, 202, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "own-click", placeOrder)
	apr := held.str("approval", "approval_id")
	if held.str("approval", "requested_by") != "operator:local" {
		t.Fatalf("held: %s", held.raw)
	}
	self := op.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "own-approve", map[string]any{"decision": "approve"})
	if self.status != 403 || self.body["code"] != "approver_not_permitted" || self.str("receipt", "outcome") != "rejected" {
		t.Fatalf("the operator's own hold: %d %s", self.status, self.raw)
	}
	agent := s.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "own-agent", map[string]any{"decision": "approve"})
	if agent.status != 403 || agent.body["code"] != "insufficient_scope" {
		t.Fatalf("the agent: %d %s", agent.status, agent.raw)
	}
	if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "waiting_for_approval" || sh.orders.Load() != 0 {
		t.Fatalf("task %s, orders %d after the refused resolves", st, sh.orders.Load())
	}
}

// A hold raised by a delegated task's own worker was caused by whoever created the task: the
// operator that created it over the socket cannot approve it; the click never runs.
func TestDelegatedHoldRefusesTheTaskCreator(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	op := s.operator()
	s.startWorkers(t)
	r := op.must(t, 201, "POST", "/bap/v1/tasks", "deleg-own", map[string]any{
		"goal": "order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL},
			"approval_rules": []map[string]any{{"effect": "form_submission"}}},
		"plan": []map[string]any{
			{"op": "navigate", "args": map[string]any{"url": sh.srv.URL + "/checkout"}},
			{"op": "act", "args": map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Ken"}},
			{"op": "act", "args": map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "k@example.com"}},
			{"op": "act", "args": map[string]any{"action": "check", "query": map[string]any{"role": "checkbox"}}},
			{"op": "act", "args": map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}}},
		},
	})
	taskID := r.str("task", "task_id")
	s.awaitState(t, taskID, "waiting_for_approval")
	var apr string
	for _, e := range ofType(s.history(t, taskID), "approval.requested") {
		apr, _ = data(e)["approval_id"].(string)
	}
	self := op.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "deleg-own-approve", map[string]any{"decision": "approve"})
	if self.status != 403 || self.body["code"] != "approver_not_permitted" {
		t.Fatalf("the task's creator approving its worker's hold: %d %s", self.status, self.raw)
	}
	if sh.orders.Load() != 0 {
		t.Fatalf("%d orders", sh.orders.Load())
	}
	op.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/cancel", "deleg-own-cancel", map[string]any{})
}
