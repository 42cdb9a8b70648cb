package events

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Topic is the watermill topic of the outbox. Schema ignores it: there is one outbox table.
const Topic = "outbox_event"

// Metadata keys of an outbox message.
const (
	metaTenant      = "tenant_id"
	metaTask        = "task_id"
	metaSeq         = "seq"
	metaLastSeq     = "last_seq"
	metaOrderXID    = "order_xid"    // set when read back: the message's feed position
	metaOrderOffset = "order_offset" // set when read back
)

// Schema is the watermill-sql SchemaAdapter of the `outbox_event` table: one row per (command,
// task) naming that command's range of the task's events, read back in feed order (order_xid,
// order_offset, seq) and only once the position is final (below the snapshot's xmin). The events
// themselves are read from the task's history (ADR 0040): a read returns them as the message's
// payload (JSON, historyEventsSQL) for the messages of the tenants Subscribed lists, and an empty
// payload for the others.
type Schema struct {
	// BatchSize is how many messages one read returns (default 100).
	BatchSize int
	// Subscribed lists the tenants whose messages a read returns with their events (the relay's:
	// the tenants with a live subscriber on this node). Nil: none.
	Subscribed func() []string
	// pos, when set (the relay's), is the position the relay has handed over, read from memory so
	// that the acked position need not be written by every read (see Offsets).
	pos *position
}

// position is a relay's feed position, shared by its Schema and Offsets. Safe for concurrent use.
type position struct {
	mu        sync.Mutex
	set       bool
	xid       string
	offset    int64
	seq       int64
	persisted time.Time // when the position was last written to outbox_consumer_offset
	// pending: the last read saw committed messages that an older transaction still running
	// keeps unreadable (see SelectQuery).
	pending bool
}

func (p *position) setPending(v bool) {
	p.mu.Lock()
	p.pending = v
	p.mu.Unlock()
}

func (p *position) isPending() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending
}

func (p *position) get() (xid string, offset, seq int64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.xid, p.offset, p.seq, p.set
}

var _ wsql.SchemaAdapter = Schema{}

// InsertQuery implements wsql.SchemaAdapter. Each message must carry the metadata tenant_id,
// task_id, seq and last_seq, which become the row's columns; its payload and other metadata are
// not written (the events are in the history; migration 0029 refuses a payload). transaction_id, the offset and the feed position
// are filled in by the table's defaults and trigger.
func (s Schema) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	if len(params.Msgs) == 0 {
		return wsql.Query{}, fmt.Errorf("no messages to insert")
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO outbox_event (uuid, tenant_id, task_id, seq, last_seq) VALUES `)
	args := make([]any, 0, 5*len(params.Msgs))
	for i, m := range params.Msgs {
		seq, err1 := strconv.ParseInt(m.Metadata.Get(metaSeq), 10, 64)
		last, err2 := strconv.ParseInt(m.Metadata.Get(metaLastSeq), 10, 64)
		tenant, task := m.Metadata.Get(metaTenant), m.Metadata.Get(metaTask)
		if err1 != nil || err2 != nil || tenant == "" || task == "" {
			return wsql.Query{}, fmt.Errorf("outbox message %s lacks tenant_id, task_id, seq or last_seq metadata", m.UUID)
		}
		if i > 0 {
			b.WriteString(", ")
		}
		n := len(args)
		fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d)", n+1, n+2, n+3, n+4, n+5)
		args = append(args, m.UUID, tenant, task, seq, last)
	}
	return wsql.Query{Query: b.String(), Args: args}, nil
}

// historyEventsSQL reads the events of one outbox message from the task's history, in seq order,
// as the JSON array decode reads ('[]' when there are none). Its placeholders are the message's
// tenant, task, seq and last_seq, in that order.
const historyEventsSQL = `SELECT coalesce(json_agg(json_build_object('event_id', e.event_id, 'task_id', e.task_id,
		'tenant_id', e.tenant_id, 'seq', e.seq, 'type', e.event_type, 'time', e.occurred_at, 'actor', e.actor,
		'cause', e.cause, 'command_id', e.command_id, 'data', e.data) ORDER BY e.seq), '[]')
	FROM agent_task_event e WHERE e.tenant_id = %s AND e.task_id = %s AND e.seq BETWEEN %s AND %s`

// SelectQuery implements wsql.SchemaAdapter: the next messages after the consumer group's
// position, in feed order, whose position no running transaction can still precede.
func (s Schema) SelectQuery(params wsql.SelectQueryParams) (wsql.Query, error) {
	next, err := params.OffsetsAdapter.NextOffsetQuery(wsql.NextOffsetQueryParams{Topic: params.Topic, ConsumerGroup: params.ConsumerGroup})
	if err != nil {
		return wsql.Query{}, err
	}
	batch := s.BatchSize
	if batch <= 0 {
		batch = 100
	}
	var tenants []string // nil is NULL: no row's events are read
	if s.Subscribed != nil {
		tenants = s.Subscribed()
	}
	args := append(append([]any(nil), next.Args...), tenants)
	subscribed := len(args)
	after := ""
	if s.pos != nil {
		if xid, off, seq, ok := s.pos.get(); ok {
			n := len(args)
			after = fmt.Sprintf(" AND (order_xid, order_offset, seq) > ($%d::text::xid8, $%d, $%d)", n+1, n+2, n+3)
			args = append(args, xid, off, seq)
		}
	}
	// One statement, one snapshot: the batch, and whether committed messages wait behind a
	// transaction that is still running (pending; then the relay reads again soon, since that
	// transaction may never wake it). With no readable message the statement returns one row of
	// NULLs carrying the flag (UnmarshalMessage answers sql.ErrNoRows for it: nothing to read).
	q := `WITH last_processed AS (` + next.Query + `)
		SELECT b."offset", b.order_xid::text, b.order_offset, b.tenant_id, b.task_id, b.seq, b.last_seq, b.uuid,
			CASE WHEN b.tenant_id = ANY($` + strconv.Itoa(subscribed) + `::text[]) THEN (` +
		fmt.Sprintf(historyEventsSQL, "b.tenant_id", "b.task_id", "b.seq", "b.last_seq") + `)::text END,
			p.pending
		FROM (SELECT EXISTS (SELECT 1 FROM outbox_event
		                     WHERE order_xid >= pg_snapshot_xmin(pg_current_snapshot())) AS pending) AS p
		LEFT JOIN LATERAL (
			SELECT "offset", order_xid, order_offset, tenant_id, task_id, seq, last_seq, uuid FROM outbox_event
			WHERE (order_xid, order_offset, seq) > (SELECT order_xid, order_offset, seq FROM last_processed)` + after + `
			  AND order_xid < pg_snapshot_xmin(pg_current_snapshot())
			ORDER BY order_xid, order_offset, seq
			LIMIT ` + strconv.Itoa(batch) + `) AS b ON true
		ORDER BY b.order_xid, b.order_offset, b.seq`
	return wsql.Query{Query: q, Args: args}, nil
}

// UnmarshalMessage implements wsql.SchemaAdapter. The message's metadata is its row's tenant,
// task, seq range and feed position (order_xid, order_offset), which also go to the row's
// ExtraData for the ack; its payload is the events the read returned, or empty.
func (s Schema) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	var offset, orderOffset, seq, lastSeq *int64
	var xid, tenant, task, uuid, events *string
	var pending bool
	if err := params.Row.Scan(&offset, &xid, &orderOffset, &tenant, &task, &seq, &lastSeq, &uuid, &events, &pending); err != nil {
		return wsql.Row{}, fmt.Errorf("scanning an outbox row: %w", err)
	}
	if s.pos != nil {
		s.pos.setPending(pending)
	}
	if offset == nil || xid == nil || orderOffset == nil || tenant == nil || task == nil || seq == nil || lastSeq == nil || uuid == nil {
		return wsql.Row{}, sql.ErrNoRows // the flag row: nothing readable
	}
	var payload []byte
	if events != nil {
		payload = []byte(*events)
	}
	msg := message.NewMessage(*uuid, payload)
	msg.Metadata = message.Metadata{
		metaTenant: *tenant, metaTask: *task,
		metaSeq: strconv.FormatInt(*seq, 10), metaLastSeq: strconv.FormatInt(*lastSeq, 10),
		metaOrderXID: *xid, metaOrderOffset: strconv.FormatInt(*orderOffset, 10),
	}
	return wsql.Row{
		Offset: *offset, UUID: []byte(*uuid), Payload: payload, Msg: msg,
		ExtraData: map[string]any{metaOrderXID: *xid, metaOrderOffset: *orderOffset, metaLastSeq: *lastSeq},
	}, nil
}

// SchemaInitializingQueries implements wsql.SchemaAdapter: none, the migrations own the schema.
func (s Schema) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// SubscribeIsolationLevel implements wsql.SchemaAdapter.
func (s Schema) SubscribeIsolationLevel() sql.IsolationLevel { return sql.LevelRepeatableRead }

// Offsets is the watermill-sql OffsetsAdapter of `outbox_consumer_offset`: one row per consumer
// group holding the feed position acked last. Each group has exactly one subscriber (a node's
// relay), so reads take no row lock; that keeps the relay's read transaction without an xid, so
// it never holds back other nodes' view of the feed.
//
// With a shared position (the relay's), the acked position is kept in memory and written at most
// once per persistEvery: a read transaction that writes nothing takes no xid, and a read that held
// an xid would delay every other reader of the feed (the xmin rule) for as long as it ran. The
// written position only serves pruning; a relay never resumes a group after a restart.
type Offsets struct {
	pos          *position
	persistEvery time.Duration
}

var _ wsql.OffsetsAdapter = Offsets{}

// AckMessageQuery implements wsql.OffsetsAdapter.
func (o Offsets) AckMessageQuery(params wsql.AckMessageQueryParams) (wsql.Query, error) {
	x := params.LastRow.ExtraData
	if o.pos != nil {
		xid, _ := x[metaOrderXID].(string)
		off, _ := x[metaOrderOffset].(int64)
		seq, _ := x[metaLastSeq].(int64)
		o.pos.mu.Lock()
		o.pos.xid, o.pos.offset, o.pos.seq, o.pos.set = xid, off, seq, true
		skip := time.Since(o.pos.persisted) < o.persistEvery
		if !skip {
			o.pos.persisted = time.Now()
		}
		o.pos.mu.Unlock()
		if skip {
			return wsql.Query{}, nil // nothing to write (the relay's reads skip an empty statement)
		}
	}
	return wsql.Query{
		Query: `UPDATE outbox_consumer_offset SET order_xid = $1::text::xid8, order_offset = $2, seq = $3, updated_at = now()
			WHERE consumer_group = $4`,
		Args: []any{x[metaOrderXID], x[metaOrderOffset], x[metaLastSeq], params.ConsumerGroup},
	}, nil
}

// ConsumedMessageQuery implements wsql.OffsetsAdapter: nothing to record per message.
func (Offsets) ConsumedMessageQuery(wsql.ConsumedMessageQueryParams) (wsql.Query, error) {
	return wsql.Query{}, nil
}

// NextOffsetQuery implements wsql.OffsetsAdapter.
func (Offsets) NextOffsetQuery(params wsql.NextOffsetQueryParams) (wsql.Query, error) {
	return wsql.Query{
		Query: `SELECT order_xid, order_offset, seq FROM outbox_consumer_offset WHERE consumer_group = $1`,
		Args:  []any{params.ConsumerGroup},
	}, nil
}

// SchemaInitializingQueries implements wsql.OffsetsAdapter: none, the migrations own the schema.
func (Offsets) SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// BeforeSubscribingQueries implements wsql.OffsetsAdapter: a new group starts at the head of the
// feed (the last final position), not at its beginning; streams replay older events themselves.
func (Offsets) BeforeSubscribingQueries(params wsql.BeforeSubscribingQueriesParams) ([]wsql.Query, error) {
	return []wsql.Query{{
		Query: `INSERT INTO outbox_consumer_offset (consumer_group, order_xid, order_offset, seq)
			SELECT $1, coalesce(h.order_xid, '0'::xid8), coalesce(h.order_offset, 0), coalesce(h.last_seq, 0)
			FROM (SELECT 1) AS one LEFT JOIN LATERAL (
				SELECT order_xid, order_offset, last_seq FROM outbox_event
				WHERE order_xid < pg_snapshot_xmin(pg_current_snapshot())
				ORDER BY order_xid DESC, order_offset DESC, seq DESC LIMIT 1) AS h ON true
			ON CONFLICT (consumer_group) DO NOTHING`,
		Args: []any{params.ConsumerGroup},
	}}, nil
}
