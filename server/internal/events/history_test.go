package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/events"
	"github.com/originweave/bap/server/internal/pgtest"
)

// readOne subscribes a consumer group of its own to the outbox (at the feed's head) with the schema
// whose Subscribed lists tenants, runs write, and returns the first message it reads.
func readOne(t *testing.T, db wsql.Beginner, group string, tenants []string, write func()) *message.Message {
	t.Helper()
	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		ConsumerGroup:  group,
		SchemaAdapter:  events.Schema{Subscribed: func() []string { return tenants }},
		OffsetsAdapter: events.Offsets{},
		PollInterval:   10 * time.Millisecond,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := sub.SubscribeInitialize(events.Topic); err != nil {
		t.Fatal(err)
	}
	msgs, err := sub.Subscribe(ctx, events.Topic)
	if err != nil {
		t.Fatal(err)
	}
	write()
	select {
	case m := <-msgs:
		m.Ack()
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no outbox message was read")
		return nil
	}
}

// TestOutboxMessagesCarryNoCopyOfTheirEvents: an outbox row names its task's range of events, and a
// read returns the events, from the history, only for the tenants it is told have a subscriber
// (ADR 0040). The relay reads a message read without them from the history when its tenant has
// a subscriber by then; either way the subscriber gets the events as the history holds them.
func TestOutboxMessagesCarryNoCopyOfTheirEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	db := wsql.BeginnerFromPgx(pool)
	n := startNode(t, pool, "node_h")
	var id string
	create := func() { id = n.createTask(t) }
	withEvents := readOne(t, db, "test:subscribed", []string{"globex", "local"}, create)
	var taskID string
	without := readOne(t, db, "test:unsubscribed", []string{"globex"}, func() { taskID = n.createTask(t) })

	var stored []byte
	if err := pool.QueryRow(context.Background(), `SELECT payload FROM outbox_event WHERE task_id = $1`, id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) != 0 {
		t.Fatalf("the outbox row stores a payload of %d bytes; want none (the events are in the history)", len(stored))
	}
	// A writer that still copies the events into the payload (an older binary) is refused.
	_, err := pool.Exec(context.Background(), `INSERT INTO outbox_event (uuid, payload, tenant_id, task_id, seq, last_seq)
		VALUES ('evt_copy', convert_to('[]', 'UTF8'), 'local', $1, 1, 1)`, id)
	if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.ConstraintName != "outbox_event_payload_empty" {
		t.Fatalf("an outbox row with a payload: %v; want outbox_event_payload_empty to refuse it", err)
	}
	history, err := n.store.ReadFeed(context.Background(), "local", app.FeedPosition{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	of := func(task string) []app.FeedEvent {
		var out []app.FeedEvent
		for _, e := range history {
			if e.TaskID == task {
				out = append(out, e)
			}
		}
		return out
	}
	for _, c := range []struct {
		m    *message.Message
		task string
	}{{withEvents, id}, {without, taskID}} {
		md := c.m.Metadata
		if md.Get("tenant_id") != "local" || md.Get("task_id") != c.task || md.Get("seq") != "1" || md.Get("last_seq") != "4" ||
			md.Get("order_xid") == "" || md.Get("order_offset") == "" {
			t.Fatalf("message %s: metadata %v; want tenant local, task %s, seq 1 to 4 and its feed position", c.m.UUID, md, c.task)
		}
		if c.m.UUID != of(c.task)[0].ID {
			t.Fatalf("message %s; want it named by its first event %s", c.m.UUID, of(c.task)[0].ID)
		}
	}
	if len(without.Payload) != 0 {
		t.Fatalf("a read for a tenant without subscribers returned its events: %s", without.Payload)
	}
	var got []map[string]any
	if err := json.Unmarshal(withEvents.Payload, &got); err != nil || len(got) != 4 {
		t.Fatalf("a read for a subscribed tenant returned %s (%v); want its 4 events", withEvents.Payload, err)
	}

	// Both messages through the relay's handler, with a subscriber for the tenant by now: the one
	// read without its events is completed from the history.
	broker := app.NewBroker(app.BrokerConfig{})
	relay, err := events.NewRelay(events.RelayConfig{DB: db, Broker: broker, NodeID: "node_x"})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := broker.Subscribe("local", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		m    *message.Message
		task string
	}{{withEvents, id}, {without, taskID}} {
		c.m.SetContext(context.Background()) // as the relay's router hands it over: not yet acked
		if err := relay.Handle(c.m); err != nil {
			t.Fatal(err)
		}
		relayed := collect(t, sub, 4)
		if want := of(c.task); !reflect.DeepEqual(relayed, want) {
			t.Fatalf("relayed %+v\nwant the history's %+v", relayed, want)
		}
	}
}
