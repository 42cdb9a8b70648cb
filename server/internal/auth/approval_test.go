package auth

import (
	"context"
	"testing"

	"github.com/originweave/bap/server/internal/app"
)

// resolve_approval binds the authenticated subject of the token, never a name from the body; with
// separation of duties on, the requester may not resolve its own approval.
func TestApprovalDecisionBindsTheTokenSubject(t *testing.T) {
	t.Parallel()
	for _, sod := range []bool{false, true} {
		b := setup(t, 0, func(c *app.Config) { c.SeparationOfDuties = sod })
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
		self := b.api("POST", "/bap/v1/approvals/"+approvalID+"/resolve", at, `{"decision":"approve"}`)
		wantBy := "client:" + agent.ClientID
		if sod {
			if self.status != 403 || self.body["code"] != "insufficient_scope" {
				t.Fatalf("separation of duties: the requester resolved: %d %s", self.status, self.raw)
			}
			if r := b.api("POST", "/bap/v1/approvals/"+approvalID+"/resolve", rt, `{"decision":"approve"}`); r.status != 200 {
				t.Fatalf("reviewer resolves: %d %s", r.status, r.raw)
			}
			wantBy = "client:" + reviewer.ClientID
		} else if self.status != 200 {
			t.Fatalf("the requester resolves (separation off): %d %s", self.status, self.raw)
		}
		var decidedBy string
		if err := b.pool.QueryRow(context.Background(), `SELECT decided_by FROM approval_decision WHERE approval_id = $1`, approvalID).Scan(&decidedBy); err != nil {
			t.Fatal(err)
		}
		if decidedBy != wantBy {
			t.Errorf("separation %v: decided_by %q, want %q", sod, decidedBy, wantBy)
		}
	}
}
