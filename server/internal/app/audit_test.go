package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/historychain"
	"github.com/originweave/bap/server/internal/store"
)

// A running task whose history grows is anchored by the upkeep at most once per interval, and
// only when its head moved; a task that waits in admitted is not; the task's end anchors it in the
// ending transaction; every anchor verifies.
func TestAnchorsWhileATaskRunsAndWhenItEnds(t *testing.T) {
	t.Parallel()
	br := &loadBrowser{open: map[string]bool{}, limit: 3}
	b := setup(t, func(c *app.Config) { c.Browser = br })
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})

	anchor := func(want int) {
		t.Helper()
		n, err := b.svc.AnchorDue(ctx, time.Minute)
		if err != nil || n != want {
			t.Fatalf("AnchorDue: %d, %v; want %d", n, err, want)
		}
	}
	b.advance(2 * time.Minute)
	anchor(0) // admitted: nothing to pin yet
	r := &recorder[*app.SessionResult]{}
	if _, err := b.svc.CreateBrowserSession(ctx, b.call(t, "create_browser_session", []string{tk.ID}, map[string]any{}), tk.ID, app.SessionRequest{}, r); err != nil || r.result == nil {
		t.Fatalf("create_browser_session: %v %v", err, r.problem)
	}
	anchor(1) // running, never anchored, created over a minute ago
	anchor(0) // anchored at its head just now
	cancelRec := &recorder[*app.TaskResult]{}
	if _, err := b.svc.CancelTask(ctx, b.call(t, "cancel_task", []string{tk.ID}, "cancel"), tk.ID, "", cancelRec); err != nil {
		t.Fatal(err)
	}
	b.advance(2 * time.Minute)
	anchor(0) // ended: anchored when it ended

	rep, err := b.svc.VerifyAudit(ctx, b.actor, tk.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Report.Valid() || len(rep.Anchors) != 2 {
		t.Fatalf("report %+v, break %+v, %d anchors", rep.Report, rep.Report.Break, len(rep.Anchors))
	}
	if a := rep.Anchors[0]; a.Reason != historychain.ReasonPeriodic || !rep.Report.Anchors[0].Valid {
		t.Errorf("first anchor: %+v", a)
	}
	if a := rep.Anchors[1]; a.Reason != historychain.ReasonTaskEnded || a.Seq <= rep.Anchors[0].Seq || !rep.Report.Anchors[1].Valid {
		t.Errorf("second anchor: %+v", a)
	}
	// The key set the server publishes verifies them.
	set, err := b.svc.AuditKeySet(ctx)
	if err != nil || len(set.Keys) != 1 || set.Keys[0].Kid != rep.Anchors[0].KeyID {
		t.Fatalf("key set %+v: %v", set, err)
	}
}

// Another server key cannot open the audit key of the first: it makes its own and publishes only
// that, and a chain it did not write does not verify under its key.
func TestAuditKeysBelongToTheirServerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})
	if err := b.svc.LoadAuditKeys(ctx); err != nil {
		t.Fatal(err)
	}
	mine, err := b.svc.AuditKeySet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := app.NewService(store.New(b.db), app.Config{NodeID: "node_other"})
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := other.AuditKeySet(ctx)
	if err != nil || len(theirs.Keys) != 1 || theirs.Keys[0].Kid == mine.Keys[0].Kid {
		t.Fatalf("other server's keys %+v (mine %+v): %v", theirs, mine, err)
	}
	rep, err := other.VerifyAudit(ctx, b.actor, tk.ID)
	if err != nil || rep.Report.Valid() || rep.Report.Break.Seq != 1 || rep.Report.Break.Reason != historychain.BreakDigest {
		t.Fatalf("another key verifies the chain: %+v %v", rep.Report.Break, err)
	}
}
