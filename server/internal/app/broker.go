package app

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FeedPosition is a point in the event feed: the order in which every node's relay reads the
// outbox (see migrations/0002_event_delivery.sql). Positions are totally ordered, never decrease
// within a task, and each event has its own (XID and Offset name its outbox message, Seq the event).
type FeedPosition struct {
	XID    uint64
	Offset int64
	Seq    int64
}

// Less reports whether p comes before q in the feed.
func (p FeedPosition) Less(q FeedPosition) bool {
	if p.XID != q.XID {
		return p.XID < q.XID
	}
	if p.Offset != q.Offset {
		return p.Offset < q.Offset
	}
	return p.Seq < q.Seq
}

// IsZero reports whether p is the start of the feed.
func (p FeedPosition) IsZero() bool { return p == FeedPosition{} }

// cursorPrefix versions the cursor format so that a later change can still read old cursors.
const cursorPrefix = "c1."

// Cursor renders p as the opaque resume cursor of the all-tasks stream.
func (p FeedPosition) Cursor() string {
	return cursorPrefix + strconv.FormatUint(p.XID, 36) + "." + strconv.FormatInt(p.Offset, 36) + "." + strconv.FormatInt(p.Seq, 36)
}

// ParseCursor reads a cursor made by FeedPosition.Cursor; anything else is an invalid_request.
func ParseCursor(s string) (FeedPosition, error) {
	bad := Errorf(CodeInvalidRequest, "the stream cursor is not one this server issued")
	rest, ok := strings.CutPrefix(s, cursorPrefix)
	if !ok {
		return FeedPosition{}, bad
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return FeedPosition{}, bad
	}
	x, err1 := strconv.ParseUint(parts[0], 36, 64)
	o, err2 := strconv.ParseInt(parts[1], 36, 64)
	q, err3 := strconv.ParseInt(parts[2], 36, 64)
	if err1 != nil || err2 != nil || err3 != nil || o < 0 || q < 0 {
		return FeedPosition{}, bad
	}
	p := FeedPosition{XID: x, Offset: o, Seq: q}
	if p.Cursor() != s {
		return FeedPosition{}, bad // not as issued: a sign, a leading zero, an upper-case digit
	}
	return p, nil
}

// FeedEvent is an event with its position in the feed.
type FeedEvent struct {
	Event
	Pos FeedPosition
}

// Why a subscription ended, other than its owner closing it.
var (
	// ErrSubscriberTooSlow: the subscriber's buffer filled up; it must reconnect with its cursor.
	ErrSubscriberTooSlow = errors.New("subscriber too slow: its buffer of undelivered events filled up")
	// ErrFeedClosed: the server is shutting down.
	ErrFeedClosed = errors.New("event feed closed: the server is shutting down")
)

// BrokerConfig tunes a Broker.
type BrokerConfig struct {
	// Buffer is how many undelivered events one subscriber may have before it is cut (default 1024).
	Buffer int
	// MaxPerTenant caps the live subscribers of one tenant on this node (default 64); more are
	// refused with rate_limited.
	MaxPerTenant int
	// RetryAfter is what a refused subscriber is told to wait (default 5 s).
	RetryAfter time.Duration
}

func (c *BrokerConfig) setDefaults() {
	if c.Buffer <= 0 {
		c.Buffer = 1024
	}
	if c.MaxPerTenant <= 0 {
		c.MaxPerTenant = 64
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 5 * time.Second
	}
}

// Broker fans the events the relay reads out to this node's live subscribers. Publish never
// blocks: each subscriber has a bounded buffer, and a subscriber whose buffer is full is cut
// (ErrSubscriberTooSlow) so that it can neither block the relay nor other subscribers. Safe for
// concurrent use.
type Broker struct {
	cfg BrokerConfig

	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	perTen map[string]int
	head   FeedPosition // position of the last event published
	closed bool
	// subscribed is signalled (never blocking) when a subscriber registers: the relay reads less
	// often while nobody on the node follows the feed, and at once when somebody starts to.
	subscribed chan struct{}
	listener   func() // test hook: called after every Publish
}

// NewBroker returns an empty broker.
func NewBroker(cfg BrokerConfig) *Broker {
	cfg.setDefaults()
	return &Broker{cfg: cfg, subs: map[*Subscription]struct{}{}, perTen: map[string]int{}, subscribed: make(chan struct{}, 1)}
}

// Subscription is one live subscriber's view of the feed: the events of one tenant (and, when
// TaskID is set, of one task), in feed order, from its registration on.
type Subscription struct {
	b      *Broker
	tenant string
	taskID string
	ch     chan FeedEvent
	// start is the broker's head when the subscription was registered: every later event is
	// delivered to it.
	start FeedPosition

	err error // set before ch is closed
}

// C delivers the events; it is closed when the subscription ends (see Err).
func (s *Subscription) C() <-chan FeedEvent { return s.ch }

// Err tells why C was closed: ErrSubscriberTooSlow, ErrFeedClosed, or nil after Close.
func (s *Subscription) Err() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.err
}

// Start is the feed position the subscription started after.
func (s *Subscription) Start() FeedPosition { return s.start }

// Close unregisters the subscription. It is safe to call more than once.
func (s *Subscription) Close() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.b.removeLocked(s, nil)
}

// removeLocked ends s with err; b.mu is held.
func (b *Broker) removeLocked(s *Subscription, err error) {
	if _, ok := b.subs[s]; !ok {
		return
	}
	delete(b.subs, s)
	if b.perTen[s.tenant]--; b.perTen[s.tenant] <= 0 {
		delete(b.perTen, s.tenant)
	}
	s.err = err
	close(s.ch)
}

// Subscribe registers a live subscriber of tenant's events (of one task when taskID is not "").
func (b *Broker) Subscribe(tenant, taskID string) (*Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, &Error{Code: CodeOverloaded, Detail: "the server is shutting down; reconnect to another node or later", RetryAfter: b.cfg.RetryAfter}
	}
	if b.perTen[tenant] >= b.cfg.MaxPerTenant {
		return nil, &Error{Code: CodeRateLimited, RetryAfter: b.cfg.RetryAfter,
			Detail: fmt.Sprintf("this tenant already has %d event subscribers on this node", b.cfg.MaxPerTenant)}
	}
	s := &Subscription{b: b, tenant: tenant, taskID: taskID, ch: make(chan FeedEvent, b.cfg.Buffer), start: b.head}
	b.subs[s] = struct{}{}
	b.perTen[tenant]++
	select {
	case b.subscribed <- struct{}{}:
	default:
	}
	return s, nil
}

// Subscribed is signalled when a subscriber registers (coalesced: one signal may stand for
// several).
func (b *Broker) Subscribed() <-chan struct{} { return b.subscribed }

// Publish hands events (in feed order) to every matching subscriber without blocking.
func (b *Broker) Publish(evs []FeedEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range evs {
		if b.head.Less(e.Pos) {
			b.head = e.Pos
		}
		for s := range b.subs {
			if s.tenant != e.Tenant || (s.taskID != "" && s.taskID != e.TaskID) {
				continue
			}
			select {
			case s.ch <- e:
			default:
				b.removeLocked(s, ErrSubscriberTooSlow)
			}
		}
	}
	if b.listener != nil {
		b.listener()
	}
}

// PublishMessage hands the events of one outbox message of tenant, the last of them at last, to
// the tenant's subscribers, as Publish. decode is called only when the tenant has a subscriber on
// this node: otherwise the head moves to last and nothing is decoded. The check and the move hold
// the broker's lock, so a subscriber registered after them starts at or after last, and reads
// this message's events from the history it replays.
func (b *Broker) PublishMessage(tenant string, last FeedPosition, decode func() ([]FeedEvent, error)) error {
	b.mu.Lock()
	if b.perTen[tenant] == 0 {
		if b.head.Less(last) {
			b.head = last
		}
		if b.listener != nil {
			b.listener()
		}
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	evs, err := decode()
	if err != nil {
		return err
	}
	b.Publish(evs)
	return nil
}

// SubscribedTenants lists the tenants that have a live subscriber on this node, sorted. The relay
// reads the events of these tenants' outbox messages from the history with the messages
// themselves; a tenant subscribed later is caught by PublishMessage's decode.
func (b *Broker) SubscribedTenants() []string {
	b.mu.Lock()
	out := make([]string, 0, len(b.perTen))
	for t := range b.perTen {
		out = append(out, t)
	}
	b.mu.Unlock()
	slices.Sort(out)
	return out
}

// AdvanceHead moves the broker's head to pos if it is later: the relay calls it once at start with
// the position its consumer group starts after, so that subscribers registered before the first
// event still get a resumable start position.
func (b *Broker) AdvanceHead(pos FeedPosition) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.head.Less(pos) {
		b.head = pos
	}
}

// Close cuts every subscriber with ErrFeedClosed and refuses new ones (server shutdown).
func (b *Broker) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		b.removeLocked(s, ErrFeedClosed)
	}
}

// Subscribers reports how many live subscribers the broker has.
func (b *Broker) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}
