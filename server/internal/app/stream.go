package app

import (
	"context"
	"errors"
	"math"
)

// FeedReader reads the event feed back from durable storage (the outbox rows still retained,
// joined with the task history), for subscribers that resume the all-tasks stream from a cursor.
type FeedReader interface {
	// ReadFeed returns up to limit events of tenant after position `after`, in feed order. Only
	// events whose position is final (no transaction still running can come before them) are read.
	ReadFeed(ctx context.Context, tenant string, after FeedPosition, limit int) ([]FeedEvent, error)
}

// Streams are the event-stream use-cases: follow one task, or every task of a tenant, from a
// cursor, exactly once and in seq order per task. Safe for concurrent use.
type Streams struct {
	svc    *Service
	feed   FeedReader
	broker *Broker
}

// NewStreams builds the stream use-cases over svc's store, the feed reader and this node's broker.
func NewStreams(svc *Service, feed FeedReader, broker *Broker) *Streams {
	return &Streams{svc: svc, feed: feed, broker: broker}
}

// replayPage is how many events one history or feed read returns.
const replayPage = 500

// Stream is an accepted subscription, before and while its events are delivered.
type Stream struct {
	st     *Streams
	sub    *Subscription
	tenant string
	taskID string // "" for the all-tasks stream
	after  int64  // task stream: last seq the client has
	cursor *FeedPosition
}

// StartPosition is the feed position an all-tasks stream opened without a cursor starts after;
// transports hand it to the client first, so that it can resume even before its first event.
func (s *Stream) StartPosition() FeedPosition { return s.sub.Start() }

// Pending reports how many live events are waiting to be emitted; a transport may hold back a
// flush while more follow.
func (s *Stream) Pending() int { return len(s.sub.ch) }

// Close releases the subscription; Run closes it too.
func (s *Stream) Close() { s.sub.Close() }

// OpenTaskStream accepts a subscription to one task's events with seq > after. Unknown tasks and
// tasks of another tenant are ErrNotFound; too many subscribers are rate_limited.
func (st *Streams) OpenTaskStream(ctx context.Context, actor Actor, taskID string, after int64) (*Stream, error) {
	if after < 0 {
		return nil, Errorf(CodeInvalidRequest, "after must not be negative")
	}
	if _, err := st.svc.store.GetTask(ctx, actor.Tenant, taskID); err != nil {
		return nil, err
	}
	sub, err := st.broker.Subscribe(actor.Tenant, taskID)
	if err != nil {
		return nil, err
	}
	return &Stream{st: st, sub: sub, tenant: actor.Tenant, taskID: taskID, after: after}, nil
}

// OpenAllStream accepts a subscription to every event of the actor's tenant after cursor, or,
// when cursor is nil, to the events published from now on.
func (st *Streams) OpenAllStream(ctx context.Context, actor Actor, cursor *FeedPosition) (*Stream, error) {
	sub, err := st.broker.Subscribe(actor.Tenant, "")
	if err != nil {
		return nil, err
	}
	return &Stream{st: st, sub: sub, tenant: actor.Tenant, cursor: cursor}, nil
}

// Run delivers the stream's events to emit, in order and each once, until ctx ends, emit fails,
// or the subscription is cut (ErrSubscriberTooSlow, ErrFeedClosed). It registers the live
// subscription before reading history, so that nothing committed in between is missed, and drops
// live events the replay already delivered.
func (s *Stream) Run(ctx context.Context, emit func(FeedEvent) error) error {
	defer s.sub.Close()
	if s.taskID != "" {
		return s.runTask(ctx, emit)
	}
	return s.runAll(ctx, emit)
}

func (s *Stream) runTask(ctx context.Context, emit func(FeedEvent) error) error {
	last := s.after
	if err := s.fill(ctx, &last, math.MaxInt64, emit); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-s.sub.C():
			if !ok {
				return s.ended()
			}
			if e.Seq <= last {
				continue // delivered by the replay
			}
			if e.Seq > last+1 {
				// Not expected (the feed keeps each task's seq order), but never skip: the history
				// is the source of truth and the missing events are committed.
				if err := s.fill(ctx, &last, e.Seq-1, emit); err != nil {
					return err
				}
			}
			if err := emit(e); err != nil {
				return err
			}
			last = e.Seq
		}
	}
}

// fill emits the task's history after *last up to seq upTo (inclusive), advancing *last.
func (s *Stream) fill(ctx context.Context, last *int64, upTo int64, emit func(FeedEvent) error) error {
	for *last < upTo {
		evs, err := s.st.svc.store.ListEvents(ctx, s.tenant, s.taskID, *last, replayPage)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Seq > upTo {
				return nil
			}
			if err := emit(FeedEvent{Event: e}); err != nil {
				return err
			}
			*last = e.Seq
		}
		if len(evs) < replayPage {
			return nil
		}
	}
	return nil
}

func (s *Stream) runAll(ctx context.Context, emit func(FeedEvent) error) error {
	last := s.sub.Start()
	if s.cursor != nil {
		last = *s.cursor
		for {
			evs, err := s.st.feed.ReadFeed(ctx, s.tenant, last, replayPage)
			if err != nil {
				return err
			}
			for _, e := range evs {
				if err := emit(e); err != nil {
					return err
				}
				last = e.Pos
			}
			if len(evs) < replayPage {
				break
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-s.sub.C():
			if !ok {
				return s.ended()
			}
			if !last.Less(e.Pos) {
				continue // delivered by the replay
			}
			if err := emit(e); err != nil {
				return err
			}
			last = e.Pos
		}
	}
}

func (s *Stream) ended() error {
	if err := s.sub.Err(); err != nil {
		return err
	}
	return errors.New("subscription closed")
}
