package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Group commit (ADR 0039).
//
// A transaction that wrote without reading anything (create_task: its claim, task, history,
// command, receipt, decision and outbox rows, all queued) reaches COMMIT with its whole work in
// one pipeline. While Options.GroupCommit such pipelines are in flight, the next ones queue, and
// when one ends the queue is sent as one transaction: the same INSERT of each command merged into
// one statement of all their rows (mergesql.go), one BEGIN, one COMMIT, one WAL flush. Each
// command still commits all of its rows or none, under the same constraints; it shares its
// transaction with other commands that read nothing either, so none depends on another. When the
// group's transaction fails (a taken idempotency key, a constraint, a lost connection), nothing
// of it is kept and each of its commands commits alone, as it would have without a group, and
// meets its own error there.

// committer groups the commits of transactions that read nothing. Safe for concurrent use.
type committer struct {
	pool *pgxpool.Pool
	// inFlightMax pipelines are sent at once; maxGroup commands at most share one.
	inFlightMax, maxGroup int
	// stallAfter: a command queued this long behind pipelines still in flight (a lock wait, an I/O
	// stall) is sent with the rest of the queue as one more pipeline, so that one slow
	// transaction (maybe another tenant's) never holds the others back for longer.
	stallAfter time.Duration
	merge      merger

	mu       sync.Mutex
	inFlight int
	queue    []*groupMember
	stats    GroupCommitStats
}

// GroupCommitStats counts what the group committer did since the store was made.
type GroupCommitStats struct {
	// Groups is the number of transactions sent for two commands or more, Grouped the commands
	// they carried, Failed the groups whose transaction failed (their commands then committed
	// alone).
	Groups, Grouped, Failed int64
	// Largest is the most commands one group carried.
	Largest int
	// Unstalled counts the queues sent beyond the in-flight limit because the pipelines in flight
	// were slow (Options.GroupCommitStall).
	Unstalled int64
	// Waiting is the number of commands queued now, waiting for their group to be sent.
	Waiting int
}

// groupMember is one command's pipeline waiting to be sent with others.
type groupMember struct {
	b *pgx.Batch // BEGIN, the command's statements, COMMIT
	// done is closed once the pipeline was sent: err is nil when it committed. alone: it was sent
	// by itself (err is then its own); else a failed group's member commits alone after it.
	done  chan struct{}
	err   error
	alone bool
}

// maxGroupCommit is the most commands one group transaction carries: enough to take what 32
// pooled connections queue, few enough to keep a merged statement far under PostgreSQL's 65,535
// parameters.
const maxGroupCommit = 32

// groupFlushTimeout bounds a group's transaction. It does not follow any one command's context:
// one caller giving up must not fail the others.
const groupFlushTimeout = 30 * time.Second

// DefaultGroupCommitStall is how long a command waits behind pipelines in flight before its queue
// is sent regardless (Options.GroupCommitStall): about ten times a group's usual transaction.
const DefaultGroupCommitStall = 50 * time.Millisecond

func newCommitter(pool *pgxpool.Pool, inFlight int, stallAfter time.Duration) *committer {
	if stallAfter <= 0 {
		stallAfter = DefaultGroupCommitStall
	}
	return &committer{pool: pool, inFlightMax: inFlight, maxGroup: maxGroupCommit, stallAfter: stallAfter}
}

// groupable reports whether b holds a whole transaction that can share its commit: BEGIN, the
// statements, COMMIT, none of whose results anybody reads.
func groupable(b *pgx.Batch) bool {
	q := b.QueuedQueries
	if len(q) < 3 || q[0].SQL != "BEGIN" || q[len(q)-1].SQL != "COMMIT" {
		return false
	}
	for _, x := range q {
		if x.Fn != nil {
			return false
		}
	}
	return true
}

// commit sends t's pipeline b (groupable) now when fewer than inFlightMax are in flight, else
// queues it to be sent with the others queued meanwhile.
func (g *committer) commit(ctx context.Context, t *pgTx, b *pgx.Batch) error {
	g.mu.Lock()
	if g.inFlight < g.inFlightMax {
		g.inFlight++
		g.mu.Unlock()
		defer g.next(ctx)
		return t.send(ctx, b)
	}
	m := &groupMember{b: b, done: make(chan struct{})}
	g.queue = append(g.queue, m)
	g.mu.Unlock()
	// The connection is idle until the group is sent: another command can use it meanwhile.
	t.conn.Release()
	t.conn = nil
	stall := time.NewTimer(g.stallAfter)
	defer stall.Stop()
wait:
	for {
		select {
		case <-m.done:
			break wait
		case <-stall.C:
			g.unstall(ctx) // m's outcome still comes through m.done
		case <-ctx.Done():
			if g.withdraw(m) {
				return fmt.Errorf("waiting for a group commit: %w", ctx.Err()) // never sent
			}
			<-m.done // already sent: its outcome is known within groupFlushTimeout
			break wait
		}
	}
	switch {
	case m.err == nil:
		return nil
	case m.alone:
		return t.sendErr(b, m.err)
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for a group commit: %w", ctx.Err()) // the group failed: nothing kept
	}
	// The group failed and kept nothing: commit alone, as without a group.
	conn, err := g.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("committing alone after a failed group: %w", err)
	}
	t.conn = conn
	return t.send(ctx, b)
}

// withdraw takes m out of the queue, reporting whether it was still there (not yet sent).
func (g *committer) withdraw(m *groupMember) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.queue {
		if x == m {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// unstall sends the queue now as one more pipeline in flight, beyond inFlightMax: the pipelines in
// flight have taken longer than stallAfter.
func (g *committer) unstall(ctx context.Context) {
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.mu.Unlock()
		return // sent meanwhile
	}
	g.inFlight++
	g.stats.Unstalled++
	g.mu.Unlock()
	g.next(ctx) // takes the queue into a flush; that flush's end frees the slot
}

// next sends what queued while a pipeline was in flight, or frees the in-flight slot. ctx is the
// ended pipeline's: the group keeps its values (a trace), not its cancellation.
func (g *committer) next(ctx context.Context) {
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.inFlight--
		g.mu.Unlock()
		return
	}
	n := min(len(g.queue), g.maxGroup)
	grp := append([]*groupMember(nil), g.queue[:n]...)
	g.queue = append(g.queue[:0], g.queue[n:]...)
	g.mu.Unlock()
	go g.flush(context.WithoutCancel(ctx), grp)
}

// flush sends grp as one transaction and tells each member how it went.
func (g *committer) flush(ctx context.Context, grp []*groupMember) {
	defer g.next(ctx)
	sendCtx, cancel := context.WithTimeout(ctx, groupFlushTimeout)
	defer cancel()
	err := g.send(sendCtx, grp)
	g.mu.Lock()
	if len(grp) > 1 {
		g.stats.Groups++
		g.stats.Grouped += int64(len(grp))
		g.stats.Largest = max(g.stats.Largest, len(grp))
		if err != nil {
			g.stats.Failed++
		}
	}
	g.mu.Unlock()
	for _, m := range grp {
		m.err, m.alone = err, len(grp) == 1
		close(m.done)
	}
}

// send runs grp's statements in one transaction on a pooled connection.
func (g *committer) send(ctx context.Context, grp []*groupMember) error {
	conn, err := g.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := grp[0].b
	if len(grp) > 1 {
		b = g.build(grp)
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		// The failed pipeline may have left the connection in an aborted transaction.
		if _, rerr := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		return err
	}
	return nil
}

// build is one pipeline of grp's transactions: BEGIN, their statements, COMMIT. When every member
// sends the same statements (the same command), the k-th statements of all are merged into one
// where they can be; otherwise each member's statements follow the previous member's.
func (g *committer) build(grp []*groupMember) *pgx.Batch {
	bodies := make([][]*pgx.QueuedQuery, len(grp))
	for i, m := range grp {
		q := m.b.QueuedQueries
		bodies[i] = q[1 : len(q)-1]
	}
	out := &pgx.Batch{}
	out.Queue("BEGIN")
	// A merged statement's text depends on the group's size, so each connection runs each text a
	// few times only, and PostgreSQL plans the first five runs of a prepared statement anew before
	// it keeps a generic plan. The group's statements are INSERTs, whose plans (and those of their
	// foreign-key checks and triggers) have no alternative worth a custom plan: take the generic
	// one at once, for this transaction only.
	out.Queue("SET LOCAL plan_cache_mode = force_generic_plan")
	if sameStatements(bodies) {
		col := make([]*pgx.QueuedQuery, len(grp))
		for k := range bodies[0] {
			for i := range bodies {
				col[i] = bodies[i][k]
			}
			if q, ok := g.merge.mergeQueries(col); ok {
				out.QueuedQueries = append(out.QueuedQueries, q)
				continue
			}
			out.QueuedQueries = append(out.QueuedQueries, col...)
		}
	} else {
		for _, body := range bodies {
			out.QueuedQueries = append(out.QueuedQueries, body...)
		}
	}
	out.Queue("COMMIT")
	return out
}

// sameStatements reports whether every body sends the same statement texts in the same order.
func sameStatements(bodies [][]*pgx.QueuedQuery) bool {
	for _, b := range bodies[1:] {
		if len(b) != len(bodies[0]) {
			return false
		}
		for k, q := range b {
			if q.SQL != bodies[0][k].SQL {
				return false
			}
		}
	}
	return true
}

// snapshot returns the counters.
func (g *committer) snapshot() GroupCommitStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stats
	st.Waiting = len(g.queue)
	return st
}
