package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/events"
	"github.com/originweave/bap/server/internal/idempotency"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"

	"github.com/originweave/bap/server/internal/waitfor"
)

// node is one bap serve's event delivery over a shared database: its service (whose commands
// write the outbox), relay and broker.
type node struct {
	id     string
	svc    *app.Service
	store  *store.Store
	broker *app.Broker
	relay  *events.Relay
}

func startNode(t *testing.T, db *pgxpool.Pool, id string, mutate ...func(*events.RelayConfig)) *node {
	t.Helper()
	ctx := context.Background()
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: id, SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	n := &node{id: id, broker: app.NewBroker(app.BrokerConfig{Buffer: 100000})}
	cfg := events.RelayConfig{DB: wsql.BeginnerFromPgx(db), Broker: n.broker, NodeID: id,
		IdlePoll: time.Minute} // a long poll: delivery in these tests must come from wake-ups
	for _, m := range mutate {
		m(&cfg)
	}
	relay, err := events.NewRelay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.relay = relay
	n.store = store.New(db, store.Options{Outbox: events.NewOutbox(), EventsCommitted: relay.Wake})
	if n.svc, err = app.NewService(n.store, app.Config{NodeID: id}); err != nil {
		t.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.store.Listen(lctx, relay.NotifyChannel(), 100*time.Millisecond, func(from string) {
			if from != id {
				relay.Woken()
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done; relay.Stop() })
	return n
}

type responder struct{}

func (responder) Success(result *app.TaskResult) (app.Response, error) {
	body, err := json.Marshal(map[string]any{"task_id": result.Task.ID})
	return app.Response{Status: 201, Body: body}, err
}

func (responder) Failure(e *app.Error, _ *app.Receipt) (app.Response, error) {
	return app.Response{Status: 409, Body: []byte(`{}`)}, nil
}

var keys atomic.Int64

// testFingerprints fingerprints the test's calls (each call has a key of its own: any key will do).
var testFingerprints, _ = idempotency.NewFingerprinter([]byte("relay-test-fingerprint-key-32byt"))

func call(t *testing.T, op string, target ...string) app.Call {
	t.Helper()
	k := fmt.Sprintf("key-%d", keys.Add(1))
	fp, err := testFingerprints.Fingerprint(op, target, []byte(`{"k":"`+k+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	return app.Call{Actor: app.Actor{Tenant: "local", Subject: "operator:local"}, Operation: op, IdempotencyKey: k, Fingerprint: fp}
}

func (n *node) createTask(t *testing.T) string {
	t.Helper()
	resp, err := n.svc.CreateTask(context.Background(), call(t, "create_task"),
		app.CreateTaskInput{Goal: "relay test", Policy: app.PolicySpec{AllowedOrigins: []string{"https://shop.example.com"}}}, responder{})
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		TaskID string `json:"task_id"`
	}
	_ = json.Unmarshal(resp.Body, &body)
	return body.TaskID
}

func (n *node) cancelTask(t *testing.T, id string) {
	t.Helper()
	if _, err := n.svc.CancelTask(context.Background(), call(t, "cancel_task", id), id, "", responder{}); err != nil {
		t.Fatal(err)
	}
}

// collect reads n events from sub, failing the test if they do not arrive within a generous bound.
func collect(t *testing.T, sub *app.Subscription, n int) []app.FeedEvent {
	t.Helper()
	out := make([]app.FeedEvent, 0, n)
	deadline := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case e, ok := <-sub.C():
			if !ok {
				t.Fatalf("subscription ended after %d of %d events: %v", len(out), n, sub.Err())
			}
			out = append(out, e)
		case <-deadline:
			t.Fatalf("only %d of %d events arrived", len(out), n)
		}
	}
	return out
}

// checkFeed asserts feed order, exactly once, and per-task seq 1, 2, 3, … without gaps.
func checkFeed(t *testing.T, evs []app.FeedEvent) map[string]int64 {
	t.Helper()
	last := map[string]int64{}
	seen := map[string]bool{}
	for i, e := range evs {
		if i > 0 && !evs[i-1].Pos.Less(e.Pos) {
			t.Fatalf("event %d: position %v not after %v", i, e.Pos, evs[i-1].Pos)
		}
		if seen[e.ID] {
			t.Fatalf("event %s delivered twice", e.ID)
		}
		seen[e.ID] = true
		if e.Seq != last[e.TaskID]+1 {
			t.Fatalf("task %s: seq %d after %d", e.TaskID, e.Seq, last[e.TaskID])
		}
		last[e.TaskID] = e.Seq
	}
	return last
}

func TestRelayDeliversCommittedEventsOnceInOrder(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	n := startNode(t, db, "node_a")
	sub, err := n.broker.Subscribe("local", "")
	if err != nil {
		t.Fatal(err)
	}
	const tasks = 40
	var wg sync.WaitGroup
	for i := 0; i < tasks; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := n.createTask(t)
			n.cancelTask(t, id) // 4 events each: command.recorded, state_changed, receipt.issued … on the same task
		}()
	}
	wg.Wait()
	// create_task: task.created, command.recorded, task.state_changed, receipt.issued;
	// cancel_task: command.recorded, task.state_changed, receipt.issued.
	relayed := collect(t, sub, tasks*7)
	last := checkFeed(t, relayed)
	if len(last) != tasks {
		t.Fatalf("%d tasks seen, want %d", len(last), tasks)
	}
	var msgs int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM outbox_event`).Scan(&msgs); err != nil {
		t.Fatal(err)
	}
	// One message per committing transaction: create_task commits once, cancel_task (two-phase:
	// recorded before it stops the task's browser work, then applied) twice.
	if msgs != tasks*3 {
		t.Fatalf("%d outbox messages, want one per command transaction (%d)", msgs, tasks*3)
	}
	// The replay path reads the same feed in the same order.
	replayed, err := n.store.ReadFeed(context.Background(), "local", app.FeedPosition{}, 10000)
	if err != nil {
		t.Fatal(err)
	}
	checkFeed(t, replayed)
	if len(replayed) != tasks*7 {
		t.Fatalf("ReadFeed: %d events, want %d", len(replayed), tasks*7)
	}
	// Field for field: the relay reads the events from the history too (ADR 0040).
	if !reflect.DeepEqual(relayed, replayed) {
		t.Fatal("the relayed events differ from the history's")
	}
	if other, _ := n.store.ReadFeed(context.Background(), "globex", app.FeedPosition{}, 10); len(other) != 0 {
		t.Fatalf("ReadFeed of another tenant returned %d events", len(other))
	}
}

func TestRolledBackCommandPublishesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	n := startNode(t, db, "node_a")
	sub, _ := n.broker.Subscribe("local", "")
	id := n.createTask(t)
	boom := errors.New("boom")
	err := n.store.InTx(context.Background(), func(tx app.Tx) error {
		if err := tx.AppendEvent(context.Background(), &app.Event{ID: "evt_rolledback", TaskID: id, Tenant: "local", Seq: 5,
			Type: "task.state_changed", Time: time.Now(), Actor: "operator:local", Data: map[string]any{}}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx: %v", err)
	}
	n.cancelTask(t, id) // seq 5, 6, 7 for real
	evs := checkFeed(t, collect(t, sub, 7))
	if evs[id] != 7 {
		t.Fatalf("last seq %d, want 7", evs[id])
	}
	var leaked int
	_ = db.QueryRow(context.Background(), `SELECT count(*) FROM outbox_event WHERE uuid = 'evt_rolledback'`).Scan(&leaked)
	if leaked != 0 {
		t.Fatal("the rolled-back command's outbox message exists")
	}
}

func TestEveryNodeSeesEveryNodesEvents(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	a := startNode(t, db, "node_a")
	b := startNode(t, db, "node_b")
	subA, _ := a.broker.Subscribe("local", "")
	subB, _ := b.broker.Subscribe("local", "")
	// Only node_a commits: node_b's relay, never woken by a commit of its own and polling once a
	// minute, can only learn of them through NOTIFY within collect's bound.
	for i := 0; i < 10; i++ {
		a.createTask(t)
	}
	first := collect(t, subB, 40)
	for i := 0; i < 10; i++ {
		b.createTask(t)
	}
	fa, fb := checkFeed(t, collect(t, subA, 80)), checkFeed(t, append(first, collect(t, subB, 40)...))
	if len(fa) != 20 || len(fb) != 20 {
		t.Fatalf("tasks seen: node_a %d, node_b %d; want 20 each", len(fa), len(fb))
	}
}

// olderTransaction opens a transaction that has taken its xid (and so holds back every later
// commit's outbox messages until it ends); the test's cleanup rolls it back if it is still open.
func olderTransaction(t *testing.T, db *pgxpool.Pool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	older, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = older.Rollback(ctx) })
	if _, err := older.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil { // takes its xid now
		t.Fatal(err)
	}
	return older
}

// TestFeedOrderFollowsTaskOrderNotXidOrder builds the case xid ordering gets wrong: a transaction
// that took its xid first commits its event of a task after a younger transaction's earlier
// event of the same task. The feed must still give seq n before n+1.
func TestFeedOrderFollowsTaskOrderNotXidOrder(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	n := startNode(t, db, "node_a")
	sub, _ := n.broker.Subscribe("local", "")
	id := n.createTask(t) // seq 1..4
	ctx := context.Background()
	older := olderTransaction(t, db)
	write := func(exec func(string, ...any) error, seq int64) {
		t.Helper()
		evID := fmt.Sprintf("evt_order%d", seq)
		// Linked to the event before, as the database checks; the digest is a stand-in.
		if err := exec(`INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor, prev_digest, digest)
			VALUES ('local', $1, $2, $3, 'task.state_changed', 'operator:local',
			coalesce((SELECT digest FROM agent_task_event WHERE task_id = $1 ORDER BY seq DESC LIMIT 1), decode(repeat('00', 32), 'hex')),
			sha256(convert_to($3, 'UTF8')))`, id, seq, evID); err != nil {
			t.Fatal(err)
		}
		if err := exec(`INSERT INTO outbox_event (uuid, tenant_id, task_id, seq, last_seq) VALUES ($1, 'local', $2, $3, $3)`,
			evID, id, seq); err != nil {
			t.Fatal(err)
		}
	}
	younger, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write(func(q string, a ...any) error { _, err := younger.Exec(ctx, q, a...); return err }, 5)
	if err := younger.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	write(func(q string, a ...any) error { _, err := older.Exec(ctx, q, a...); return err }, 6)
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	n.relay.Wake()
	got := collect(t, sub, 6)[4:]
	if got[0].Seq != 5 || got[1].Seq != 6 || !got[0].Pos.Less(got[1].Pos) {
		t.Fatalf("relayed seq %d at %v then %d at %v; want 5 then 6 in feed order", got[0].Seq, got[0].Pos, got[1].Seq, got[1].Pos)
	}
	replayed, err := n.store.ReadFeed(ctx, "local", app.FeedPosition{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	checkFeed(t, replayed)
}

func TestPruneDropsDeadGroupsThenReadMessages(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	n := startNode(t, db, "node_a", func(c *events.RelayConfig) { c.Retention = time.Millisecond })
	sub, _ := n.broker.Subscribe("local", "")
	if _, err := db.Exec(ctx, `INSERT INTO outbox_consumer_offset (consumer_group, order_xid, order_offset, seq, updated_at)
		VALUES ('relay:node_gone', '0', 0, 0, now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		n.createTask(t)
	}
	collect(t, sub, 12) // node_a's relay has handed over all three messages
	var deleted int64
	waitfor.Holds(t, 30*time.Second, func() bool { // the position is taken just after the last hand-over
		n, err := n.relay.Prune(ctx)
		if err != nil {
			t.Fatal(err)
		}
		deleted += n
		return deleted >= 3
	})
	var groups, left int
	_ = db.QueryRow(ctx, `SELECT count(*) FROM outbox_consumer_offset`).Scan(&groups)
	_ = db.QueryRow(ctx, `SELECT count(*) FROM outbox_event`).Scan(&left)
	if deleted != 3 || left != 0 || groups != 1 {
		t.Fatalf("pruned %d messages, %d left, %d groups; want 3, 0 and only node_a's group", deleted, left, groups)
	}
}

// TestCommitsPendingBehindARunningTransactionArriveWhenItEnds: a commit whose outbox message an
// older transaction (one that writes no events, so it never wakes the relay) keeps unreadable is
// seen as pending by the read its wake-up causes, and arrives once that transaction ends — by
// the relay's own re-reads, since its idle poll is an hour away.
func TestCommitsPendingBehindARunningTransactionArriveWhenItEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	n := startNode(t, db, "node_a", func(c *events.RelayConfig) { c.IdlePoll = time.Hour })
	sub, _ := n.broker.Subscribe("local", "")
	older := olderTransaction(t, db)
	reads := n.relay.Reads()
	n.createTask(t)
	waitfor.True(t, 30*time.Second, "the relay to see the commit pending behind the older transaction", func() bool {
		return n.relay.Reads() > reads && n.relay.Pending()
	})
	select {
	case e := <-sub.C():
		t.Fatalf("event %s (%s) delivered while an older transaction still ran", e.ID, e.Type)
	default:
	}
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	checkFeed(t, collect(t, sub, 4))
	waitfor.True(t, 30*time.Second, "nothing pending once delivered", func() bool { return !n.relay.Pending() })
}

// TestMissedWakeUpIsDeliveredByThePoll: a commit that wakes no relay (its node's wake-up or
// NOTIFY lost) is still delivered, by the idle poll.
func TestMissedWakeUpIsDeliveredByThePoll(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	n := startNode(t, db, "node_a", func(c *events.RelayConfig) { c.IdlePoll = 100 * time.Millisecond })
	sub, _ := n.broker.Subscribe("local", "")
	// A second writer on the same database whose commits wake nobody.
	silent := store.New(db, store.Options{Outbox: events.NewOutbox()})
	svc, err := app.NewService(silent, app.Config{NodeID: "node_a"})
	if err != nil {
		t.Fatal(err)
	}
	quiet := &node{id: "node_a", svc: svc, store: silent}
	before := n.relay.Relayed()
	quiet.createTask(t)
	checkFeed(t, collect(t, sub, 4))
	// The relay counts a message after handing it over: the count may trail the delivery.
	waitfor.True(t, 30*time.Second, "the relay counted the message it read", func() bool { return n.relay.Relayed() > before })
}

// TestRelayReadsLessWhileNobodyFollows: with no subscriber on the node a read only moves the
// broker's head, so commits' wake-ups start a read at most every unfollowed gap (25 ms) instead of
// one per commit; a subscriber's arrival brings the relay back, and it gets the events committed
// after it subscribed.
func TestRelayReadsLessWhileNobodyFollows(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	n := startNode(t, db, "node_a", func(c *events.RelayConfig) { c.IdlePoll = time.Hour })
	const commits = 20
	reads, start := n.relay.Reads(), time.Now()
	for range commits {
		n.createTask(t)
	}
	elapsed, got := time.Since(start), n.relay.Reads()-reads
	// Reads start at least 25 ms apart: one may have begun before the first commit.
	if most := int64(elapsed/(25*time.Millisecond)) + 2; got > most {
		t.Errorf("%d commits in %v caused %d reads with nobody following, want at most %d", commits, elapsed, got, most)
	}
	sub, err := n.broker.Subscribe("local", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	n.createTask(t)
	checkFeed(t, collect(t, sub, 4))
}
