package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/admission"
)

// Backpressure in the use-cases (docs/operability.md, "Backpressure"): browser sessions per
// tenant and per node, and waiting tasks per tenant. The transport bounds in-flight commands
// before they reach here. Every refusal is 429 rate_limited (the tenant's cap) or 503 overloaded
// (the node's) with Retry-After, and none is recorded under the Idempotency-Key: the command's
// transaction rolls back, so the same key works once capacity frees.

const (
	// sessionRetryAfter is the Retry-After of a session cap: sessions live for minutes, but one
	// closes or goes idle every few seconds on a busy node.
	sessionRetryAfter = 5 * time.Second
	// queueRetryAfter is the Retry-After of a full task queue.
	queueRetryAfter = 5 * time.Second
)

// SessionLoad is implemented by browsers that report their load: the sessions open on this node
// (not counting ones being opened) and the most they may run. Without it only the browser's own
// refusal (503 overloaded, recorded as a rejected command) bounds the node.
type SessionLoad interface {
	SessionLoad() (open, limit int)
}

// capacityRefusal is a refusal for capacity decided inside a command's transaction. It is not an
// *Error on purpose: returned from a two-phase command's prepare it rolls the transaction back
// (claim included) instead of being recorded as a rejection. refusalProblem turns it back into
// the *Error the client gets.
type capacityRefusal struct{ err *Error }

func (r *capacityRefusal) Error() string { return r.err.Error() }

// refusalProblem returns err, or the problem of the capacityRefusal in its chain.
func refusalProblem(err error) error {
	var r *capacityRefusal
	if errors.As(err, &r) {
		return r.err
	}
	return err
}

// sessionAdmission is one session opening's reservation, taken in phase 1 of its command. It
// counts against the node until dispatch ended (the browser counts the session from then on) and
// against the tenant until the command ended (its browser_session row is committed by then).
type sessionAdmission struct{ res *admission.Reservation }

// dispatched ends the node's part of the reservation.
func (a *sessionAdmission) dispatched() {
	if a.res != nil {
		a.res.EndTotal()
	}
}

func (a *sessionAdmission) done() {
	if a.res != nil {
		a.res.End()
	}
}

// admitSession reserves a browser session for c's task: refused with 429 when the tenant has
// MaxSessionsPerTenant open sessions (every node, from the database) and openings (this node),
// and with 503 when this node's browser runs as many sessions as it may. Called in phase 1; a
// retried transaction keeps the reservation it has.
func (s *Service) admitSession(ctx context.Context, c *commandCtx, a *sessionAdmission) error {
	if a.res != nil {
		return nil
	}
	lim := admission.Limits{PerKey: s.cfg.MaxSessionsPerTenant}
	var nodeOpen func() int
	if l, ok := s.cfg.Browser.(SessionLoad); ok {
		_, lim.Total = l.SessionLoad()
		nodeOpen = func() int { open, _ := l.SessionLoad(); return open }
	}
	tenant := c.t.Tenant
	res, full, err := s.sessions.Reserve(tenant, lim, func() (int, error) {
		return c.tx.CountOpenSessions(ctx, tenant)
	}, nodeOpen)
	switch {
	case err != nil:
		return err
	case full == admission.KeyFull:
		s.cfg.Refusals.Add(admission.TenantSessions)
		return &capacityRefusal{&Error{Code: CodeRateLimited, RetryAfter: sessionRetryAfter, Detail: fmt.Sprintf(
			"the tenant has as many open browser sessions as it may (%d); close one, or retry later", lim.PerKey)}}
	case full == admission.TotalFull:
		s.cfg.Refusals.Add(admission.NodeSessions)
		return &capacityRefusal{&Error{Code: CodeOverloaded, RetryAfter: sessionRetryAfter, Detail: fmt.Sprintf(
			"this node runs as many browser sessions as it may (%d); retry later", lim.Total)}}
	}
	a.res = res
	return nil
}

// OpeningSessions is how many browser sessions this node's browser is opening right now (for
// /metrics).
func (s *Service) OpeningSessions() int { return s.sessions.Held() }

// checkTaskQueue refuses t, just inserted by create_task, when it would wait — in `created` for
// admission, or admitted with a plan for a worker — and its tenant already has
// MaxQueuedTasksPerTenant tasks waiting so: 429 rate_limited with Retry-After. create_task is one
// transaction, so the refusal rolls back and nothing is recorded. Concurrent create_tasks of one
// tenant each count the others' committed tasks only, so the cap may be passed by as many as the
// tenant runs at once (at most its in-flight commands).
func (s *Service) checkTaskQueue(ctx context.Context, tx Tx, t *Task, admitted bool) error {
	limit := s.cfg.MaxQueuedTasksPerTenant
	if limit <= 0 || (admitted && !t.Delegated()) {
		return nil
	}
	n, err := tx.CountQueuedTasks(ctx, t.Tenant) // t itself included
	if err != nil {
		return err
	}
	if n <= limit {
		return nil
	}
	s.cfg.Refusals.Add(admission.TenantQueuedTasks)
	return &Error{Code: CodeRateLimited, RetryAfter: queueRetryAfter, Detail: fmt.Sprintf(
		"the tenant has as many tasks waiting as it may (%d); retry when some have started or ended", limit)}
}
