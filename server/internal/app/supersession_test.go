package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/store"
	"github.com/originweave/bap/server/internal/task"
)

// A correction of how a task ended, of an approver's decision or of a reconciliation's finding is
// a new record that supersedes the current one: reads show the current record and the chain, the
// earlier records stay as they were, and the history says who corrected what.
func TestCorrectionsSupersedeTheCurrentRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *app.Config) { c.InterruptedResponse = interrupted })
	ctx := context.Background()
	operator := app.Actor{Tenant: "local", Subject: "operator:alice"}

	t.Run("task outcome", func(t *testing.T) {
		tk := b.create(t, app.CreateTaskInput{})
		if _, err := b.svc.CloseTask(ctx, b.call(t, "close_task", []string{tk.ID}, nil), tk.ID, &recorder[*app.CloseResult]{}); err != nil {
			t.Fatal(err)
		}
		ended, err := b.svc.GetTask(ctx, b.actor, tk.ID)
		if err != nil || ended.State != task.Succeeded || len(ended.Outcomes) != 1 || ended.Outcomes[0].RecordedBy != b.actor.Subject ||
			ended.Outcomes[0].State != task.Succeeded || ended.Outcomes[0].Verification != "unverified" {
			t.Fatalf("an ended task's outcome: %v %+v", err, ended)
		}
		for _, bad := range []app.OutcomeCorrection{
			{State: task.Failed, Verification: "verified", Reason: "x"}, // only the runtime verifies
			{State: task.Running, Reason: "x"},                          // an ended task stays ended
			{State: task.Failed},                                        // why
		} {
			if _, err := b.svc.CorrectTaskOutcome(ctx, operator, tk.ID, bad); app.AsError(err) == nil || app.AsError(err).Code != app.CodeInvalidRequest {
				t.Errorf("correction %+v: %v, want invalid_request", bad, err)
			}
		}
		got, err := b.svc.CorrectTaskOutcome(ctx, operator, tk.ID, app.OutcomeCorrection{State: task.Failed, Verification: "unmet", Reason: "wrong item ordered"})
		if err != nil {
			t.Fatal(err)
		}
		if got.State != task.Failed || got.Verification != "unmet" || len(got.Outcomes) != 2 {
			t.Fatalf("after the correction: %+v", got)
		}
		first, cur := got.Outcomes[0], got.Outcomes[1]
		if first.State != task.Succeeded || first.Verification != "unverified" || first.Supersedes != 0 ||
			cur.Supersedes != first.ID || cur.RecordedBy != "operator:alice" || cur.Reason != "wrong item ordered" {
			t.Fatalf("the chain: %+v", got.Outcomes)
		}
		last := b.events(t, tk.ID)
		if e := last[len(last)-1]; e.Type != "task.state_changed" || e.Actor != "operator:alice" || e.Data["cause"] != "outcome_corrected" ||
			e.Data["from"] != "succeeded" || e.Data["to"] != "failed" {
			t.Fatalf("the history's last event: %+v", e)
		}
		live := b.create(t, app.CreateTaskInput{})
		if _, err := b.svc.CorrectTaskOutcome(ctx, operator, live.ID, app.OutcomeCorrection{State: task.Failed, Reason: "x"}); app.AsError(err) == nil ||
			app.AsError(err).Code != app.CodeInvalidTransition {
			t.Fatalf("correcting a live task: %v", err)
		}
	})

	t.Run("approval decision", func(t *testing.T) {
		tk := b.create(t, app.CreateTaskInput{})
		call := b.call(t, "request_approval", []string{tk.ID}, "why")
		call.Actor.Subject, call.ClientID = "agent:local", app.WorkloadLocalAgent
		r := &recorder[*app.ApprovalResult]{}
		if _, err := b.svc.RequestApproval(ctx, call, tk.ID, "why", r); err != nil {
			t.Fatal(err)
		}
		id := r.result.Approval.ID
		if _, err := b.svc.CorrectApprovalDecision(ctx, operator, id, "x"); app.AsError(err) == nil || app.AsError(err).Code != app.CodeApprovalNotPending {
			t.Fatalf("correcting a pending approval's decision: %v", err)
		}
		if _, err := b.svc.ResolveApproval(ctx, b.call(t, "resolve_approval", []string{id}, "approve"), id, "approve", "looks right", &recorder[*app.ApprovalResult]{}); err != nil {
			t.Fatal(err)
		}
		a, err := b.svc.CorrectApprovalDecision(ctx, operator, id, "approved after a call with the shop")
		if err != nil {
			t.Fatal(err)
		}
		if a.State != task.ApprovalApproved || a.Decision.Decision != "approve" || a.Decision.Reason != "approved after a call with the shop" ||
			a.Decision.DecidedBy != "operator:alice" || len(a.Decisions) != 2 || a.Decisions[0].Reason != "looks right" ||
			a.Decisions[0].DecidedBy != b.actor.Subject || a.Decisions[1].Supersedes != a.Decisions[0].ID || a.Decision.ID != a.Decisions[1].ID {
			t.Fatalf("after the correction: %+v, chain %+v", a.Decision, a.Decisions)
		}
		listed, err := b.svc.ListApprovals(ctx, b.actor, "approved", 10)
		if err != nil || len(listed) != 1 || len(listed[0].Decisions) != 2 || listed[0].Decision.Reason != a.Decision.Reason {
			t.Fatalf("list_approvals: %v %+v", err, listed)
		}
		if r := resolveAgain(t, b, id); r.problem == nil || r.problem.Code != app.CodeApprovalNotPending {
			t.Fatalf("a corrected approval is still closed: %+v", r)
		}
	})

	t.Run("reconciliation resolution", func(t *testing.T) {
		tk := b.create(t, app.CreateTaskInput{})
		recID := openReconciliation(t, b, tk.ID)
		if _, err := b.svc.CorrectReconciliation(ctx, operator.Subject, recID, "applied", "x"); app.AsError(err) == nil ||
			app.AsError(err).Code != app.CodeInvalidTransition {
			t.Fatalf("correcting an open reconciliation: %v", err)
		}
		if _, err := b.svc.ResolveReconciliation(ctx, "operator:bob", recID, "no_side_effect", "not in the shop"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.svc.CorrectReconciliation(ctx, operator.Subject, recID, "applied", ""); app.AsError(err) == nil {
			t.Fatal("a correction without a note was accepted")
		}
		rec, err := b.svc.CorrectReconciliation(ctx, operator.Subject, recID, "applied", "the order arrived a day late")
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != "resolved" || rec.Resolution != "applied" || rec.ResolvedBy != "operator:alice" || len(rec.Resolutions) != 2 ||
			rec.Resolutions[0].Outcome != "no_side_effect" || rec.Resolutions[0].ResolvedBy != "operator:bob" ||
			rec.Resolutions[1].Supersedes != rec.Resolutions[0].ID || rec.ResolutionID != rec.Resolutions[1].ID {
			t.Fatalf("after the correction: %+v", rec)
		}
		all, err := b.svc.ListReconciliations(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range all {
			if r.ID == recID && (r.Resolution != "applied" || len(r.Resolutions) != 2) {
				t.Fatalf("listed: %+v", r)
			}
		}
	})
}

func resolveAgain(t *testing.T, b *bundle, id string) *recorder[*app.ApprovalResult] {
	t.Helper()
	r := &recorder[*app.ApprovalResult]{}
	if _, err := b.svc.ResolveApproval(context.Background(), b.call(t, "resolve_approval", []string{id}, "deny"), id, "deny", "", r); err != nil {
		t.Fatal(err)
	}
	return r
}

// openReconciliation interrupts a side-effecting command of taskID and lets recovery open its
// reconciliation (as TestRecoveryClassifiesInterruptedCommands does).
func openReconciliation(t *testing.T, b *bundle, taskID string) string {
	t.Helper()
	ctx := context.Background()
	call := b.call(t, "act", []string{"bs_x"}, taskID)
	dispatch := func(context.Context) (any, error) { return nil, nil }
	if _, err := b.svc.RunTwoPhaseForTest(ctx, call, taskID, &recorder[*app.TaskResult]{}, true, dispatch, true); err == nil {
		t.Fatal("phase 3 was meant to fail")
	}
	if err := store.New(b.db).StopNode(ctx, "node_test"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := store.New(b.db).RegisterNode(ctx, app.NodeInfo{ID: "node_test", SoftwareVersion: "test"}); err != nil {
			t.Fatal(err)
		}
	}()
	if n, err := b.svc.RecoverInterrupted(ctx, time.Now()); err != nil || n != 1 {
		t.Fatalf("recovered %d (%v), want 1", n, err)
	}
	recs, err := b.svc.ListReconciliations(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.TaskID == taskID {
			return r.ID
		}
	}
	t.Fatalf("no reconciliation opened for %s", taskID)
	return ""
}
