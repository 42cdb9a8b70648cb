package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/store"
	"github.com/originweave/bap/server/internal/waitfor"
)

// TestCreateTasksWaitingForACommitCommitTogether: with one commit in flight (store
// Options.GroupCommit 1), the create_tasks that reach COMMIT meanwhile wait and then commit as one
// transaction (ADR 0039). Each is whole: its task, history, command, receipt, decision and
// completed idempotency record, replayed as it was answered. When the group's transaction fails
// (here one of them retries the key of the command in flight, which has committed by then), none
// of it is kept: each commits alone, the retry is answered with the first command's response, and
// the others are created as if there had been no group. A command whose caller gives up while it
// waits is taken out of the queue: it is not sent, and the others commit without it.
func TestCreateTasksWaitingForACommitCommitTogether(t *testing.T) {
	for _, tt := range []struct {
		name string
		// retry: one of the waiting commands retries the in-flight command's key; giveUp: the
		// caller of one of them gives up while it waits.
		retry, giveUp bool
	}{
		{name: "all commit as one transaction"},
		{name: "a failed group commits each alone", retry: true},
		{name: "a command given up while it waits is not sent", giveUp: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setupStore(t, store.Options{GroupCommit: 1, GroupCommitStall: time.Minute})
			const waiting = 6

			// Hold the tenant's row: every insert of the tenant waits on its foreign-key check, so the
			// first create_task stays in flight while the others reach COMMIT.
			lock := holdTenantRow(t, b, "local")

			type answer struct {
				resp app.Response
				rec  *recorder[*app.TaskResult]
				err  error
			}
			run := func(ctx context.Context, call app.Call, goal string) answer {
				in := app.CreateTaskInput{Goal: goal, Policy: app.PolicySpec{AllowedOrigins: []string{"https://example.com"}}}
				rec := &recorder[*app.TaskResult]{}
				resp, err := b.svc.CreateTask(ctx, call, in, rec)
				return answer{resp, rec, err}
			}
			firstCall := b.call(t, "create_task", nil, "first")
			first := make(chan answer, 1)
			go func() { first <- run(ctx, firstCall, "first") }()
			waitForLockWait(t, b, "the first create_task waits on the tenant's row")

			answers := make([]answer, waiting)
			var wg sync.WaitGroup
			giveUp, cancel := context.WithCancel(ctx)
			defer cancel()
			for i := range waiting {
				call := b.call(t, "create_task", nil, fmt.Sprintf("task %d", i))
				goal := fmt.Sprintf("task %d", i)
				if tt.retry && i == waiting-1 {
					call, goal = firstCall, "first"
				}
				callCtx := ctx
				if tt.giveUp && i == waiting-1 {
					callCtx = giveUp
				}
				wg.Go(func() { answers[i] = run(callCtx, call, goal) })
			}
			waitfor.True(t, 10*time.Second, "the other create_tasks wait for their group", func() bool {
				return b.store.GroupCommitStats().Waiting == waiting
			})
			grouped := waiting
			if tt.giveUp {
				cancel()
				grouped--
				waitfor.True(t, 10*time.Second, "the given-up create_task leaves the queue", func() bool {
					return b.store.GroupCommitStats().Waiting == grouped
				})
			}
			if err := lock.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			a0 := waitfor.Receive(t, 30*time.Second, "the first create_task", first)
			wg.Wait()
			if a0.err != nil {
				t.Fatalf("first create_task: %v", a0.err)
			}

			st := b.store.GroupCommitStats()
			if st.Groups != 1 || st.Grouped != int64(grouped) || st.Largest != grouped {
				t.Errorf("group commits %+v, want one group of %d", st, grouped)
			}
			if failed := int64(0); tt.retry {
				failed = 1
				if st.Failed != failed {
					t.Errorf("failed groups %d, want %d", st.Failed, failed)
				}
			} else if st.Failed != failed {
				t.Errorf("failed groups %d, want 0", st.Failed)
			}

			// Which transaction wrote each task: one for the group, or one each after its failure.
			xmins := map[string]bool{}
			created := 0
			for i, a := range answers {
				if tt.giveUp && i == waiting-1 {
					if !errors.Is(a.err, context.Canceled) {
						t.Errorf("the given-up create_task answered %v, want context.Canceled", a.err)
					}
					continue
				}
				if a.err != nil {
					t.Fatalf("create_task %d: %v", i, a.err)
				}
				if tt.retry && i == waiting-1 {
					if a.resp.Status != a0.resp.Status || !bytes.Equal(a.resp.Body, a0.resp.Body) {
						t.Errorf("the retried key answered %d %s, want the first answer %d %s", a.resp.Status, a.resp.Body, a0.resp.Status, a0.resp.Body)
					}
					continue
				}
				created++
				tk := a.rec.result.Task
				want := []string{"task.created", "command.recorded", "task.state_changed", "receipt.issued"}
				if got := types(b.events(t, tk.ID)); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("task %s history %v, want %v", tk.ID, got, want)
				}
				var xmin string
				var receipts, commands int
				if err := b.db.QueryRow(ctx, `SELECT t.xmin::text,
						(SELECT count(*) FROM task_receipt r JOIN task_command c USING (command_id) WHERE c.task_id = t.task_id),
						(SELECT count(*) FROM task_command c WHERE c.task_id = t.task_id)
					FROM agent_task t WHERE t.task_id = $1`, tk.ID).Scan(&xmin, &receipts, &commands); err != nil {
					t.Fatal(err)
				}
				if receipts != 1 || commands != 1 {
					t.Errorf("task %s has %d commands and %d receipts, want 1 and 1", tk.ID, commands, receipts)
				}
				xmins[xmin] = true
				// The key is completed with the response the command gave: a retry gets it back.
				again := run(ctx, b.call(t, "create_task", nil, fmt.Sprintf("task %d", i), fmt.Sprintf("key-%d", i+2)), fmt.Sprintf("task %d", i))
				if again.err != nil || !bytes.Equal(again.resp.Body, a.resp.Body) {
					t.Errorf("retry of create_task %d: %v %s, want %s", i, again.err, again.resp.Body, a.resp.Body)
				}
			}
			want := 1
			if tt.retry {
				want = created
			}
			if len(xmins) != want {
				t.Errorf("%d tasks written by %d transactions, want %d", created, len(xmins), want)
			}
		})
	}
}

// TestASlowCommitDoesNotHoldAnotherTenantsBack: a create_task queued behind a transaction that
// waits on a lock (here every insert of tenant local waits on its tenant row) is sent anyway once
// it has waited Options.GroupCommitStall, as one more transaction: another tenant's command
// commits while the lock is still held.
func TestASlowCommitDoesNotHoldAnotherTenantsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupStore(t, store.Options{GroupCommit: 1, GroupCommitStall: 100 * time.Millisecond})
	if _, err := b.db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('other')`); err != nil {
		t.Fatal(err)
	}
	lock := holdTenantRow(t, b, "local")
	create := func(call app.Call) error {
		in := app.CreateTaskInput{Goal: "g", Policy: app.PolicySpec{AllowedOrigins: []string{"https://example.com"}}}
		_, err := b.svc.CreateTask(ctx, call, in, &recorder[*app.TaskResult]{})
		return err
	}
	stuck := make(chan error, 1)
	go func() { stuck <- create(b.call(t, "create_task", nil, "g")) }()
	waitForLockWait(t, b, "tenant local's create_task waits on its tenant's row")
	other := b.call(t, "create_task", nil, "g")
	other.Actor.Tenant = "other"
	done := make(chan error, 1)
	go func() { done <- create(other) }()
	if err := waitfor.Receive(t, 10*time.Second, "tenant other's create_task, while local's still waits", done); err != nil {
		t.Fatalf("tenant other's create_task: %v", err)
	}
	if st := b.store.GroupCommitStats(); st.Unstalled < 1 {
		t.Errorf("group commit stats %+v: want the queue sent past the stalled transaction", st)
	}
	select {
	case err := <-stuck:
		t.Fatalf("tenant local's create_task ended (%v) while its tenant's row was locked", err)
	default:
	}
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitfor.Receive(t, 30*time.Second, "tenant local's create_task", stuck); err != nil {
		t.Fatalf("tenant local's create_task: %v", err)
	}
}

// holdTenantRow locks tenant's row until the test ends (or the returned transaction ends): every
// insert of that tenant then waits on its foreign-key check.
func holdTenantRow(t *testing.T, b *bundle, tenant string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	lock, err := b.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(ctx) })
	if _, err := lock.Exec(ctx, `SELECT 1 FROM tenant_account WHERE tenant_id = $1 FOR UPDATE`, tenant); err != nil {
		t.Fatal(err)
	}
	return lock
}

// waitForLockWait waits until a session of the test's database waits on a lock.
func waitForLockWait(t *testing.T, b *bundle, what string) {
	t.Helper()
	waitfor.True(t, 10*time.Second, what, func() bool {
		var n int
		err := b.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n)
		return err == nil && n > 0
	})
}
