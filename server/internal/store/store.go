package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/app"
)

// Querier is what both a pool and a transaction offer for reads.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Store implements app.Store on a pgx pool. Safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	opts Options
	// group commits transactions that read nothing together (groupcommit.go); nil: each alone.
	group *committer
}

var _ app.Store = (*Store)(nil)

// New wraps an open pool. Without Options.Outbox, commands write no outbox messages.
func New(pool *pgxpool.Pool, opts ...Options) *Store {
	s := &Store{pool: pool}
	if len(opts) > 0 {
		s.opts = opts[0]
	}
	s.opts.Tracer = app.TracerOrNone(s.opts.Tracer)
	if s.opts.GroupCommit > 0 {
		s.group = newCommitter(pool, s.opts.GroupCommit, s.opts.GroupCommitStall)
	}
	return s
}

// GroupCommitStats says what the group committer did; zero without Options.GroupCommit.
func (s *Store) GroupCommitStats() GroupCommitStats {
	if s.group == nil {
		return GroupCommitStats{}
	}
	return s.group.snapshot()
}

// Open connects to dsn and checks the connection.
func Open(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing database URL: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	return pool, nil
}

// Pool exposes the pool for health checks and adapters that share it.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// maxTxAttempts bounds retries of a transaction that lost a serialisation race or a deadlock.
const maxTxAttempts = 5

// InTx implements app.Store.
//
// A transaction costs as few round trips as its reads allow (ADR 0027): BEGIN is not sent on its
// own but in front of the first statement; writes are queued and sent with the next read or with
// the COMMIT; and the idempotency claim that opens a command is queued too (claimOptimistic), so a
// command that reads nothing before it commits — create_task — is one round trip. When the
// optimistic claim finds the key taken, or the command fails before its claim was confirmed, the
// transaction runs again with the claim sent and answered first (the key's replay, 409 or 422 then
// decide, as before).
func (s *Store) InTx(ctx context.Context, fn func(app.Tx) error) (err error) {
	// One span per transaction, retries included (the span says how many attempts it took).
	ctx, sp := s.opts.Tracer.Start(ctx, "sql transaction", app.SpanClient)
	sp.SetAttr("db.system.name", "postgresql")
	attempt := 1
	defer func() {
		sp.SetInt("bap.tx.attempts", int64(attempt))
		sp.End(err)
	}()
	optimistic := true
	for ; attempt <= maxTxAttempts; attempt++ {
		err = s.inTxOnce(ctx, fn, optimistic)
		if errors.Is(err, errClaimUnconfirmed) && optimistic {
			optimistic = false // once more, claiming first; not a lost race, so not counted
			attempt--
			continue
		}
		if !retryable(err) {
			return err
		}
	}
	attempt = maxTxAttempts
	return err
}

func (s *Store) inTxOnce(ctx context.Context, fn func(app.Tx) error, optimistic bool) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	tx := &pgTx{conn: conn, optimistic: optimistic, group: s.group}
	defer tx.release(ctx)
	err = fn(tx)
	switch {
	case tx.claimTaken:
		// The queued claim found its key taken, whatever the command made of that error.
		return fmt.Errorf("%w: %w", errClaimUnconfirmed, errors.Join(err, errors.New("key taken")))
	case err != nil && tx.claim != nil && !tx.claim.sent:
		// The command failed before its key was claimed: whether that key is someone else's
		// answer (a replay, a 409, a 422) decides the answer, so claim it first and run again.
		return fmt.Errorf("%w: %w", errClaimUnconfirmed, err)
	case err != nil:
		return err
	}
	for _, fn := range tx.beforeCommit {
		if err := fn(ctx); err != nil {
			return err
		}
	}
	if err := s.publishEvents(ctx, tx); err != nil {
		return err
	}
	if err := tx.commit(ctx); err != nil {
		return err
	}
	if len(tx.events) > 0 && s.opts.EventsCommitted != nil {
		s.opts.EventsCommitted()
	}
	for _, fn := range tx.afterCommit {
		fn()
	}
	return nil
}

// errClaimUnconfirmed makes InTx run a transaction again with its idempotency claim sent first.
var errClaimUnconfirmed = errors.New("idempotency claim not confirmed")

func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return false
}

// translate maps pgx errors to app sentinels at the adapter's edge.
func translate(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return app.ErrNotFound
	}
	return err
}

// pgTx is one command transaction on one pooled connection. Writes are queued and sent in one
// pipeline with the next read or with the COMMIT; the transaction's BEGIN travels with its first
// statement. Not safe for concurrent use.
type pgTx struct {
	// conn is nil while the transaction waits for its group commit, and after.
	conn *pgxpool.Conn
	// group, when not nil, may commit this transaction with others (groupcommit.go).
	group *committer
	// begun: BEGIN has been sent; committed: so has COMMIT, successfully.
	begun, committed bool
	// optimistic allows ClaimIdempotency to queue the claim instead of sending it (see InTx).
	optimistic bool
	claim      *queuedClaim
	// claimTaken: a pipeline carrying the queued claim failed on the key (whatever the command
	// made of that error, InTx runs it again with the claim first).
	claimTaken bool
	batch      pgx.Batch
	// events appended by the command, published to the outbox just before commit.
	events []app.Event
	// pendingEvents are history rows not yet sent: one multi-row INSERT per pipeline.
	pendingEvents []queuedEvent
	// newTasks are tasks inserted by this transaction and not yet sent: their INSERT is built at
	// flush time from the task's final values, so a task created and changed in one command is
	// written once (no UPDATE, no dead tuple).
	newTasks []*app.Task
	// afterCommit runs once COMMIT succeeded (app.Tx.AfterCommit); each attempt has its own.
	afterCommit []func()
	// beforeCommit runs after the command's work, before COMMIT (app.Tx.BeforeCommit).
	beforeCommit []func(context.Context) error
}

// AfterCommit implements app.Tx.
func (t *pgTx) AfterCommit(fn func()) { t.afterCommit = append(t.afterCommit, fn) }

// BeforeCommit implements app.Tx.
func (t *pgTx) BeforeCommit(fn func(context.Context) error) {
	t.beforeCommit = append(t.beforeCommit, fn)
}

func (t *pgTx) queue(sql string, args ...any) { t.batch.Queue(sql, args...) }

// take empties the queue into the statements of the next pipeline, in the order their
// constraints need: BEGIN, the idempotency claim, new tasks, the history rows, then the rest in
// the order they were queued.
func (t *pgTx) take() *pgx.Batch {
	b := &pgx.Batch{}
	if !t.begun {
		b.Queue("BEGIN")
		t.begun = true
	}
	if t.claim != nil && !t.claim.sent {
		t.claim.queue(b)
		t.claim.sent = true
		t.claim.inFlight = b
	}
	for _, tk := range t.newTasks {
		queueTaskInsert(b, tk)
	}
	if len(t.pendingEvents) > 0 {
		queueEvents(b, t.pendingEvents)
	}
	b.QueuedQueries = append(b.QueuedQueries, t.batch.QueuedQueries...)
	t.newTasks, t.pendingEvents, t.batch = nil, nil, pgx.Batch{}
	return b
}

// sendErr wraps an error of a pipeline that carried the queued claim: a taken key makes InTx run
// the transaction again with the claim answered first.
func (t *pgTx) sendErr(b *pgx.Batch, err error) error {
	var pgErr *pgconn.PgError
	if t.claim != nil && t.claim.inFlight == b && errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.TableName == "idempotency_record" {
		t.claimTaken = true
		return fmt.Errorf("%w: %w", errClaimUnconfirmed, err)
	}
	return fmt.Errorf("writing command: %w", err)
}

// commit sends what is queued and COMMIT in one pipeline.
func (t *pgTx) commit(ctx context.Context) error {
	if !t.begun && t.claim == nil && len(t.newTasks) == 0 && len(t.pendingEvents) == 0 && t.batch.Len() == 0 {
		return nil // a transaction that did nothing
	}
	b := t.take()
	b.Queue("COMMIT")
	var err error
	if t.group != nil && groupable(b) {
		err = t.group.commit(ctx, t, b)
	} else {
		err = t.send(ctx, b)
	}
	if err != nil {
		return err
	}
	t.committed = true
	return nil
}

// send sends b, a pipeline ending the transaction, on the transaction's connection.
func (t *pgTx) send(ctx context.Context, b *pgx.Batch) error {
	if err := t.conn.SendBatch(ctx, b).Close(); err != nil {
		return t.sendErr(b, err)
	}
	return nil
}

// release rolls back what did not commit and returns the connection to the pool.
func (t *pgTx) release(ctx context.Context) {
	if t.conn == nil {
		return // handed back while it waited for its group commit
	}
	if t.begun && !t.committed && !t.conn.Conn().IsClosed() {
		// After a failed pipeline the server may have ended the transaction already; ROLLBACK then
		// only warns.
		if _, err := t.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			_ = t.conn.Conn().Close(context.WithoutCancel(ctx)) // never hand back a connection in a transaction
		}
	}
	t.conn.Release()
}

// q returns the transaction for a read: the read's statement is sent in one pipeline behind the
// queued writes (and BEGIN).
func (t *pgTx) q(context.Context) (Querier, error) {
	return pipelined{t}, nil
}

// pipelined is the Querier of a pgTx: each call sends the queued statements and its own in one
// round trip.
type pipelined struct{ t *pgTx }

// send queues sql behind the pending statements and sends them; the caller reads the last
// result from br and must close br.
func (p pipelined) send(ctx context.Context, sql string, args []any) (*pgx.Batch, pgx.BatchResults, error) {
	b := p.t.take()
	b.Queue(sql, args...)
	br := p.t.conn.SendBatch(ctx, b)
	for range b.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return b, nil, p.t.sendErr(b, err)
		}
	}
	return b, br, nil
}

// Exec implements Querier.
func (p pipelined) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	_, br, err := p.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// QueryRow implements Querier.
func (p pipelined) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	_, br, err := p.send(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{row: br.QueryRow(), br: br}
}

// Query implements Querier.
func (p pipelined) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	_, br, err := p.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// batchRow is the row of a pipeline's last statement; Scan closes the pipeline.
type batchRow struct {
	row pgx.Row
	br  pgx.BatchResults
}

func (r batchRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// batchRows are the rows of a pipeline's last statement; Close closes the pipeline.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
