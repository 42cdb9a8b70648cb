package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/events"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/originweave/bap/server/internal/store"
)

// wireCount counts what a command costs on the wire: round trips (a client write after the
// server's answer), statements (every query pgx sends, BEGIN and COMMIT included) and rows written
// (the row counts of INSERT, UPDATE and DELETE tags).
type wireCount struct {
	roundTrips atomic.Int64
	statements atomic.Int64
	rows       atomic.Int64
	mu         sync.Mutex
	sql        []string
}

func (w *wireCount) reset() {
	w.roundTrips.Store(0)
	w.statements.Store(0)
	w.rows.Store(0)
	w.mu.Lock()
	w.sql = nil
	w.mu.Unlock()
}

func (w *wireCount) query(sql string) {
	w.statements.Add(1)
	w.mu.Lock()
	w.sql = append(w.sql, strings.Join(strings.Fields(sql), " "))
	w.mu.Unlock()
}

func (w *wireCount) tag(tag pgconn.CommandTag) {
	if tag.Insert() || tag.Update() || tag.Delete() {
		w.rows.Add(tag.RowsAffected())
	}
}

// TraceQueryStart implements pgx.QueryTracer.
func (w *wireCount) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	w.query(d.SQL)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (w *wireCount) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	w.tag(d.CommandTag)
}

// TraceBatchStart implements pgx.BatchTracer.
func (w *wireCount) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (w *wireCount) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	w.query(d.SQL)
	w.tag(d.CommandTag)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (w *wireCount) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// countingConn counts a round trip at each write that follows a read (or opens the connection's
// exchange).
type countingConn struct {
	net.Conn
	w       *wireCount
	mu      sync.Mutex
	writing bool
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.writing {
		c.writing = true
		c.w.roundTrips.Add(1)
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.writing = false
		c.mu.Unlock()
	}
	return n, err
}

// countedService is a service as the daemon builds it (the store with its outbox publisher) on a
// pool of one connection whose wire traffic w counts.
func countedService(t *testing.T, w *wireCount) (*app.Service, *pgxpool.Pool) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDBURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false } // no liveness pings between commands
	cfg.ConnConfig.Tracer = w
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, w: w}, nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.New(pool).RegisterNode(t.Context(), app.NodeInfo{ID: "node_count", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	return serviceOn(t, pool), pool
}

// countKey is the server key of the counted services: services on one pool share fingerprints.
var countKey = serverkey.Ephemeral()

// serviceOn is a service as the daemon builds it on pool. Each has its own memory of the keys it
// answered (a second one on the same pool answers like another node, or this one after a restart).
func serviceOn(t *testing.T, pool *pgxpool.Pool) *app.Service {
	t.Helper()
	svc, err := app.NewService(store.New(pool, store.Options{Outbox: events.NewOutbox()}),
		app.Config{NodeID: "node_count", Logger: slog.New(slog.DiscardHandler), ServerKey: countKey})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// commandCost is what one command cost on the wire.
type commandCost struct {
	Operation  string   `json:"operation"`
	RoundTrips int64    `json:"round_trips"`
	Statements int64    `json:"statements"`
	Rows       int64    `json:"rows"`
	SQL        []string `json:"sql,omitempty"`
}

// TestCommandWireCost counts the round trips, statements and rows of the mutating commands on
// create_task's path (one transaction: idempotency claim, task, history, command, receipt, outbox
// message, stored response) and fails when one of them costs more than its bound. The counts are
// exact, not timed; with BENCH_COUNTS_OUT set they are also written there as JSON (make bench
// prints them beside its timings).
func TestCommandWireCost(t *testing.T) {
	w := &wireCount{}
	svc, pool := countedService(t, w)
	restarted := serviceOn(t, pool) // answered none of the keys: a replay takes the command's path
	actor := app.Actor{Tenant: "local", Subject: "operator:local"}
	body := []byte(`{"goal":"order the cart on the shop","policy":{"allowed_origins":["https://shop.example.com"]}}`)
	fp, err := svc.Fingerprints().Fingerprint("create_task", nil, body)
	if err != nil {
		t.Fatal(err)
	}
	in := app.CreateTaskInput{Goal: "order the cart on the shop", Policy: app.PolicySpec{AllowedOrigins: []string{"https://shop.example.com"}}}
	n := 0
	createOn := func(svc *app.Service, key string) (*app.Task, app.Response) {
		t.Helper()
		rec := &recorder[*app.TaskResult]{}
		resp, err := svc.CreateTask(t.Context(), app.Call{Actor: actor, Operation: "create_task", IdempotencyKey: key, Fingerprint: fp}, in, rec)
		if err != nil {
			t.Fatal(err)
		}
		res := rec.result
		if res == nil {
			return nil, resp
		}
		return res.Task, resp
	}
	create := func(key string) (*app.Task, app.Response) {
		t.Helper()
		return createOn(svc, key)
	}
	measure := func(op string, run func()) commandCost {
		t.Helper()
		run() // warm: statements prepared, pool connection open
		w.reset()
		run()
		w.mu.Lock()
		defer w.mu.Unlock()
		return commandCost{Operation: op, RoundTrips: w.roundTrips.Load(), Statements: w.statements.Load(), Rows: w.rows.Load(),
			SQL: append([]string(nil), w.sql...)}
	}
	replayed := false
	costs := []commandCost{
		measure("create_task", func() {
			n++
			create(fmt.Sprintf("count-%d", n))
		}),
		measure("create_task (replay)", func() {
			if !replayed {
				create("count-replayed") // the answer replayed below
				replayed = true
			}
			if _, resp := create("count-replayed"); !resp.Replayed {
				t.Fatal("the retry was not answered as a replay")
			}
		}),
		measure("create_task (replay, not answered here)", func() {
			n++
			key := fmt.Sprintf("count-%d", n)
			create(key) // answered by svc; restarted has not seen it
			createOn(restarted, fmt.Sprintf("count-warm-%d", n))
			w.reset() // only the replay
			if _, resp := createOn(restarted, key); !resp.Replayed {
				t.Fatal("the retry was not answered as a replay")
			}
		}),
		measure("cancel_task", func() {
			n++
			tk, _ := create(fmt.Sprintf("count-%d", n))
			w.reset() // only the cancel
			n++
			if _, err := svc.CancelTask(t.Context(), app.Call{Actor: actor, Operation: "cancel_task", IdempotencyKey: fmt.Sprintf("count-%d", n)},
				tk.ID, "done", &recorder[*app.TaskResult]{}); err != nil {
				t.Fatal(err)
			}
		}),
	}
	// Before ADR 0027: create_task 4 round trips, 14 statements, 12 rows; its replay 4, 4, 0;
	// cancel_task 12, 19, 11. After it, before the answered keys (answered.go): the replay 9, 7, 0.
	bounds := map[string]commandCost{
		// BEGIN, the completed idempotency record, task, history (one INSERT), origin, command,
		// receipt, authorisation decision, outbox message, COMMIT: one pipeline.
		"create_task": {RoundTrips: 1, Statements: 10, Rows: 11},
		// This process answered the key: its record, one read (was 9 round trips, 7 statements).
		"create_task (replay)": {RoundTrips: 1, Statements: 1, Rows: 0},
		// Another node (or this one before a restart) answered it: the queued claim finds the key
		// taken (its pipeline; ROLLBACK), then the record is read before BEGIN (was claim, read and
		// COMMIT). pgx forgets the prepared statements of a failed pipeline: the next command on
		// that connection prepares its own again (one more round trip), not counted here.
		"create_task (replay, not answered here)": {RoundTrips: 4, Statements: 4, Rows: 0},
		// Two transactions (two-phase): claim with the task lock, then the writes with COMMIT;
		// the command lock, the task lock, the pending approvals, then the writes with COMMIT. The
		// task ends, so its history chain is anchored in the same pipeline (one statement, one
		// row; ADR 0033).
		"cancel_task": {RoundTrips: 6, Statements: 20, Rows: 12},
	}
	for _, c := range costs {
		t.Logf("%s: %d round trips, %d statements, %d rows\n  %s", c.Operation, c.RoundTrips, c.Statements, c.Rows, strings.Join(c.SQL, "\n  "))
		b := bounds[c.Operation]
		if c.RoundTrips > b.RoundTrips || c.Statements > b.Statements || c.Rows > b.Rows {
			t.Errorf("%s costs %d round trips, %d statements, %d rows; want at most %d, %d, %d",
				c.Operation, c.RoundTrips, c.Statements, c.Rows, b.RoundTrips, b.Statements, b.Rows)
		}
	}
	if out := os.Getenv("BENCH_COUNTS_OUT"); out != "" {
		for i := range costs {
			costs[i].SQL = nil
		}
		data, err := json.Marshal(costs)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplayWinsOverALaterFailure: a key's answer is replayed even when the command would now
// fail before it reads anything (here its deadline has passed since). The store queues the claim
// of such a command (ADR 0027); a command that fails before its claim was confirmed must run
// again with the claim answered first, or the client would get the failure instead of the replay.
func TestReplayWinsOverALaterFailure(t *testing.T) {
	b := setup(t)
	deadline := b.now.Load().Add(time.Minute)
	in := app.CreateTaskInput{Goal: "buy milk", Deadline: &deadline}
	call := b.call(t, "create_task", nil, map[string]any{"goal": "buy milk", "deadline": deadline}, "replay-after-deadline")
	first, err := b.svc.CreateTask(t.Context(), call, in, &recorder[*app.TaskResult]{})
	if err != nil || first.Replayed {
		t.Fatalf("first create_task: %+v, %v", first, err)
	}
	b.advance(2 * time.Minute) // the same request now fails validation: its deadline is past
	again, err := b.svc.CreateTask(t.Context(), call, in, &recorder[*app.TaskResult]{})
	if err != nil {
		t.Fatalf("the repeated request failed (%v); want the replay of %s", err, first.Body)
	}
	if !again.Replayed || again.Status != first.Status || string(again.Body) != string(first.Body) {
		t.Fatalf("repeated request answered %d %s (replayed %v); want the replay %d %s", again.Status, again.Body, again.Replayed, first.Status, first.Body)
	}
	other := b.call(t, "create_task", nil, map[string]any{"goal": "buy milk", "deadline": deadline})
	if _, err := b.svc.CreateTask(t.Context(), other, in, &recorder[*app.TaskResult]{}); err == nil {
		t.Fatal("a fresh key with a past deadline succeeded; want invalid_request")
	}
}

// TestAFailedPipelineLeavesNothing: when one statement of a command's single pipeline fails (here
// the database's CHECK on the goal's length, which the service leaves to it), nothing of the
// command is written — no task, history, outbox message or idempotency record — and the key stays
// free for a corrected request.
func TestAFailedPipelineLeavesNothing(t *testing.T) {
	w := &wireCount{}
	svc, pool := countedService(t, w)
	actor := app.Actor{Tenant: "local", Subject: "operator:local"}
	long := strings.Repeat("g", 2001)
	fp, err := svc.Fingerprints().Fingerprint("create_task", nil, []byte(`{"goal":"`+long+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	call := app.Call{Actor: actor, Operation: "create_task", IdempotencyKey: "failed-pipeline", Fingerprint: fp}
	if _, err := svc.CreateTask(t.Context(), call, app.CreateTaskInput{Goal: long}, &recorder[*app.TaskResult]{}); err == nil {
		t.Fatal("a 2001-character goal was stored; want the database's CHECK to refuse it")
	}
	for _, table := range []string{"agent_task", "agent_task_event", "task_command", "task_receipt", "outbox_event", "idempotency_record"} {
		var n int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s has %d rows after the failed command; want none", table, n)
		}
	}
	fp, err = svc.Fingerprints().Fingerprint("create_task", nil, []byte(`{"goal":"short"}`))
	if err != nil {
		t.Fatal(err)
	}
	call.Fingerprint = fp
	resp, err := svc.CreateTask(t.Context(), call, app.CreateTaskInput{Goal: "short"}, &recorder[*app.TaskResult]{})
	if err != nil || resp.Replayed {
		t.Fatalf("the corrected request with the same key: %+v, %v; want a fresh answer", resp, err)
	}
}

// TestAnsweredKeyIsOnlyAHint: a key this process answered is replayed from its record, but the
// record decides: once it is purged the same key runs the command again (a new task), and the
// same key with another body is refused as reused, as on the command's path.
func TestAnsweredKeyIsOnlyAHint(t *testing.T) {
	b := setup(t)
	call := b.call(t, "create_task", nil, map[string]any{"goal": "buy milk"}, "answered-hint")
	in := app.CreateTaskInput{Goal: "buy milk"}
	firstRec := &recorder[*app.TaskResult]{}
	first, err := b.svc.CreateTask(t.Context(), call, in, firstRec)
	if err != nil || first.Replayed || firstRec.result == nil {
		t.Fatalf("first create_task: %+v, %v", first, err)
	}
	again, err := b.svc.CreateTask(t.Context(), call, in, &recorder[*app.TaskResult]{})
	if err != nil || !again.Replayed || string(again.Body) != string(first.Body) {
		t.Fatalf("retry: %+v, %v; want the replay of %s", again, err, first.Body)
	}
	other := b.call(t, "create_task", nil, map[string]any{"goal": "buy bread"}, "answered-hint")
	if _, err := b.svc.CreateTask(t.Context(), other, app.CreateTaskInput{Goal: "buy bread"}, &recorder[*app.TaskResult]{}); app.AsError(err) == nil ||
		app.AsError(err).Code != app.CodeIdempotencyKeyReused {
		t.Fatalf("the key with another body: %v; want idempotency_key_reused", err)
	}
	b.advance(25 * time.Hour) // past the record's retention
	if n, err := b.svc.PurgeIdempotency(t.Context()); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v; want the one record", n, err)
	}
	rec := &recorder[*app.TaskResult]{}
	fresh, err := b.svc.CreateTask(t.Context(), call, in, rec)
	if err != nil || fresh.Replayed || rec.result == nil || rec.result.Task.ID == firstRec.result.Task.ID {
		t.Fatalf("the purged key: %+v, %v; want the command to run again", fresh, err)
	}
}
