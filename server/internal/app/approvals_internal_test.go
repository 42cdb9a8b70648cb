package app

import (
	"fmt"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// mayResolve is separation of duties: whoever requested or caused an approval never resolves it;
// only an approval whose rule opted in answers an elicitation, and only the requester's.
func TestMayResolve(t *testing.T) {
	t.Parallel()
	byAgent := &Approval{RequestedBy: "client:agent", RequestedClient: "agent", Channel: ApprovalChannelApprover}
	byWorker := &Approval{RequestedBy: "worker:node_1", OnBehalfOf: "user:ada", OnBehalfClient: "app", Channel: ApprovalChannelApprover}
	elicitable := &Approval{RequestedBy: "client:agent", RequestedClient: "agent", Channel: ApprovalChannelElicitation}
	call := func(subject, client, via string) Call {
		return Call{Actor: Actor{Tenant: "acme", Subject: subject}, ClientID: client, Via: via}
	}
	for _, tc := range []struct {
		name string
		a    *Approval
		call Call
		ok   bool
	}{
		{"a separate approver", byAgent, call("client:reviewer", "reviewer", ViaAPI), true},
		{"the requester", byAgent, call("client:agent", "agent", ViaAPI), false},
		{"the requester over MCP", byAgent, call("client:agent", "agent", ViaMCP), false},
		{"a person through the requesting client", byAgent, call("user:bob", "agent", ViaAPI), false},
		{"the local operator", &Approval{RequestedBy: "agent:local", Channel: ApprovalChannelApprover}, call("operator:local", "", ViaSocket), true},
		{"the operator's own request", &Approval{RequestedBy: "operator:local"}, call("operator:local", "", ViaSocket), false},
		{"the task's creator, for its worker's hold", byWorker, call("user:ada", "", ViaAPI), false},
		{"the task creator's client, for its worker's hold", byWorker, call("client:app", "app", ViaAPI), false},
		{"another approver, for a worker's hold", byWorker, call("user:grace", "console", ViaAPI), true},
		{"a worker", byAgent, call("worker:node_2", "", ViaAPI), false},
		{"an elicitation where the rule did not opt in", byAgent, call("client:agent", "agent", ViaElicitation), false},
		{"the requester's elicitation, opted in", elicitable, call("client:agent", "agent", ViaElicitation), true},
		{"another client's elicitation, opted in", elicitable, call("client:other", "other", ViaElicitation), false},
		{"the requester over the API, opted in", elicitable, call("client:agent", "agent", ViaAPI), false},
		{"a separate approver, opted in", elicitable, call("client:reviewer", "reviewer", ViaAPI), true},
	} {
		e := mayResolve(tc.call, tc.a)
		if (e == nil) != tc.ok || (e != nil && e.Code != CodeApproverNotPermitted) {
			t.Errorf("%s: %v, want allowed %v", tc.name, e, tc.ok)
		}
	}
}

// A held request the page gave up while it waited is reported to the approver as a timed-out
// action with nothing sent (rejected, no reconciliation), not as an internal error.
func TestAbandonedHoldIsReported(t *testing.T) {
	t.Parallel()
	e, outcome := browserProblem(fmt.Errorf("%w: the browser failed it before sending it", page.ErrHoldAbandoned), true)
	if e == nil || e.Code != CodeActionTimeout || outcome != task.Rejected || !strings.Contains(e.Detail, "nothing was sent") {
		t.Fatalf("browserProblem(ErrHoldAbandoned) = %+v, %q; want action_timeout, rejected, nothing sent", e, outcome)
	}
}
