package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/events"
	"github.com/originweave/bap/server/internal/store"
)

// eventDelivery wires the event streams: the outbox publisher the store calls in every command
// transaction, the relay that reads committed outbox messages into this node's broker (woken by
// local commits and by other nodes' NOTIFY), and the stream use-cases the transport serves.
type eventDelivery struct {
	broker *app.Broker
	outbox *events.Outbox
	relay  *events.Relay
	// relayPool is the relay's own pool (closed by Stop).
	relayPool *pgxpool.Pool
	store     *store.Store
	nodeID    string
	log       *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newEventDelivery(ctx context.Context, pool *pgxpool.Pool, nodeID string, log *slog.Logger) (*eventDelivery, error) {
	// The relay gets a small pool of its own whose commits skip the disk flush: it writes only its
	// acked position (a lost one re-reads a few messages of a node that is gone anyway) and NOTIFYs.
	cfg := pool.Config().Copy()
	cfg.MaxConns = 4
	cfg.MinConns = 0
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	// The relay's feed read runs hundreds of times a second under load. PostgreSQL chose a custom
	// plan for each (three subqueries: 0.4-0.6 ms of planning against 0.06 ms of execution, a
	// sixth of the database's CPU per create_task); its generic plan is the same plan.
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	cfg.ConnConfig.RuntimeParams["application_name"] = "bap-relay"
	relayPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening the relay's pool: %w", err)
	}
	broker := app.NewBroker(app.BrokerConfig{})
	relay, err := events.NewRelay(events.RelayConfig{DB: wsql.BeginnerFromPgx(relayPool), Broker: broker, NodeID: nodeID, Logger: log})
	if err != nil {
		relayPool.Close()
		return nil, err
	}
	return &eventDelivery{broker: broker, outbox: events.NewOutbox(), relay: relay, relayPool: relayPool,
		store: store.New(pool), nodeID: nodeID, log: log}, nil
}

// registerMetrics exposes the live subscribers and the relayed events at /metrics.
func (e *eventDelivery) registerMetrics(reg *prometheus.Registry) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bap_stream_subscribers",
			Help: "Live event-stream subscribers on this node."},
			func() float64 { return float64(e.broker.Subscribers()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_events_relayed_total",
			Help: "Outbox messages the relay handed to this node's subscribers."},
			func() float64 { return float64(e.relay.Relayed()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bap_relay_reads_total",
			Help: "Reads of the outbox by this node's relay (one statement each)."},
			func() float64 { return float64(e.relay.Reads()) }),
	)
}

// storeOptions makes the command store write outbox messages and wake the relay on commit.
func (e *eventDelivery) storeOptions() store.Options {
	return store.Options{Outbox: e.outbox, EventsCommitted: e.relay.Wake}
}

// streams are the stream use-cases over svc.
func (e *eventDelivery) streams(svc *app.Service) *app.Streams {
	return app.NewStreams(svc, e.store, e.broker)
}

// Start starts the relay and the LISTEN for other nodes' commits.
func (e *eventDelivery) Start(ctx context.Context) error {
	if err := e.relay.Start(ctx); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		_ = e.store.Listen(lctx, e.relay.NotifyChannel(), time.Second, func(from string) {
			if from != e.nodeID {
				e.relay.Woken()
			}
		})
	}()
	return nil
}

// closeStreams ends every open stream (each subscriber is told the server is shutting down), so
// that the HTTP server's graceful shutdown does not wait for them.
func (e *eventDelivery) closeStreams() { e.broker.Close() }

// Stop stops the relay and the LISTEN.
func (e *eventDelivery) Stop() {
	e.broker.Close()
	if e.cancel != nil {
		e.cancel()
	}
	e.wg.Wait()
	e.relay.Stop()
	e.relayPool.Close()
}

// registerGroupCommitMetrics exports what st's group committer did (store.GroupCommitStats).
func registerGroupCommitMetrics(reg *prometheus.Registry, st *store.Store) {
	for _, c := range []struct {
		name, help string
		count      func(store.GroupCommitStats) int64
	}{
		{"bap_db_group_commits_total", "Transactions that committed two commands or more together (ADR 0039).",
			func(s store.GroupCommitStats) int64 { return s.Groups }},
		{"bap_db_group_committed_commands_total", "Commands carried by those transactions.",
			func(s store.GroupCommitStats) int64 { return s.Grouped }},
		{"bap_db_group_commit_failures_total", "Group transactions that failed; each of their commands then committed alone.",
			func(s store.GroupCommitStats) int64 { return s.Failed }},
		{"bap_db_group_commit_unstalled_total", "Queues sent past the in-flight limit because the transactions in flight were slow.",
			func(s store.GroupCommitStats) int64 { return s.Unstalled }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(c.count(st.GroupCommitStats())) }))
	}
}
