package app_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
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
	entered, release, waiting := make(chan struct{}, 1), make(chan struct{}), make(chan struct{}, 1)
	b.svc.OnDeliveryWaitForTest(func() { waiting <- struct{}{} })
	call := b.call(t, "act", []string{"bs_x"}, "pay", "k-redelivered")
	call.Delivery = &app.Delivery{Source: app.NodeSource("node_a"), ID: "cred_1", Digest: sha256.Sum256([]byte("pay"))}
	type answer struct {
		resp app.Response
		err  error
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		r, err := b.svc.RunTwoPhaseForTest(ctx, call, tk.ID, &recorder[*app.TaskResult]{}, true, func(context.Context) (any, error) {
			entered <- struct{}{}
			<-release
			return nil, nil
		}, false)
		first <- answer{r, err}
	}()
	waitfor.Receive(t, 20*time.Second, "the first delivery's effect", entered)
	go func() {
		r, err := b.svc.RunTwoPhaseForTest(ctx, call, tk.ID, &recorder[*app.TaskResult]{}, true, func(context.Context) (any, error) {
			t.Error("the redelivery ran the effect again")
			return nil, nil
		}, false)
		second <- answer{r, err}
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
