package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
)

// Outbox turns a command's events into outbox messages. Publish is called once per command
// transaction, just before commit, with the events the command appended (in order); it must
// write through exec only, which queues the statement in the command's transaction (so the
// messages commit or roll back with the command, and cost no extra round trip).
// events.Outbox implements it with the watermill-sql publisher.
type Outbox interface {
	Publish(ctx context.Context, exec func(ctx context.Context, sql string, args ...any) error, events []app.Event) error
}

// Options are the store's optional collaborators.
type Options struct {
	// Outbox writes the outbox messages of every command that appended events. Nil: none are
	// written (tests that do not look at streams).
	Outbox Outbox
	// EventsCommitted is called after a transaction that appended events committed (the relay's
	// wake-up). It must not block.
	EventsCommitted func()
	// Tracer records one span per transaction (InTx); nil records none.
	Tracer app.Tracer
	// GroupCommit is how many transactions that read nothing may be committing at once; the ones
	// that come meanwhile wait and commit together, as one transaction (groupcommit.go, ADR
	// 0039). 0: every transaction commits alone.
	GroupCommit int
	// GroupCommitStall is how long a command waits behind transactions in flight before its queue
	// is sent anyway, as one more transaction (0: DefaultGroupCommitStall).
	GroupCommitStall time.Duration
}

// publishEvents hands the transaction's events to the outbox.
func (s *Store) publishEvents(ctx context.Context, t *pgTx) error {
	if len(t.events) == 0 || s.opts.Outbox == nil {
		return nil
	}
	exec := func(_ context.Context, sql string, args ...any) error {
		t.queue(sql, args...)
		return nil
	}
	if err := s.opts.Outbox.Publish(ctx, exec, t.events); err != nil {
		return fmt.Errorf("publishing events to the outbox: %w", err)
	}
	return nil
}

// ReadFeed implements app.FeedReader: the retained outbox messages of tenant after `after`, whose
// position is final, expanded into their events from the task history (the source of truth).
func (s *Store) ReadFeed(ctx context.Context, tenant string, after app.FeedPosition, limit int) ([]app.FeedEvent, error) {
	xid := strconv.FormatUint(after.XID, 10)
	rows, err := s.pool.Query(ctx, `SELECT o.order_xid::text, o.order_offset, e.event_id, e.task_id, e.tenant_id, e.seq,
			e.event_type, e.occurred_at, e.actor, e.cause, coalesce(e.command_id, ''), e.data
		FROM outbox_event o
		JOIN agent_task_event e ON e.task_id = o.task_id AND e.seq BETWEEN o.seq AND o.last_seq
		WHERE o.tenant_id = $1
		  AND (o.order_xid, o.order_offset) >= ($2::text::xid8, $3)
		  AND (o.order_xid, o.order_offset, e.seq) > ($2::text::xid8, $3, $4)
		  AND o.order_xid < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY o.order_xid, o.order_offset, e.seq
		LIMIT $5`, tenant, xid, after.Offset, after.Seq, limit)
	if err != nil {
		return nil, fmt.Errorf("reading the event feed: %w", err)
	}
	defer rows.Close()
	var out []app.FeedEvent
	for rows.Next() {
		var fe app.FeedEvent
		var x string
		var data []byte
		if err := rows.Scan(&x, &fe.Pos.Offset, &fe.ID, &fe.TaskID, &fe.Tenant, &fe.Seq, &fe.Type, &fe.Time,
			&fe.Actor, &fe.Cause, &fe.CommandID, &data); err != nil {
			return nil, fmt.Errorf("reading the event feed: %w", err)
		}
		if fe.Pos.XID, err = strconv.ParseUint(x, 10, 64); err != nil {
			return nil, fmt.Errorf("reading the event feed: position %q: %w", x, err)
		}
		fe.Pos.Seq = fe.Seq
		fe.Time = fe.Time.UTC()
		if err := json.Unmarshal(data, &fe.Data); err != nil {
			return nil, fmt.Errorf("decoding event %s data: %w", fe.ID, err)
		}
		out = append(out, fe)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the event feed: %w", err)
	}
	return out, nil
}

var _ app.FeedReader = (*Store)(nil)

// Listen holds one connection of its own LISTENing on channel and calls fn with the payload of
// every notification until ctx ends. When the connection is lost it reconnects after retry and
// calls fn("") (notifications may have been missed meanwhile). It returns ctx's error.
func (s *Store) Listen(ctx context.Context, channel string, retry time.Duration, fn func(payload string)) error {
	for {
		err := s.listenOnce(ctx, channel, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = err // the caller's fallback poll covers the gap; the next attempt logs nothing new
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
		fn("")
	}
}

func (s *Store) listenOnce(ctx context.Context, channel string, fn func(payload string)) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection leaves the pool for good: a LISTENing session must not serve other queries.
	conn := pc.Hijack()
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return ctx.Err()
			}
			return err
		}
		fn(n.Payload)
	}
}
