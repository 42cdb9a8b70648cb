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
}

var _ app.Store = (*Store)(nil)

// New wraps an open pool. Without Options.Outbox, commands write no outbox messages.
func New(pool *pgxpool.Pool, opts ...Options) *Store {
	s := &Store{pool: pool}
	if len(opts) > 0 {
		s.opts = opts[0]
	}
	s.opts.Tracer = app.TracerOrNone(s.opts.Tracer)
	return s
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
func (s *Store) InTx(ctx context.Context, fn func(app.Tx) error) (err error) {
	// One span per transaction, retries included (the span says how many attempts it took).
	ctx, sp := s.opts.Tracer.Start(ctx, "sql transaction", app.SpanClient)
	sp.SetAttr("db.system.name", "postgresql")
	attempt := 1
	defer func() {
		sp.SetInt("bap.tx.attempts", int64(attempt))
		sp.End(err)
	}()
	for ; attempt <= maxTxAttempts; attempt++ {
		err = s.inTxOnce(ctx, fn)
		if !retryable(err) {
			return err
		}
	}
	attempt = maxTxAttempts
	return err
}

func (s *Store) inTxOnce(ctx context.Context, fn func(app.Tx) error) error {
	ptx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	tx := &pgTx{tx: ptx}
	defer func() { _ = ptx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := s.publishEvents(ctx, tx); err != nil {
		return err
	}
	if err := tx.flush(ctx); err != nil {
		return err
	}
	if err := ptx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", translate(err))
	}
	if len(tx.events) > 0 && s.opts.EventsCommitted != nil {
		s.opts.EventsCommitted()
	}
	return nil
}

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

// pgTx is one command transaction. Writes are queued in a batch and sent in one round trip before
// the next read or at commit, which keeps a command to a handful of round trips.
type pgTx struct {
	tx    pgx.Tx
	batch pgx.Batch
	// events appended by the command, published to the outbox just before commit.
	events []app.Event
	// newTasks are tasks inserted by this transaction and not yet sent: their INSERT is built at
	// flush time from the task's final values, so a task created and changed in one command is
	// written once (no UPDATE, no dead tuple).
	newTasks []*app.Task
}

func (t *pgTx) queue(sql string, args ...any) { t.batch.Queue(sql, args...) }

func (t *pgTx) flush(ctx context.Context) error {
	if len(t.newTasks) > 0 {
		// The task rows go first: everything queued after InsertTask may refer to them.
		var b pgx.Batch
		for _, tk := range t.newTasks {
			queueTaskInsert(&b, tk)
		}
		b.QueuedQueries = append(b.QueuedQueries, t.batch.QueuedQueries...)
		t.batch, t.newTasks = b, nil
	}
	if t.batch.Len() == 0 {
		return nil
	}
	b := t.batch
	t.batch = pgx.Batch{}
	if err := t.tx.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("writing command: %w", err)
	}
	return nil
}

// q flushes pending writes and returns the transaction for a read.
func (t *pgTx) q(ctx context.Context) (pgx.Tx, error) {
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.tx, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
