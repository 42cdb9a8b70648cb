package events

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/originweave/bap/server/internal/app"
)

// RelayConfig configures a Relay.
type RelayConfig struct {
	// DB opens the relay's read transactions (wsql.BeginnerFromPgx(pool) in the daemon). The relay's
	// writes (its acked position, NOTIFY) need no disk flush: a pool with synchronous_commit off
	// saves a flush per batch.
	DB wsql.Beginner
	// Broker receives every relayed event.
	Broker *app.Broker
	// NodeID names this node's consumer group ("relay:<NodeID>"); one relay per node.
	NodeID string
	// NotifyChannel is the PostgreSQL channel that tells other nodes' relays to read now (default
	// "bap_outbox"); the daemon LISTENs on it and calls Woken.
	NotifyChannel string
	// IdlePoll is how long the relay waits for a wake-up before it reads anyway (default 1 s).
	IdlePoll time.Duration
	// Retention is how long outbox messages stay readable for all-tasks cursors (default 24 h).
	Retention time.Duration
	// PruneInterval is the period of outbox and consumer-group pruning (default 1 min).
	PruneInterval time.Duration
	// StaleAfter is how old a node's heartbeat may be before its consumer group is dropped
	// (default 10 min).
	StaleAfter time.Duration
	// Logger receives the relay's logs (default slog.Default()).
	Logger *slog.Logger
}

func (c *RelayConfig) setDefaults() {
	if c.NotifyChannel == "" {
		c.NotifyChannel = "bap_outbox"
	}
	if c.IdlePoll <= 0 {
		c.IdlePoll = time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.PruneInterval <= 0 {
		c.PruneInterval = time.Minute
	}
	if c.StaleAfter <= 0 {
		c.StaleAfter = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a configuration the relay cannot run with.
func (c *RelayConfig) Validate() error {
	if c.DB == nil || c.Broker == nil || c.NodeID == "" {
		return errors.New("events: RelayConfig needs DB, Broker and NodeID")
	}
	return nil
}

// Relay moves committed outbox messages to this node's Broker: a watermill Router handler over a
// watermill-sql subscriber of the outbox, in feed order, acknowledging its position in
// outbox_consumer_offset. It reads when woken — by a local commit (Wake) or another node's NOTIFY
// (Woken) — re-reads within milliseconds while committed messages are pending behind an older
// transaction that still runs, and otherwise polls every IdlePoll (in case a wake-up was missed). Start/Stop follow the daemon's service contract.
type Relay struct {
	cfg    RelayConfig
	group  string
	wake   chan struct{}
	notify chan struct{}
	stop   chan struct{}

	// pos is the position handed to the broker (written to the database at most once a second).
	pos *position
	// handled counts the messages of the current read, so that the waker knows a full batch.
	handled atomic.Int64
	relayed atomic.Int64
	reads   atomic.Int64

	router *message.Router
	sub    *wsql.Subscriber
	wg     sync.WaitGroup
	once   sync.Once
}

// NewRelay builds a relay; Start runs it.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Relay{cfg: cfg, group: "relay:" + cfg.NodeID, wake: make(chan struct{}, 1), notify: make(chan struct{}, 1),
		stop: make(chan struct{}), pos: &position{}}, nil
}

// Wake tells the relay that a local transaction committed outbox messages: it reads at once and
// tells the other nodes. It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// Woken tells the relay that another node committed outbox messages. It never blocks.
func (r *Relay) Woken() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// NotifyChannel is the channel the daemon must LISTEN on for Woken.
func (r *Relay) NotifyChannel() string { return r.cfg.NotifyChannel }

// Start subscribes the relay's consumer group (at the feed's head) and runs it until Stop. It
// returns once the relay reads.
func (r *Relay) Start(ctx context.Context) error {
	wlog := watermill.NewSlogLoggerWithLevelMapping(r.cfg.Logger.With("component", "relay"),
		map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	pos := r.pos
	sub, err := wsql.NewSubscriber(statementReads{r.cfg.DB}, wsql.SubscriberConfig{
		ConsumerGroup:  r.group,
		SchemaAdapter:  Schema{BatchSize: batchSize, pos: pos, Subscribed: r.cfg.Broker.SubscribedTenants},
		OffsetsAdapter: Offsets{pos: pos, persistEvery: persistEvery},
		BackoffManager: &waker{r: r},
		PollInterval:   r.cfg.IdlePoll,
		ResendInterval: 100 * time.Millisecond,
	}, wlog)
	if err != nil {
		return fmt.Errorf("events: subscriber: %w", err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, wlog)
	if err != nil {
		return fmt.Errorf("events: router: %w", err)
	}
	router.AddConsumerHandler("outbox_relay", Topic, sub, r.handle)
	r.sub, r.router = sub, router

	runCtx := context.WithoutCancel(ctx)
	errc := make(chan error, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		errc <- router.Run(runCtx)
	}()
	select {
	case <-router.Running():
	case err := <-errc:
		return fmt.Errorf("events: relay did not start: %w", err)
	case <-ctx.Done():
		_ = router.Close()
		return ctx.Err()
	}
	head, err := r.position(ctx)
	if err != nil {
		r.Stop()
		return err
	}
	r.cfg.Broker.AdvanceHead(head)
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.notifier(runCtx) }()
	go func() { defer r.wg.Done(); r.pruner(runCtx) }()
	return nil
}

// Stop ends the relay and waits for it.
func (r *Relay) Stop() {
	r.once.Do(func() {
		close(r.stop)
		if r.router != nil {
			_ = r.router.Close()
		}
		if r.sub != nil {
			_ = r.sub.Close()
		}
		r.wg.Wait()
	})
}

// handle publishes one outbox message's events to the broker. They are read only when the
// message's tenant has a subscriber here: with the message when the tenant had one as the read
// began (the payload), else from the history now. A message that cannot be read is logged and
// skipped: it must not stop the feed for everyone (the history still holds its events, and
// subscribers fill gaps from it).
func (r *Relay) handle(m *message.Message) error {
	tenant, last, ok := lastPosition(m)
	if !ok {
		r.cfg.Logger.Error("outbox message without a feed position skipped", "uuid", m.UUID)
		return nil
	}
	err := r.cfg.Broker.PublishMessage(tenant, last, func() ([]app.FeedEvent, error) {
		events := m.Payload
		if len(events) == 0 { // the tenant subscribed after the read began
			var err error
			if events, err = r.historyEvents(m.Context(), m); err != nil {
				return nil, err
			}
		}
		return decode(m, events)
	})
	if err != nil {
		r.cfg.Logger.Error("unreadable outbox message skipped", "uuid", m.UUID, "err", err)
		return nil
	}
	r.handled.Add(1)
	r.relayed.Add(1)
	return nil
}

// historyEvents reads the events m names from the task's history.
func (r *Relay) historyEvents(ctx context.Context, m *message.Message) ([]byte, error) {
	rows, err := r.cfg.DB.QueryContext(ctx, fmt.Sprintf(historyEventsSQL, "$1", "$2", "$3::bigint", "$4::bigint"),
		m.Metadata.Get(metaTenant), m.Metadata.Get(metaTask), m.Metadata.Get(metaSeq), m.Metadata.Get(metaLastSeq))
	if err != nil {
		return nil, fmt.Errorf("reading the events of message %s: %w", m.UUID, err)
	}
	var events []byte
	if rows.Next() {
		err = rows.Scan(&events)
	}
	if cerr := rows.Close(); err == nil {
		err = cerr // the pgx adapter's Close reports the rows' error
	}
	if err == nil && len(events) == 0 {
		err = errors.New("no result")
	}
	if err != nil {
		return nil, fmt.Errorf("reading the events of message %s: %w", m.UUID, err)
	}
	return events, nil
}

// Relayed reports how many outbox messages the relay has handed to the broker.
func (r *Relay) Relayed() int64 { return r.relayed.Load() }

// Reads reports how many reads of the outbox the relay has made.
func (r *Relay) Reads() int64 { return r.reads.Load() }

// Pending reports whether the relay's last read saw committed messages that a transaction still
// running (older than theirs) keeps unreadable; the relay then reads again within milliseconds.
func (r *Relay) Pending() bool { return r.pos.isPending() }

// position reads the consumer group's acked position.
func (r *Relay) position(ctx context.Context) (app.FeedPosition, error) {
	rows, err := r.cfg.DB.QueryContext(ctx, `SELECT order_xid::text, order_offset, seq FROM outbox_consumer_offset WHERE consumer_group = $1`, r.group)
	if err != nil {
		return app.FeedPosition{}, fmt.Errorf("events: reading the relay's position: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var p app.FeedPosition
	var x string
	if !rows.Next() {
		return p, errors.New("events: the relay's consumer group has no position")
	}
	if err := rows.Scan(&x, &p.Offset, &p.Seq); err != nil {
		return p, fmt.Errorf("events: reading the relay's position: %w", err)
	}
	p.XID, err = strconv.ParseUint(x, 10, 64)
	return p, err
}

// notifier sends one NOTIFY per burst of local commits (at most one per notifyGap), outside the
// commands' transactions (a NOTIFY inside them would serialise every commit on PostgreSQL's notify
// lock), and only while other nodes are alive: a single node never pays for it.
func (r *Relay) notifier(ctx context.Context) {
	peers, checked := false, time.Time{}
	for {
		select {
		case <-r.stop:
			return
		case <-r.notify:
		}
		if time.Since(checked) > peerCheck {
			n, err := r.livePeers(ctx)
			peers, checked = err != nil || n > 0, time.Now() // unsure: notify
		}
		if !peers {
			continue
		}
		if err := r.sendNotify(ctx); err != nil {
			r.cfg.Logger.Warn("outbox notify failed; other nodes fall back to polling", "err", err)
		}
		select {
		case <-r.stop:
			return
		case <-time.After(notifyGap):
		}
	}
}

const (
	// notifyGap is the least time between two NOTIFYs of one node.
	notifyGap = 5 * time.Millisecond
	// peerCheck is how often the notifier looks for other live nodes.
	peerCheck = 5 * time.Second
)

// livePeers counts the other nodes whose heartbeat is recent.
func (r *Relay) livePeers(ctx context.Context) (int, error) {
	rows, err := r.cfg.DB.QueryContext(ctx, `SELECT count(*) FROM runtime_node
		WHERE node_id <> $1 AND stopped_at IS NULL AND heartbeat_at > now() - interval '1 minute'`, r.cfg.NodeID)
	if err != nil {
		return 0, err
	}
	defer func() { _ = rows.Close() }()
	var n int
	if rows.Next() {
		err = rows.Scan(&n)
	}
	return n, err
}

func (r *Relay) sendNotify(ctx context.Context) error {
	tx, err := r.cfg.DB.BeginTx(ctx, &sql.TxOptions{})
	if err != nil {
		return err
	}
	// The notification carries no data worth a disk flush: a lost one only costs a poll.
	if _, err := tx.ExecContext(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
		_ = tx.Rollback()
		return err
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, r.cfg.NotifyChannel, r.cfg.NodeID); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// pruner drops the consumer groups of stopped or long-silent nodes, then outbox messages older
// than the retention that every remaining group has read.
func (r *Relay) pruner(ctx context.Context) {
	t := time.NewTicker(r.cfg.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if n, err := r.Prune(ctx); err != nil {
			r.cfg.Logger.Warn("outbox pruning failed", "err", err)
		} else if n > 0 {
			r.cfg.Logger.Info("outbox messages pruned", "count", n)
		}
	}
}

// Prune runs one round of pruning and reports how many outbox messages it deleted. It first
// writes this relay's current position, so that what it has read can go.
func (r *Relay) Prune(ctx context.Context) (int64, error) {
	if xid, off, seq, ok := r.pos.get(); ok {
		if _, err := r.cfg.DB.ExecContext(ctx, `UPDATE outbox_consumer_offset SET order_xid = $1::text::xid8, order_offset = $2,
			seq = $3, updated_at = now() WHERE consumer_group = $4 AND (order_xid, order_offset, seq) < ($1::text::xid8, $2, $3)`,
			xid, off, seq, r.group); err != nil {
			return 0, fmt.Errorf("writing the relay's position: %w", err)
		}
	}
	stale := strconv.FormatInt(int64(r.cfg.StaleAfter/time.Millisecond), 10) + " milliseconds"
	if _, err := r.cfg.DB.ExecContext(ctx, `DELETE FROM outbox_consumer_offset c
		WHERE c.consumer_group <> $1 AND c.consumer_group LIKE 'relay:%'
		  AND NOT EXISTS (SELECT 1 FROM runtime_node n WHERE 'relay:' || n.node_id = c.consumer_group
		                  AND n.stopped_at IS NULL AND n.heartbeat_at > now() - $2::text::interval)
		  AND c.updated_at < now() - $2::text::interval`, r.group, stale); err != nil {
		return 0, fmt.Errorf("dropping consumer groups of dead nodes: %w", err)
	}
	keep := strconv.FormatInt(int64(r.cfg.Retention/time.Millisecond), 10) + " milliseconds"
	var total int64
	for {
		res, err := r.cfg.DB.ExecContext(ctx, `DELETE FROM outbox_event WHERE "offset" IN (
			SELECT o."offset" FROM outbox_event o,
				(SELECT order_xid, order_offset, seq FROM outbox_consumer_offset
				 ORDER BY order_xid, order_offset, seq LIMIT 1) AS slowest
			WHERE o.created_at < now() - $1::text::interval
			  AND (o.order_xid, o.order_offset, o.last_seq) <= (slowest.order_xid, slowest.order_offset, slowest.seq)
			LIMIT 5000)`, keep)
		if err != nil {
			return total, fmt.Errorf("pruning the outbox: %w", err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < 5000 {
			return total, nil
		}
	}
}

// waker is the subscriber's BackoffManager: instead of sleeping a poll interval when there was
// nothing to read, it waits for a wake-up. Each read also tells whether committed messages wait
// behind an older transaction that still runs (position.pending): those are read again after
// short pauses (1, 2, 4, 8, then 16 ms; 250 ms once they have waited a second), since that
// transaction may hold no events and never wake the relay. With nothing pending the relay waits
// for the next wake-up, and polls every IdlePoll only in case a wake-up was missed (a NOTIFY
// lost with its connection): a wake-up whose messages an earlier read already took costs one
// read, not a series of retries.
type waker struct {
	r            *Relay
	retry        int       // index into retryPauses while messages are pending
	pendingSince time.Time // when the current pending spell began (zero: nothing pending)
	lastRead     time.Time // when the last read after a wait started
}

var retryPauses = []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 8 * time.Millisecond, 16 * time.Millisecond}

const (
	// batchSize is how many outbox messages one read takes.
	batchSize = 100
	// pendingPoll is the pause between reads once messages have been pending for pendingFast.
	pendingPoll = 250 * time.Millisecond
	pendingFast = time.Second
	// readGap is the least time between two reads caused by wake-ups.
	readGap = 2 * time.Millisecond
	// unfollowedReadGap replaces readGap, and is the least pause while messages are pending,
	// when nobody on the node follows the feed: a read then only moves the broker's head, and a
	// read every few milliseconds cost about a twentieth of the CPU a create_task takes. A
	// subscriber's arrival makes the relay read at once (Broker.Subscribed).
	unfollowedReadGap = 25 * time.Millisecond
	// persistEvery is how often the relay writes its position (for pruning).
	persistEvery = time.Second
)

// gap is the least time between two reads caused by wake-ups: readGap while somebody on the node
// follows the feed, unfollowedReadGap otherwise (pause slows the pending retries to the latter
// too, but keeps their own shorter steps while somebody follows).
func (w *waker) gap() time.Duration {
	if w.r.cfg.Broker.Subscribers() > 0 {
		return readGap
	}
	return unfollowedReadGap
}

// pause is how long to wait for a wake-up before reading again.
func (w *waker) pause(now time.Time) time.Duration {
	if !w.r.pos.isPending() {
		w.pendingSince, w.retry = time.Time{}, 0
		return w.r.cfg.IdlePoll
	}
	if w.pendingSince.IsZero() {
		w.pendingSince = now
	}
	var d time.Duration
	switch {
	case now.Sub(w.pendingSince) >= pendingFast:
		d = pendingPoll
	case w.retry < len(retryPauses):
		d = retryPauses[w.retry]
	default:
		d = retryPauses[len(retryPauses)-1]
	}
	if w.r.cfg.Broker.Subscribers() == 0 {
		d = max(d, unfollowedReadGap)
	}
	return min(d, w.r.cfg.IdlePoll)
}

// HandleError implements wsql.BackoffManager. It blocks (rather than returning a pause) so that a
// wake-up can cut the wait short; it returns at once when the relay stops.
func (w *waker) HandleError(logger watermill.LoggerAdapter, noMsg bool, err error) time.Duration {
	w.r.reads.Add(1)
	if err != nil {
		select {
		case <-w.r.stop:
			return 0
		default:
		}
		logger.Error("reading the outbox failed", err, nil)
		return pendingPoll
	}
	if !noMsg && w.r.handled.Swap(0) >= batchSize {
		return 0 // a full batch: more may be waiting
	}
	t := time.NewTimer(w.pause(time.Now()))
	defer t.Stop()
	select {
	case <-w.r.wake:
		w.retry = 0
		// Under a stream of commits, gather a few into one read: at most one read per gap. A
		// subscriber's arrival cuts the wait short.
		if d := w.gap() - time.Since(w.lastRead); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-w.r.cfg.Broker.Subscribed():
			case <-w.r.stop:
			}
		}
	case <-w.r.cfg.Broker.Subscribed():
		w.retry = 0
	case <-t.C:
		w.retry++
	case <-w.r.stop:
	}
	w.lastRead = time.Now()
	return 0
}
