package e2e

import (
	"context"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/task"
)

// Reads show the current record and its chain (issue #23 item 2): after an operator corrects how
// a task ended and an approval's decision record, get_task and list_approvals answer the new
// current record and, in `outcomes` and `decisions`, the superseded one with who, when and why —
// every answer and event validated strictly against the spec.
func TestReadsShowTheCurrentRecordAndItsChain(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	op := s.operator()
	ctx := context.Background()
	operator := app.Actor{Tenant: "local", Subject: "operator:local"}
	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "chain-task", map[string]any{
		"goal": "a chain of records", "policy": map[string]any{"allowed_origins": []string{"https://shop.example.com"}},
	}).str("task", "task_id")

	// The approval: decided by the operator, then its record corrected.
	apr := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/approvals", "chain-approval", map[string]any{"reason": "check"}).str("approval", "approval_id")
	op.must(t, 200, "POST", "/bap/v1/approvals/"+apr+"/resolve", "chain-resolve", map[string]any{"decision": "approve", "reason": "looks right"})
	if _, err := s.svc.CorrectApprovalDecision(ctx, operator, apr, "checked against the invoice"); err != nil {
		t.Fatal(err)
	}
	list := op.must(t, 200, "GET", "/bap/v1/approvals?state=approved", "", nil)
	approvals, _ := list.body["approvals"].([]any)
	if len(approvals) != 1 {
		t.Fatalf("approved approvals: %s", list.raw)
	}
	a := approvals[0].(map[string]any)
	decisions, _ := a["decisions"].([]any)
	if len(decisions) != 2 {
		t.Fatalf("decision chain of %s: %s, want the decision and its correction", apr, list.raw)
	}
	first, cur := decisions[0].(map[string]any), decisions[1].(map[string]any)
	switch {
	case first["supersedes"] != nil || first["reason"] != "looks right" || first["decided_by"] != "operator:local" || first["decided_via"] != "socket":
		t.Fatalf("the superseded decision record: %v", first)
	case cur["supersedes"] != first["decision_id"] || cur["reason"] != "checked against the invoice" || cur["decision"] != "approve" || cur["decided_at"] == nil:
		t.Fatalf("the current decision record: %v (supersedes %v)", cur, first["decision_id"])
	case a["resolution_reason"] != "checked against the invoice" || a["decision"] != "approve":
		t.Fatalf("the approval shows %v/%v, not its current record", a["decision"], a["resolution_reason"])
	}

	// The task: it ends succeeded (the root outcome), then an operator corrects it to failed.
	s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/close", "chain-close", map[string]any{})
	ended := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil)
	if o, _ := ended.body["task"].(map[string]any)["outcomes"].([]any); len(o) != 1 || o[0].(map[string]any)["state"] != "succeeded" {
		t.Fatalf("the outcome of the ended task: %s", ended.raw)
	}
	if _, err := s.svc.CorrectTaskOutcome(ctx, operator, taskID, app.OutcomeCorrection{State: task.Failed, Verification: "unmet", Reason: "the order never arrived"}); err != nil {
		t.Fatal(err)
	}
	got := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil)
	tk := got.body["task"].(map[string]any)
	outcomes, _ := tk["outcomes"].([]any)
	if len(outcomes) != 2 {
		t.Fatalf("outcome chain: %s, want the ending and its correction", got.raw)
	}
	root, now := outcomes[0].(map[string]any), outcomes[1].(map[string]any)
	switch {
	case tk["state"] != "failed" || tk["verification"] != "unmet":
		t.Fatalf("the task shows %v/%v, not its current outcome", tk["state"], tk["verification"])
	case root["state"] != "succeeded" || root["supersedes"] != nil || root["recorded_by"] != "agent:local":
		t.Fatalf("the superseded outcome: %v", root)
	case now["state"] != "failed" || now["verification"] != "unmet" || now["supersedes"] != root["outcome_id"] ||
		now["recorded_by"] != "operator:local" || now["reason"] != "the order never arrived" || now["recorded_at"] == nil:
		t.Fatalf("the current outcome: %v (supersedes %v)", now, root["outcome_id"])
	}
	// The corrections' events (approval.resolved with supersedes, task.state_changed with its
	// reason) match their schemas too.
	s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events", "", nil)
}

// Request-level authorization is recorded in the local profile too (issue #23 item 6, ADR 0021,
// ADR 0031): the agent on TCP that tries to resolve an approval leaves a refused decision bound to
// its actor, workload, channel, tenant and operation — none taken from the body, which claims to be
// someone else — and the operator's resolution on the socket an allowed one. A route that names an
// approval, not a task (/approvals/{id}/resolve), is bound to the approval's task; and the
// approval's own decision record names the deciding workload, in the database and on the wire.
func TestLocalRequestDecisionsAreRecorded(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "local-dec-task", map[string]any{
		"goal": "decisions of the local profile", "policy": map[string]any{"allowed_origins": []string{"https://shop.example.com"}},
	}).str("task", "task_id")
	// A route that names a session, not a task: its decision is bound to the session's task.
	sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "local-dec-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/close", "local-dec-close", map[string]any{})
	apr := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/approvals", "local-dec-approval", map[string]any{"reason": "check"}).str("approval", "approval_id")
	forged := map[string]any{"decision": "approve", "actor": "operator:local", "tenant": "other", "client_id": "forged", "via": "socket",
		"task_id": "tsk_forged", "workload": "forged"}
	if r := s.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "local-dec-agent", forged); r.status != 403 || r.str("code") != "insufficient_scope" {
		t.Fatalf("the agent resolving an approval: %d %s, want 403 insufficient_scope", r.status, r.raw)
	}
	resolved := s.operator().must(t, 200, "POST", "/bap/v1/approvals/"+apr+"/resolve", "local-dec-operator", map[string]any{"decision": "approve"})
	if w := resolved.str("approval", "resolved_workload"); w != app.WorkloadLocalSocket {
		t.Errorf("resolve_approval's approval: resolved_workload %q, want %q (%s)", w, app.WorkloadLocalSocket, resolved.raw)
	}
	s.audit.Flush(ctx)

	all, err := s.svc.ListDecisions(ctx, app.DecisionFilter{Tenant: "local"})
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ operation, outcome, actor, via string }
	got := map[key]app.DecisionBinding{}
	for _, d := range all {
		if d.Point == app.PointRequest {
			got[key{d.Operation, d.Outcome, d.Actor, d.Via}] = d
		}
	}
	for _, c := range []struct {
		want     key
		reason   string
		workload string
		task     string
		approval string
		session  string // a route that names a session binds its decision to it
	}{
		{key{"create_task", app.AuthAllowed, "agent:local", app.ViaAPI}, "", app.WorkloadLocalAgent, "", "", ""},
		{key{"create_browser_session", app.AuthAllowed, "agent:local", app.ViaAPI}, "", app.WorkloadLocalAgent, taskID, "", ""},
		{key{"request_approval", app.AuthAllowed, "agent:local", app.ViaAPI}, "", app.WorkloadLocalAgent, taskID, "", ""},
		{key{"close_browser_session", app.AuthAllowed, "agent:local", app.ViaAPI}, "", app.WorkloadLocalAgent, taskID, "", sess},
		{key{"resolve_approval", app.AuthRefused, "agent:local", app.ViaAPI}, "insufficient_scope", app.WorkloadLocalAgent, taskID, apr, ""},
		{key{"resolve_approval", app.AuthAllowed, "operator:local", app.ViaSocket}, "", app.WorkloadLocalSocket, taskID, apr, ""},
	} {
		d, ok := got[c.want]
		switch {
		case !ok:
			t.Errorf("no request decision %+v among %+v", c.want, all)
		case d.Tenant != "local" || d.Workload != c.workload || d.Reason != c.reason || d.TaskID != c.task || d.ApprovalID != c.approval ||
			d.SessionID != c.session || d.ApprovalState != "none":
			t.Errorf("request decision %+v: tenant %q workload %q reason %q task %q approval %q session %q state %q; want local, %q, %q, %q, %q, %q, none",
				c.want, d.Tenant, d.Workload, d.Reason, d.TaskID, d.ApprovalID, d.SessionID, d.ApprovalState, c.workload, c.reason, c.task, c.approval, c.session)
		case c.task != "" && d.Purpose != "decisions of the local profile":
			t.Errorf("request decision %+v is not bound to its task's purpose: %+v", c.want, d)
		}
	}
	if _, forgedOne := got[key{"resolve_approval", app.AuthAllowed, "agent:local", app.ViaSocket}]; forgedOne {
		t.Fatal("a decision took its channel from the request body")
	}
	// The approval's decision record: who decided (person and workload), in the database and in
	// get_approval's decisions; its task is the approval's.
	var by, client, task string
	if err := s.db.QueryRow(ctx, `SELECT d.decided_by, coalesce(d.decided_client, ''), a.task_id FROM approval_decision d
		JOIN approval_request a USING (approval_id) WHERE d.approval_id = $1`, apr).Scan(&by, &client, &task); err != nil {
		t.Fatal(err)
	}
	if by != "operator:local" || client != app.WorkloadLocalSocket || task != taskID {
		t.Errorf("approval_decision: decided_by %q, decided_client %q, task %q; want operator:local, %q, %q", by, client, task, app.WorkloadLocalSocket, taskID)
	}
	got1 := s.operator().must(t, 200, "GET", "/bap/v1/approvals?state=approved", "", nil)
	approvals, _ := got1.body["approvals"].([]any)
	if len(approvals) != 1 {
		t.Fatalf("list_approvals: %s", got1.raw)
	}
	a := approvals[0].(map[string]any)
	decisions, _ := a["decisions"].([]any)
	if a["resolved_workload"] != app.WorkloadLocalSocket || len(decisions) != 1 ||
		decisions[0].(map[string]any)["decided_workload"] != app.WorkloadLocalSocket || a["task_id"] != taskID {
		t.Errorf("the approval as the API returns it does not name the deciding workload and task: %v", a)
	}
}
