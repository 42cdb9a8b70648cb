package app_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/store"
	"github.com/originweave/bap/server/internal/task"
	"github.com/originweave/bap/server/internal/waitfor"
)

// A forwarded command redelivered while its first delivery still runs waits for that run and is
// answered its first response (a replay), never idempotency_in_flight: its sender delivered once
// (issue #23 item 1, ADR 0031). The command runs once.
func TestRedeliveryWhileTheFirstRunsGetsItsAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tk := b.create(t, app.CreateTaskInput{})
	waiting := make(chan struct{}, 1)
	b.svc.OnDeliveryWaitForTest(func() { waiting <- struct{}{} })
	call := b.call(t, "act", []string{"bs_x"}, "pay", "k-redelivered")
	call.Delivery = &app.Delivery{Source: app.NodeSource("node_a"), ID: "cred_1", Digest: sha256.Sum256([]byte("pay"))}
	release, first := startHeldDelivery(t, b.svc, call, tk.ID)
	second := make(chan deliveryAnswer, 1)
	go func() {
		r, err := redeliver(t, b.svc, call, tk.ID)
		second <- deliveryAnswer{r, err}
	}()
	select {
	case <-waiting:
	case a := <-second:
		t.Fatalf("the redelivery answered while its first delivery ran: %v %d %s", a.err, a.resp.Status, a.resp.Body)
	case <-time.After(20 * time.Second):
		t.Fatal("the redelivery neither waited nor answered")
	}
	close(release)
	a1 := waitfor.Receive(t, 20*time.Second, "the first delivery's answer", first)
	a2 := waitfor.Receive(t, 20*time.Second, "the redelivery's answer", second)
	if a1.err != nil || a2.err != nil {
		t.Fatalf("answers: %v / %v", a1.err, a2.err)
	}
	if !a2.resp.Replayed || a2.resp.Status != a1.resp.Status || !bytes.Equal(a2.resp.Body, a1.resp.Body) {
		t.Fatalf("the redelivery's answer %d %s (replayed %v), want the first's %d %s", a2.resp.Status, a2.resp.Body, a2.resp.Replayed, a1.resp.Status, a1.resp.Body)
	}
	var commands int
	if err := b.db.QueryRow(ctx, `SELECT count(*) FROM task_command WHERE task_id = $1 AND operation = 'act'`, tk.ID).Scan(&commands); err != nil || commands != 1 {
		t.Fatalf("%d act commands (%v), want 1", commands, err)
	}
}

// A forwarded command redelivered while its first delivery is in flight on another process gets
// a classified answer, never idempotency_in_flight (issue #23 item 1, ADR 0031). When that
// process's node is dead (stopped, or silent for NodeStaleAfter), the redelivery classifies the
// command at once, as recovery would (reconciliation_required for a side effect), and is answered
// that classification; the first run, should it still end, answers the same replay and records no
// second receipt. When that node is alive, the command cannot be classified yet: 503
// browser_unavailable with Retry-After, and once the first run ends, its answer.
func TestRedeliveryOfADeadNodesDeliveryIsClassified(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		dead bool
	}{{"the first delivery's node is dead", true}, {"the first delivery's node is alive", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *app.Config) { c.InterruptedResponse = interrupted })
			ctx := context.Background()
			st := store.New(b.db)
			if err := st.RegisterNode(ctx, app.NodeInfo{ID: "node_a", SoftwareVersion: "test"}); err != nil {
				t.Fatal(err)
			}
			// node_a: the process that received the first delivery (its own running commands).
			nodeA, err := app.NewService(st, app.Config{NodeID: "node_a", InterruptedResponse: interrupted, Now: func() time.Time { return *b.now.Load() }})
			if err != nil {
				t.Fatal(err)
			}
			tk := b.create(t, app.CreateTaskInput{})
			call := b.call(t, "act", []string{"bs_x"}, "pay", "k-dead")
			call.Delivery = &app.Delivery{Source: app.NodeSource("node_front"), ID: "cred_dead", Digest: sha256.Sum256([]byte("pay"))}
			release, first := startHeldDelivery(t, nodeA, call, tk.ID)
			if c.dead {
				if err := st.StopNode(ctx, "node_a"); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := redeliver(t, b.svc, call, tk.ID)
			var body struct {
				Receipt struct{ Outcome task.Outcome } `json:"receipt"`
			}
			if c.dead {
				if err != nil || !resp.Replayed || resp.Status != 200 || json.Unmarshal(resp.Body, &body) != nil ||
					body.Receipt.Outcome != task.ReconciliationRequired {
					t.Fatalf("the redelivery of a dead node's delivery: %v %d %s", err, resp.Status, resp.Body)
				}
			} else {
				var e *app.Error
				if !errors.As(err, &e) || e.Code != app.CodeBrowserUnavailable || e.RetryAfter <= 0 {
					t.Fatalf("the redelivery of a live node's delivery: %v %d %s", err, resp.Status, resp.Body)
				}
			}
			close(release)
			a1 := waitfor.Receive(t, 20*time.Second, "the first delivery's answer", first)
			if a1.err != nil {
				t.Fatal(a1.err)
			}
			if c.dead && (!a1.resp.Replayed || !bytes.Equal(a1.resp.Body, resp.Body)) {
				t.Fatalf("the first run after its classification: %d %s (replayed %v), want %s", a1.resp.Status, a1.resp.Body, a1.resp.Replayed, resp.Body)
			}
			if !c.dead {
				if resp, err = redeliver(t, b.svc, call, tk.ID); err != nil || !resp.Replayed || !bytes.Equal(resp.Body, a1.resp.Body) {
					t.Fatalf("the redelivery after the first ended: %v %d %s, want %s", err, resp.Status, resp.Body, a1.resp.Body)
				}
			}
			var commands, receipts int
			if err := b.db.QueryRow(ctx, `SELECT count(*), count(r.receipt_id) FROM task_command c LEFT JOIN task_receipt r USING (command_id)
				WHERE c.task_id = $1 AND c.operation = 'act'`, tk.ID).Scan(&commands, &receipts); err != nil || commands != 1 || receipts != 1 {
				t.Fatalf("%d commands, %d receipts (%v), want 1 and 1", commands, receipts, err)
			}
		})
	}
}

// deliveryAnswer is what one delivery of a command was answered.
type deliveryAnswer struct {
	resp app.Response
	err  error
}

// startHeldDelivery runs call's first delivery on svc and returns once its effect has started;
// the effect waits until release is closed, and first receives the delivery's answer.
func startHeldDelivery(t *testing.T, svc *app.Service, call app.Call, taskID string) (release chan struct{}, first <-chan deliveryAnswer) {
	t.Helper()
	entered, release, answers := make(chan struct{}, 1), make(chan struct{}), make(chan deliveryAnswer, 1)
	go func() {
		r, err := svc.RunTwoPhaseForTest(context.Background(), call, taskID, &recorder[*app.TaskResult]{}, true, func(context.Context) (any, error) {
			entered <- struct{}{}
			<-release
			return nil, nil
		}, false)
		answers <- deliveryAnswer{r, err}
	}()
	waitfor.Receive(t, 20*time.Second, "the first delivery's effect", entered)
	return release, answers
}

// redeliver delivers call again on svc; its effect must never run.
func redeliver(t *testing.T, svc *app.Service, call app.Call, taskID string) (app.Response, error) {
	return svc.RunTwoPhaseForTest(context.Background(), call, taskID, &recorder[*app.TaskResult]{}, true, func(context.Context) (any, error) {
		t.Error("the redelivery ran the effect again")
		return nil, nil
	}, false)
}
