package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/originweave/bap/server/internal/app"
)

// storedEvent is an event as the relay reads it from the history (historyEvents), in JSON.
type storedEvent struct {
	EventID   string         `json:"event_id"`
	TaskID    string         `json:"task_id"`
	Tenant    string         `json:"tenant_id,omitempty"`
	Seq       int64          `json:"seq"`
	Type      string         `json:"type"`
	Time      time.Time      `json:"time"`
	Actor     string         `json:"actor,omitempty"`
	Cause     string         `json:"cause,omitempty"`
	CommandID string         `json:"command_id,omitempty"`
	Data      map[string]any `json:"data"`
}

// Outbox publishes a command's events as outbox messages — one per task the command touched,
// naming that task's range of events (seq to last_seq) — with the watermill-sql publisher on the
// command's transaction. A message carries no copy of its events: they are in the task's history,
// written by the same transaction, and the relay reads them from there (ADR 0040). It implements
// the store's Outbox port. Safe for concurrent use.
type Outbox struct {
	schema Schema
	log    watermill.LoggerAdapter
}

// NewOutbox returns the outbox publisher.
func NewOutbox() *Outbox { return &Outbox{schema: Schema{}, log: watermill.NopLogger{}} }

// Publish writes the messages through exec (the caller's transaction).
func (o *Outbox) Publish(ctx context.Context, exec func(ctx context.Context, sql string, args ...any) error, evs []app.Event) error {
	msgs, err := Messages(ctx, evs)
	if err != nil {
		return err
	}
	pub, err := wsql.NewPublisher(txExec{exec}, wsql.PublisherConfig{SchemaAdapter: o.schema}, o.log)
	if err != nil {
		return err
	}
	return pub.Publish(Topic, msgs...)
}

// Messages groups evs by task (keeping their order) into outbox messages: one per task, named by
// its first event's id, whose metadata is the task, its tenant and the range of seqs; the payload
// is empty.
func Messages(ctx context.Context, evs []app.Event) ([]*message.Message, error) {
	var order []string
	byTask := map[string][]app.Event{}
	for _, e := range evs {
		if _, ok := byTask[e.TaskID]; !ok {
			order = append(order, e.TaskID)
		}
		byTask[e.TaskID] = append(byTask[e.TaskID], e)
	}
	msgs := make([]*message.Message, 0, len(order))
	for _, task := range order {
		group := byTask[task]
		for i := 1; i < len(group); i++ {
			if group[i].Seq != group[i-1].Seq+1 {
				return nil, fmt.Errorf("events of task %s are not consecutive (%d after %d)", task, group[i].Seq, group[i-1].Seq)
			}
		}
		first, last := group[0], group[len(group)-1]
		m := message.NewMessage(first.ID, nil)
		m.Metadata.Set(metaTenant, first.Tenant)
		m.Metadata.Set(metaTask, task)
		m.Metadata.Set(metaSeq, strconv.FormatInt(first.Seq, 10))
		m.Metadata.Set(metaLastSeq, strconv.FormatInt(last.Seq, 10))
		m.SetContext(ctx)
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// lastPosition reads the tenant and the feed position of the last event of a relayed message from
// its metadata, without decoding its payload; ok is false when the metadata lacks them.
func lastPosition(m *message.Message) (tenant string, last app.FeedPosition, ok bool) {
	tenant = m.Metadata.Get(metaTenant)
	xid, err1 := strconv.ParseUint(m.Metadata.Get(metaOrderXID), 10, 64)
	off, err2 := strconv.ParseInt(m.Metadata.Get(metaOrderOffset), 10, 64)
	seq, err3 := strconv.ParseInt(m.Metadata.Get(metaLastSeq), 10, 64)
	if tenant == "" || err1 != nil || err2 != nil || err3 != nil {
		return "", app.FeedPosition{}, false
	}
	return tenant, app.FeedPosition{XID: xid, Offset: off, Seq: seq}, true
}

// decode turns a relayed message and its events as historyEventsSQL returns them (a JSON array)
// into the events with their feed positions.
func decode(m *message.Message, events []byte) ([]app.FeedEvent, error) {
	xid, err := strconv.ParseUint(m.Metadata.Get(metaOrderXID), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("message %s: feed position: %w", m.UUID, err)
	}
	off, err := strconv.ParseInt(m.Metadata.Get(metaOrderOffset), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("message %s: feed position: %w", m.UUID, err)
	}
	var stored []storedEvent
	if err := json.Unmarshal(events, &stored); err != nil {
		return nil, fmt.Errorf("message %s: decoding events: %w", m.UUID, err)
	}
	out := make([]app.FeedEvent, 0, len(stored))
	for _, e := range stored {
		if e.Data == nil {
			e.Data = map[string]any{}
		}
		out = append(out, app.FeedEvent{
			Event: app.Event{ID: e.EventID, TaskID: e.TaskID, Tenant: e.Tenant, Seq: e.Seq, Type: e.Type, Time: e.Time.UTC(),
				Actor: e.Actor, Cause: e.Cause, CommandID: e.CommandID, Data: e.Data},
			Pos: app.FeedPosition{XID: xid, Offset: off, Seq: e.Seq},
		})
	}
	return out, nil
}

// txExec is the watermill-sql ContextExecutor of a command's transaction: statements are queued
// in the transaction's batch by exec.
type txExec struct {
	exec func(ctx context.Context, sql string, args ...any) error
}

type queuedResult struct{}

func (queuedResult) RowsAffected() (int64, error) { return 0, errors.New("queued: not executed yet") }

func (t txExec) ExecContext(ctx context.Context, query string, args ...any) (wsql.Result, error) {
	if err := t.exec(ctx, query, args...); err != nil {
		return nil, err
	}
	return queuedResult{}, nil
}

func (t txExec) QueryContext(context.Context, string, ...any) (wsql.Rows, error) {
	return nil, errors.New("events: the outbox publisher only inserts")
}
