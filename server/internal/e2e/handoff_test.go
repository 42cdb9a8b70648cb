package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Human handoff (issue #18 item 5, ADR 0023) on the real browser: a person takes a running task
// over, the agent's commands answer 409 task_handed_off, the person's acts run through the
// governed path with the person as the actor, and hand-back starts a new epoch.
func TestHandoffTakeOverTypeHandBack(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	op := s.operator()
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "ho-task", map[string]any{
		"goal": "order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
	})
	taskID := r.str("task", "task_id")
	sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "ho-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/navigate", "ho-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	oldName := s.query(t, sess, map[string]any{"label": "Full name"})

	// The agent never takes its own task over nor hands it back (no approver capability).
	for _, path := range []string{"take_over", "hand_back"} {
		body := map[string]any{"session_id": sess}
		if path == "hand_back" {
			body = map[string]any{}
		}
		if a := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/"+path, "ho-agent-"+path, body); a.status != 403 || a.str("code") != "insufficient_scope" {
			t.Fatalf("the agent's %s: %d %s", path, a.status, a.raw)
		}
	}
	// Nothing to hand back yet.
	if a := op.call(t, "POST", "/bap/v1/tasks/"+taskID+"/hand_back", "ho-early-back", map[string]any{}); a.status != 409 || a.str("code") != "invalid_transition" {
		t.Fatalf("hand back with no handoff: %d %s", a.status, a.raw)
	}

	// The operator takes over.
	to := op.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/take_over", "ho-take", map[string]any{"session_id": sess, "lease_seconds": 600})
	handoff := to.str("handoff", "handoff_id")
	if to.str("task", "state") != "waiting_for_external_input" || to.str("handoff", "holder") != "operator:local" || to.str("handoff", "state") != "open" || handoff == "" {
		t.Fatalf("take over: %s", to.raw)
	}
	// A second takeover while one is open is refused.
	if a := op.call(t, "POST", "/bap/v1/tasks/"+taskID+"/take_over", "ho-take-2", map[string]any{"session_id": sess}); a.status != 409 || a.str("code") != "invalid_transition" {
		t.Fatalf("second take over: %d %s", a.status, a.raw)
	}

	// The agent's commands and reads answer 409 task_handed_off, naming the handoff.
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/bap/v1/browser-sessions/" + sess + "/observe", map[string]any{}},
		{"/bap/v1/browser-sessions/" + sess + "/act", map[string]any{"action": "fill", "node_id": oldName, "value": "Agent"}},
		{"/bap/v1/browser-sessions/" + sess + "/navigate", map[string]any{"url": sh.srv.URL + "/checkout"}},
	} {
		a := s.call(t, "POST", c.path, "ho-agent"+c.path, c.body)
		// A read is not a command (no receipt); act and navigate are recorded as rejected.
		recorded := !strings.HasSuffix(c.path, "/observe")
		if a.status != 409 || a.str("code") != "task_handed_off" || !strings.Contains(a.str("detail"), handoff) || recorded != (a.str("receipt", "outcome") == "rejected") {
			t.Fatalf("the agent's %s during the handoff: %d %s", c.path, a.status, a.raw)
		}
	}

	// The person types and submits through the governed act path.
	op.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "ho-p-name", map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Person Typed"})
	op.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "ho-p-mail", map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "p@example.com"})
	op.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "ho-p-terms", map[string]any{"action": "check", "query": map[string]any{"role": "checkbox"}})
	op.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "ho-p-order", placeOrder)
	if b := sh.buyer.Load(); sh.orders.Load() != 1 || b == nil || *b != "Person Typed" {
		t.Fatalf("the shop recorded %d orders, buyer %v", sh.orders.Load(), b)
	}
	// The person is the actor of their commands, in the database.
	var personActs int
	if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM task_command WHERE task_id = $1 AND operation = 'act' AND actor = 'operator:local'`, taskID).Scan(&personActs); err != nil || personActs != 4 {
		t.Fatalf("acts recorded with the person as actor: %d (%v), want 4", personActs, err)
	}

	// Hand back: a checkpoint, a new epoch, running again.
	hb := op.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/hand_back", "ho-back", map[string]any{})
	if hb.str("task", "state") != "running" || hb.str("handoff", "state") != "returned" || hb.str("handoff", "checkpoint_id") == "" || hb.str("epoch_id") == "" {
		t.Fatalf("hand back: %s", hb.raw)
	}
	// The agent's old handle is stale; a fresh observe works on the new epoch.
	if a := s.call(t, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "ho-agent-stale", map[string]any{"action": "click", "node_id": oldName}); a.status != 409 || a.str("code") != "stale_node_handle" {
		t.Fatalf("the agent's old handle after hand back: %d %s", a.status, a.raw)
	}
	obs := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/observe", "ho-agent-obs", map[string]any{})
	if obs.str("epoch_id") != hb.str("epoch_id") {
		t.Fatalf("the agent's observe after hand back is not on the new epoch %s: %.300s", hb.str("epoch_id"), obs.raw)
	}

	// Every step is in the history, and the handoff row is closed, once.
	var types []string
	for _, e := range s.events(t, taskID) {
		if typ, _ := e["type"].(string); typ == "handoff.started" || typ == "handoff.returned" {
			types = append(types, typ)
		}
	}
	if len(types) != 2 || types[0] != "handoff.started" || types[1] != "handoff.returned" {
		t.Fatalf("handoff events: %v", types)
	}
	if _, err := s.db.Exec(context.Background(), `UPDATE task_handoff SET holder = 'someone' WHERE handoff_id = $1`, handoff); err == nil {
		t.Fatal("a closed handoff was changed")
	}
	if _, err := s.db.Exec(context.Background(), `DELETE FROM task_handoff WHERE handoff_id = $1`, handoff); err == nil {
		t.Fatal("a handoff was deleted")
	}
}

// A task the operator created is the operator's own: it never takes it over (403
// approver_not_permitted, recorded), like an approval it caused.
func TestHandoffRefusesTheTaskCreator(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	op := s.operator()
	taskID := op.must(t, 201, "POST", "/bap/v1/tasks", "hoc-task", map[string]any{
		"goal": "order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
	}).str("task", "task_id")
	sess := op.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "hoc-session", map[string]any{}).str("session", "session_id")
	a := op.call(t, "POST", "/bap/v1/tasks/"+taskID+"/take_over", "hoc-take", map[string]any{"session_id": sess})
	if a.status != 403 || a.str("code") != "approver_not_permitted" || a.str("receipt", "outcome") != "rejected" {
		t.Fatalf("the creator's take over: %d %s", a.status, a.raw)
	}
	if st := op.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "running" {
		t.Fatalf("task %s after a refused take over", st)
	}
}

// takeOver opens the task's handoff on sess for the operator op and returns the handoff's id.
func takeOver(t *testing.T, op *stack, taskID, sess, key string, leaseSeconds int) string {
	t.Helper()
	to := op.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/take_over", key, map[string]any{"session_id": sess, "lease_seconds": leaseSeconds})
	if to.str("task", "state") != "waiting_for_external_input" || to.str("handoff", "state") != "open" {
		t.Fatalf("take over: %s", to.raw)
	}
	return to.str("handoff", "handoff_id")
}

// During a handoff the person's act an approval rule holds is held like the agent's (202, a
// pending approval the person may not resolve themselves) without moving the task out of the
// handoff; every command of the agent's on the task, browser or not, answers 409
// task_handed_off; hand-back cancels the approval, whose click never reaches the shop.
func TestHandoffHoldsThePersonsActAndRefusesTheAgent(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	op := s.operator()
	taskID, sess := heldShopTask(t, s, sh, "hoh", map[string]any{})
	handoff := takeOver(t, op, taskID, sess, "hoh-take", 600)

	fillCheckout(t, op, sess, "hoh-fill")
	held := op.must(t, 202, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "hoh-order", placeOrder)
	apr := held.str("approval", "approval_id")
	if held.str("receipt", "outcome") != "pending_approval" || held.str("approval", "requested_by") != "operator:local" || apr == "" {
		t.Fatalf("the person's held act: %s", held.raw)
	}
	if st := op.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "waiting_for_external_input" {
		t.Fatalf("task %s with the person's act held, want it still handed off", st)
	}
	// Separation of duties: the person who acted does not approve their own act.
	if a := op.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "hoh-self-approve", map[string]any{"decision": "approve"}); a.status != 403 || a.str("code") != "approver_not_permitted" {
		t.Fatalf("the person approving their own act: %d %s", a.status, a.raw)
	}

	// The agent's commands that are not browser commands answer the stable code too, recorded.
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/bap/v1/tasks/" + taskID + "/close", map[string]any{}},
		{"/bap/v1/tasks/" + taskID + "/approvals", map[string]any{"reason": "let me"}},
		{"/bap/v1/tasks/" + taskID + "/cancel", map[string]any{}},
		{"/bap/v1/browser-sessions/" + sess + "/close", map[string]any{}},
		{"/bap/v1/browser-sessions/" + sess + "/checkpoint", map[string]any{}},
		{"/bap/v1/browser-sessions/" + sess + "/evidence", map[string]any{"kinds": []string{"screenshot"}}},
		{"/bap/v1/tasks/" + taskID + "/browser-sessions", map[string]any{}},
	} {
		a := s.call(t, "POST", c.path, "hoh-agent"+c.path, c.body)
		if a.status != 409 || a.str("code") != "task_handed_off" || !strings.Contains(a.str("detail"), handoff) || a.str("receipt", "outcome") != "rejected" {
			t.Fatalf("the agent's %s during the handoff: %d %s", c.path, a.status, a.raw)
		}
	}

	hb := op.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/hand_back", "hoh-back", map[string]any{})
	if hb.str("task", "state") != "running" {
		t.Fatalf("hand back: %s", hb.raw)
	}
	var state string
	if err := s.db.QueryRow(context.Background(), `SELECT state FROM approval_request WHERE approval_id = $1`, apr).Scan(&state); err != nil || state != "cancelled" {
		t.Fatalf("approval row %q (%v)", state, err)
	}
	if n := sh.orders.Load(); n != 0 {
		t.Fatalf("the held click reached the shop: %d orders", n)
	}
}

// A lapsed lease stops the person's commands (409 task_handed_off, "lease"), the agent still
// waits (its commands answer the same), and an operator's hand-back returns the task to running
// on a new epoch: nothing hands back by itself.
func TestHandoffLapsedLease(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	clk := &clock{}
	s := newStack(t, clk.config())
	op := s.operator()
	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "hol-task", map[string]any{
		"goal": "order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
	}).str("task", "task_id")
	sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "hol-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/navigate", "hol-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	handoff := takeOver(t, op, taskID, sess, "hol-take", 30)
	op.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "hol-p-name", map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Within"})

	clk.advance(31 * time.Second)
	fill := map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Too late"}
	if a := op.call(t, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "hol-p-late", fill); a.status != 409 || a.str("code") != "task_handed_off" || !strings.Contains(a.str("detail"), "lease") {
		t.Fatalf("the person's act after the lease: %d %s", a.status, a.raw)
	}
	if a := s.call(t, "POST", "/bap/v1/browser-sessions/"+sess+"/act", "hol-agent", fill); a.status != 409 || a.str("code") != "task_handed_off" {
		t.Fatalf("the agent's act after the lease: %d %s", a.status, a.raw)
	}
	var state string
	if err := s.db.QueryRow(context.Background(), `SELECT state FROM task_handoff WHERE handoff_id = $1`, handoff).Scan(&state); err != nil || state != "open" {
		t.Fatalf("the handoff after its lease: %q (%v), want still open", state, err)
	}
	if st := op.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "waiting_for_external_input" {
		t.Fatalf("task %s after the lease lapsed", st)
	}

	hb := op.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/hand_back", "hol-back", map[string]any{})
	if hb.str("task", "state") != "running" || hb.str("handoff", "state") != "returned" || hb.str("epoch_id") == "" {
		t.Fatalf("hand back after the lease: %s", hb.raw)
	}
	if obs := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/observe", "hol-obs", map[string]any{}); obs.str("epoch_id") != hb.str("epoch_id") {
		t.Fatalf("the agent's observe is not on the new epoch: %.200s", obs.raw)
	}
}

// A person's act interrupted during their handoff (the browser lost mid-submission: the order may
// have reached the site) opens a reconciliation beside the handoff: the handoff stays open, the
// task stays in waiting_for_external_input, and it runs again only once the handoff is returned
// and the reconciliation settled, in either order — the task's history holds exactly one wait
// (await_external_input at take over, external_input_resolved at the last of the two).
func TestHandoffInterruptedActWaitsForReconciliation(t *testing.T) {
	t.Parallel()
	for _, settleFirst := range []bool{false, true} {
		name := map[bool]string{false: "hand back first", true: "settle first"}[settleFirst]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHangSite(t)
			s := newStack(t)
			op := s.operator()
			ctx := context.Background()
			key := map[bool]string{false: "hir-back", true: "hir-settle"}[settleFirst]
			taskID, sess := openHang(t, s, h, key)
			handoff := takeOver(t, op, taskID, sess, key+"-take", 600)

			act := op.async("POST", "/bap/v1/browser-sessions/"+sess+"/act", key+"-pay", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Pay"}})
			if p := await(t, h.arrived, "the person's posted order"); p != "/order-slow" {
				t.Fatalf("hanging request: %s", p)
			}
			loseSession(t, sess)
			a := await(t, act, "the person's act")
			if a.status != 409 || a.str("code") != "browser_session_lost" || a.str("receipt", "outcome") != "reconciliation_required" {
				t.Fatalf("the person's interrupted act: %d %s", a.status, a.raw)
			}
			state := func() string { return op.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state") }
			handoffState := func() string {
				var st string
				if err := s.db.QueryRow(ctx, `SELECT state FROM task_handoff WHERE handoff_id = $1`, handoff).Scan(&st); err != nil {
					t.Fatal(err)
				}
				return st
			}
			if st, hs := state(), handoffState(); st != "waiting_for_external_input" || hs != "open" {
				t.Fatalf("after the interrupted act: task %s, handoff %s", st, hs)
			}
			recs, err := s.svc.ListReconciliations(ctx, false)
			if err != nil || len(recs) != 1 || recs[0].TaskID != taskID || recs[0].CommandID != a.str("receipt", "command_id") {
				t.Fatalf("open reconciliations: %v %+v", err, recs)
			}
			settle := func() {
				if _, err := s.svc.ResolveReconciliation(ctx, "operator:local", recs[0].ID, "applied", "the shop has the order"); err != nil {
					t.Fatal(err)
				}
			}
			handBack := func() reply {
				return op.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/hand_back", key+"-hand-back", map[string]any{})
			}

			if settleFirst {
				settle()
				// Settled, but the person still holds the task: the agent still waits.
				if st, hs := state(), handoffState(); st != "waiting_for_external_input" || hs != "open" {
					t.Fatalf("settled during the handoff: task %s, handoff %s", st, hs)
				}
				if r := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", key+"-agent", map[string]any{}); r.status != 409 || r.str("code") != "task_handed_off" {
					t.Fatalf("the agent's command after the settlement, before the hand-back: %d %s", r.status, r.raw)
				}
				if hb := handBack(); hb.str("task", "state") != "running" || hb.str("handoff", "state") != "returned" {
					t.Fatalf("hand back after the settlement: %s", hb.raw)
				}
			} else {
				// Handed back, but the reconciliation is open: the task waits for the operator.
				if hb := handBack(); hb.str("task", "state") != "waiting_for_external_input" || hb.str("handoff", "state") != "returned" {
					t.Fatalf("hand back with a reconciliation open: %s", hb.raw)
				}
				if r := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", key+"-agent", map[string]any{}); r.status != 409 || r.str("code") != "invalid_transition" {
					t.Fatalf("the agent's command after the hand-back, before the settlement: %d %s", r.status, r.raw)
				}
				settle()
			}
			if st := state(); st != "running" {
				t.Fatalf("after the hand-back and the settlement: task %s", st)
			}
			if r := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", key+"-agent-after", map[string]any{}); r.str("session", "session_id") == "" {
				t.Fatalf("the agent's new session: %s", r.raw)
			} else {
				s.closeAtEnd(t, r.str("session", "session_id"))
			}
			if n := h.orders.Load(); n != 1 {
				t.Fatalf("the shop got %d orders, want the one the person sent", n)
			}

			var triggers, order []string
			for _, e := range s.events(t, taskID) {
				d, _ := e["data"].(map[string]any)
				switch typ, _ := e["type"].(string); typ {
				case "task.state_changed":
					triggers = append(triggers, d["trigger"].(string))
				case "handoff.started", "handoff.returned", "reconciliation.opened", "reconciliation.resolved":
					order = append(order, typ)
				}
			}
			wantTriggers := []string{"admit", "start", "await_external_input", "external_input_resolved"}
			wantOrder := []string{"handoff.started", "reconciliation.opened", "handoff.returned", "reconciliation.resolved"}
			if settleFirst {
				wantOrder = []string{"handoff.started", "reconciliation.opened", "reconciliation.resolved", "handoff.returned"}
			}
			if strings.Join(triggers, ",") != strings.Join(wantTriggers, ",") || strings.Join(order, ",") != strings.Join(wantOrder, ",") {
				t.Fatalf("the history: transitions %v (want %v), waits %v (want %v)", triggers, wantTriggers, order, wantOrder)
			}
		})
	}
}

// A task that ends during a handoff (the holder cancels it) leaves no handoff open: the row is
// closed as returned by whoever ended the task, with its handoff.returned event after the state
// change.
func TestHandoffEndsWithItsTask(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	op := s.operator()
	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "hoe-task", map[string]any{
		"goal": "order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
	}).str("task", "task_id")
	sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "hoe-session", map[string]any{}).str("session", "session_id")
	handoff := takeOver(t, op, taskID, sess, "hoe-take", 600)
	op.cancel(t, taskID)
	var state, endedBy string
	if err := s.db.QueryRow(context.Background(), `SELECT state, ended_by FROM task_handoff WHERE handoff_id = $1`, handoff).Scan(&state, &endedBy); err != nil ||
		state != "returned" || endedBy != "operator:local" {
		t.Fatalf("the handoff after its task was cancelled: %q by %q (%v)", state, endedBy, err)
	}
	var seen []string
	for _, e := range s.events(t, taskID) {
		d, _ := e["data"].(map[string]any)
		if e["type"] == "handoff.returned" || (e["type"] == "task.state_changed" && d["to"] == "cancelled") {
			seen = append(seen, e["type"].(string))
		}
	}
	if len(seen) != 2 || seen[0] != "task.state_changed" || seen[1] != "handoff.returned" {
		t.Fatalf("events at the end: %v", seen)
	}
}
