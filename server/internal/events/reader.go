package events

import (
	"context"
	"database/sql"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// statementReads is the relay's wsql.Beginner: the watermill subscriber opens a transaction per
// read (BEGIN, the feed SELECT, the ack, COMMIT: four round trips), but a relay read is one
// SELECT whose snapshot is the statement's own, and its ack is a position kept in memory (see
// Offsets). So the "transaction" it hands out runs each statement on its own, skips the empty
// ack, and has nothing to commit: a read costs one round trip. Under CPU contention each round
// trip is a scheduler wake-up of the relay and of its backend, so the read that carries a commit
// to the subscribers is up to four times shorter, and so is the time a commit waits for the read
// in flight to end.
//
// Nothing durable depends on these reads: the outbox rows committed with their commands, and
// the position write (at most once a second, for pruning only) is a single UPDATE.
type statementReads struct {
	db wsql.Beginner
}

var _ wsql.Beginner = statementReads{}

// BeginTx implements wsql.Beginner without a database transaction.
func (s statementReads) BeginTx(context.Context, *sql.TxOptions) (wsql.Tx, error) {
	return statementTx(s), nil
}

// ExecContext implements wsql.ContextExecutor.
func (s statementReads) ExecContext(ctx context.Context, query string, args ...any) (wsql.Result, error) {
	return s.db.ExecContext(ctx, query, args...)
}

// QueryContext implements wsql.ContextExecutor.
func (s statementReads) QueryContext(ctx context.Context, query string, args ...any) (wsql.Rows, error) {
	return s.db.QueryContext(ctx, query, args...)
}

// statementTx is a read's pseudo-transaction: statements run as they come.
type statementTx struct {
	db wsql.Beginner
}

type noResult struct{}

func (noResult) RowsAffected() (int64, error) { return 0, nil }

// ExecContext runs query at once; an empty query (the in-memory ack) costs nothing.
func (t statementTx) ExecContext(ctx context.Context, query string, args ...any) (wsql.Result, error) {
	if query == "" {
		return noResult{}, nil
	}
	return t.db.ExecContext(ctx, query, args...)
}

// QueryContext runs query at once.
func (t statementTx) QueryContext(ctx context.Context, query string, args ...any) (wsql.Rows, error) {
	return t.db.QueryContext(ctx, query, args...)
}

// Commit has nothing to commit.
func (statementTx) Commit() error { return nil }

// Rollback has nothing to roll back.
func (statementTx) Rollback() error { return nil }
