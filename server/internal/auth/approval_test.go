package auth

import (
	"context"
	"testing"
)

// resolve_approval binds the authenticated subject of the token, never a name from the body, and
// separation of duties is always on: the requesting client may not resolve its own approval even
// holding bap:approvals.resolve (403 approver_not_permitted, recorded), with this token or a new
// one; a separate reviewer does, and the decision records it and the channel.
func TestApprovalDecisionBindsTheTokenSubject(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	agent := b.client("acme", "bap:tasks.write", "bap:approvals.request", "bap:approvals.resolve")
	reviewer := b.client("acme", "bap:approvals.resolve")
	at, rt := b.accessToken(agent), b.accessToken(reviewer)
	r := b.api("POST", "/bap/v1/tasks", at, taskBody)
	taskID := r.body["task"].(map[string]any)["task_id"].(string)
	r = b.api("POST", "/bap/v1/tasks/"+taskID+"/approvals", at, `{"reason":"submit the order"}`)
	if r.status != 201 {
		t.Fatalf("request_approval: %d %s", r.status, r.raw)
	}
	approvalID := r.body["approval"].(map[string]any)["approval_id"].(string)
	if r := b.api("POST", "/bap/v1/approvals/"+approvalID+"/resolve", rt, `{"decision":"approve","decided_by":"someone else"}`); r.status != 400 {
		t.Fatalf("a name in the body: %d %s, want 400 (unknown field)", r.status, r.raw)
	}
	for i, tok := range []string{at, b.accessToken(agent)} {
		for _, d := range []string{"approve", "deny"} {
			self := b.api("POST", "/bap/v1/approvals/"+approvalID+"/resolve", tok, `{"decision":"`+d+`"}`)
			if self.status != 403 || self.body["code"] != "approver_not_permitted" {
				t.Fatalf("separation of duties: the requesting client's %s (token %d): %d %s", d, i, self.status, self.raw)
			}
		}
	}
	r = b.api("POST", "/bap/v1/approvals/"+approvalID+"/resolve", rt, `{"decision":"approve"}`)
	if r.status != 200 {
		t.Fatalf("reviewer resolves: %d %s", r.status, r.raw)
	}
	var decidedBy, channel string
	if err := b.pool.QueryRow(context.Background(), `SELECT decided_by, channel FROM approval_decision WHERE approval_id = $1`, approvalID).Scan(&decidedBy, &channel); err != nil {
		t.Fatal(err)
	}
	if decidedBy != "client:"+reviewer.ClientID || channel != "api" {
		t.Errorf("decided_by %q via %q, want client:%s via api", decidedBy, channel, reviewer.ClientID)
	}
	var rejected int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM task_receipt WHERE problem_code = 'approver_not_permitted'`).Scan(&rejected); err != nil {
		t.Fatal(err)
	}
	if rejected != 4 {
		t.Errorf("%d rejected resolves recorded, want 4", rejected)
	}
}
