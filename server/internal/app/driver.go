package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// The driver seam: what the workers (package worker) use of app, beside the same command methods
// a transport calls (Navigate, Act, CreateBrowserSession, CloseTask…). A worker claims a task's
// lease, reads the task's progress, and records what its run did — step progress, its events, a
// dead letter, the end of a plan — in a transaction that holds the task and the lease (InLease).
// The transaction, its locking order and the task's state machine stay here; the worker decides
// what to run next.

// ErrLeaseLost reports that this worker no longer holds the task's lease.
var ErrLeaseLost = errors.New("the task's lease was lost")

// ErrTaskEnded reports that the task ended (closed, cancelled, expired) under the worker.
var ErrTaskEnded = errors.New("the task ended")

// ErrTaskCancelled is the cause of a dispatch (or a model call) that cancel_task interrupted.
var ErrTaskCancelled = errTaskCancelled

// Now is the service's clock.
func (s *Service) Now() time.Time { return s.cfg.Now() }

// ClaimLease claims a runnable delegated task's lease for this node (FOR UPDATE SKIP LOCKED);
// ErrNotFound when none is runnable.
func (s *Service) ClaimLease(ctx context.Context, ttl time.Duration) (*LeaseClaim, error) {
	return s.store.ClaimPlanTask(ctx, s.cfg.NodeID, ttl)
}

// RenewLease extends this node's lease of claim by ttl; false when the lease is no longer ours.
func (s *Service) RenewLease(ctx context.Context, claim *LeaseClaim, ttl time.Duration) (bool, error) {
	return s.store.RenewLease(ctx, claim.TaskID, s.cfg.NodeID, claim.Epoch, ttl)
}

// ReleaseLease gives claim's lease back; the task is runnable again after delay.
func (s *Service) ReleaseLease(ctx context.Context, claim *LeaseClaim, delay time.Duration) error {
	return s.store.ReleaseLease(ctx, claim.TaskID, s.cfg.NodeID, claim.Epoch, delay)
}

// LeasedTask reads a task a worker holds (no ownership check: the lease is the authority).
func (s *Service) LeasedTask(ctx context.Context, claim *LeaseClaim) (*Task, error) {
	return s.store.GetTask(ctx, claim.Tenant, claim.TaskID)
}

// PlanProgress reads the recorded progress of the claimed task's steps.
func (s *Service) PlanProgress(ctx context.Context, claim *LeaseClaim) ([]StepProgress, error) {
	return s.store.PlanProgress(ctx, claim.Tenant, claim.TaskID)
}

// CommandKeyState reads what became of the command recorded under key (ErrNotFound: none).
func (s *Service) CommandKeyState(ctx context.Context, claim *LeaseClaim, key string) (*KeyState, error) {
	return s.store.KeyState(ctx, claim.Tenant, key)
}

// ApprovalOutcomeOf reads what became of an approval of the claimed task.
func (s *Service) ApprovalOutcomeOf(ctx context.Context, claim *LeaseClaim, approvalID string) (*ApprovalOutcome, error) {
	return s.store.ApprovalOutcome(ctx, claim.Tenant, approvalID)
}

// LatestCheckpoint is the id of the claimed task's latest checkpoint.
func (s *Service) LatestCheckpoint(ctx context.Context, claim *LeaseClaim) (string, error) {
	return s.store.LatestCheckpoint(ctx, claim.Tenant, claim.TaskID)
}

// LeasedEvents reads a page of the claimed task's history after seq.
func (s *Service) LeasedEvents(ctx context.Context, claim *LeaseClaim, after int64, limit int) ([]Event, error) {
	return s.store.ListEvents(ctx, claim.Tenant, claim.TaskID, after, limit)
}

// SessionLive tells whether session sid is open on this node (live in its browser and open in
// the database).
func (s *Service) SessionLive(ctx context.Context, tenant, sid string) bool {
	if sid == "" || s.cfg.Browser == nil {
		return false
	}
	if _, ok := s.cfg.Browser.Session(sid); !ok {
		return false
	}
	rec, err := s.store.GetSession(ctx, tenant, sid)
	return err == nil && rec.State == SessionOpen
}

// OpenStep opens step i's sealed fill values (keys.go), only for running it.
func (s *Service) OpenStep(t *Task, i int) (PlanStep, *Error) {
	return s.keys.openStep(t.Tenant, t.ID, i, t.Plan[i])
}

// HoldActForSafety holds an act for a person's approval whatever the approval rules say: the
// autonomous loop's safety role asked for it (gating.go).
func (s *Service) HoldActForSafety(ctx context.Context, call Call, sessionID string, req page.ActRequest, artifactID string,
	timeoutMs int, reason string, r Responder[*ActOutcome],
) (Response, error) {
	return s.holdActForSafety(ctx, call, sessionID, req, artifactID, timeoutMs, reason, r)
}

// SecretsForTask lists the secrets usable on t's origins (never a value).
func (s *Service) SecretsForTask(ctx context.Context, t *Task) ([]SecretInfo, error) {
	return s.secretsForTask(ctx, t)
}

// ExpireTask expires the task (its deadline passed), as upkeep would.
func (s *Service) ExpireTask(ctx context.Context, ref TaskRef) error { return s.expireTask(ctx, ref) }

// BeginModelCall registers a model call with the task's in-flight work, so that cancel_task stops
// it: the returned context ends when the task is cancelled. Call end when the call is over.
func (s *Service) BeginModelCall(ctx context.Context, tenant, taskID string) (callCtx context.Context, end func()) {
	fl := s.flights.begin(ctx, tenant, taskID, true)
	return fl.ctx, func() { s.flights.end(fl) }
}

// LeaseTx is one transaction of a worker: it holds the task (locked) and the worker's lease. Its
// events are the worker's (actor worker:<node>, no command).
type LeaseTx struct {
	ctx context.Context //nolint:containedctx // the transaction's context: a LeaseTx lives only inside InLease's fn
	c   *commandCtx
}

// Task is the task as locked by this transaction; a transition changes its State.
func (l *LeaseTx) Task() *Task { return l.c.t }

// Now is the transaction's time.
func (l *LeaseTx) Now() time.Time { return l.c.now }

// Emit appends an event to the task's history.
func (l *LeaseTx) Emit(typ, cause string, data map[string]any) error {
	return l.c.emit(l.ctx, l.c.t, typ, cause, data)
}

// Transition moves the task by trig (task.Next), with its task.state_changed event.
func (l *LeaseTx) Transition(trig task.Trigger, cause string) error {
	return l.c.transition(l.ctx, l.c.t, trig, cause)
}

// AdmitWaiting admits the tenant's next queued task now that this one freed a place.
func (l *LeaseTx) AdmitWaiting() error { return l.c.admitWaiting(l.ctx, l.c.t) }

// SaveStepProgress records a step's progress.
func (l *LeaseTx) SaveStepProgress(p *StepProgress) error {
	return l.c.tx.SaveStepProgress(l.ctx, l.c.t.Tenant, l.c.t.ID, p)
}

// SetLeaseSession records the browser session the run uses.
func (l *LeaseTx) SetLeaseSession(sessionID string) error {
	return l.c.tx.SetLeaseSession(l.ctx, l.c.t.ID, sessionID)
}

// RecordReply records the delivery of an orchestrator reply (its id and digest) in the inbox,
// beside the model.called event just emitted (the task's last seq). redelivered when the inbox
// already has it; ErrDeliveryReused when its id came before with another answer.
func (l *LeaseTx) RecordReply(replyID string, digest [sha256.Size]byte) (redelivered bool, err error) {
	return recordDelivery(l.ctx, l.c.tx, InboxEntry{
		Delivery: Delivery{Source: SourceOrchestrator, ID: replyID, Digest: digest},
		Tenant:   l.c.t.Tenant, TaskID: l.c.t.ID, EventSeq: l.c.t.LastSeq,
	})
}

// FinishLease ends the lease: the plan is over.
func (l *LeaseTx) FinishLease() error { return l.c.tx.FinishLease(l.ctx, l.c.t.ID) }

// InsertDeadLetter records a plan's dead letter.
func (l *LeaseTx) InsertDeadLetter(d *DeadLetter) error { return l.c.tx.InsertDeadLetter(l.ctx, d) }

// AppendPlanStep appends a proposed step (arguments masked) to an autonomous task's plan.
func (l *LeaseTx) AppendPlanStep(index int, st PlanStep) error {
	return l.c.tx.AppendPlanStep(l.ctx, l.c.t.Tenant, l.c.t.ID, index, st)
}

// KeepArtifact stores content as an artifact of the task (CreatedAt is set here), recording the
// page epoch it was read on when epochID is set.
func (l *LeaseTx) KeepArtifact(art *Artifact, content []byte) error {
	art.CreatedAt = l.c.now
	if art.EpochID != "" {
		if err := l.c.tx.RecordEpoch(l.ctx, l.c.t.Tenant, art.SessionID, art.ContextID, art.EpochID, art.SourceURL); err != nil {
			return err
		}
	}
	return l.c.tx.InsertArtifact(l.ctx, art, content)
}

// InLease runs fn in a transaction that holds claim's task and this worker's lease; actor is the
// worker's subject. ErrLeaseLost when the lease is no longer this worker's, ErrTaskEnded when the
// task ended under it.
func (s *Service) InLease(ctx context.Context, claim *LeaseClaim, actor string, fn func(*LeaseTx) error) error {
	return s.store.InTx(ctx, func(tx Tx) error {
		t, err := tx.LockTask(ctx, claim.Tenant, claim.TaskID)
		if err != nil {
			return err
		}
		if err := tx.LockLease(ctx, claim.TaskID, s.cfg.NodeID, claim.Epoch); err != nil {
			if errors.Is(err, ErrNotFound) {
				if t.State.Terminal() {
					return ErrTaskEnded
				}
				return ErrLeaseLost
			}
			return err
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: actor, Tenant: t.Tenant, TaskID: t.ID, Operation: "plan"},
			t: t, now: s.cfg.Now()}
		before := t.LastSeq
		if err := fn(&LeaseTx{ctx: ctx, c: c}); err != nil {
			return err
		}
		if t.LastSeq != before {
			return tx.UpdateTask(ctx, t)
		}
		return nil
	})
}
