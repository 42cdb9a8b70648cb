package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/admission"
	"github.com/originweave/bap/server/internal/historychain"
	"github.com/originweave/bap/server/internal/idempotency"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/originweave/bap/server/internal/task"
)

// DefaultNodeStaleAfter is how long a node may miss heartbeats before it is taken for dead: its
// in-flight commands are classified as interrupted, and the MCP tasks it ran are ended.
const DefaultNodeStaleAfter = 10 * time.Second

// Config tunes the runtime's use-cases.
type Config struct {
	// NodeID identifies this process in claims and commands.
	NodeID string
	// IdempotencyTTL is how long a completed key keeps its first response (default 24 h).
	IdempotencyTTL time.Duration
	// MaxActiveTasksPerTenant caps admitted, non-terminal tasks per tenant; 0 means no cap. Tasks
	// over the cap wait in `created` and are admitted, oldest first, when capacity frees.
	MaxActiveTasksPerTenant int
	// InFlightRetryAfter is the Retry-After given with idempotency_in_flight (default 1 s).
	InFlightRetryAfter time.Duration
	// InterruptedResponse renders the response a key replays after recovery classified its
	// interrupted command (CONTRACT: 200 with the receipt). Required for recovery.
	InterruptedResponse func(rc *Receipt) (Response, error)
	// Browser is the browser adapter; nil answers browser operations 503 browser_unavailable.
	Browser Browser
	// Recording archives the browser sessions of tasks with policy.record (recording.go); nil
	// refuses to open a session of such a task.
	Recording Recording
	// Orchestrator is the model orchestrator port (orchestrator.go); nil refuses autonomous tasks
	// with 503 orchestrator_unavailable.
	Orchestrator Orchestrator
	// MaxSessionsPerTenant caps open browser sessions per tenant (0: no cap) → 429 (limits.go).
	MaxSessionsPerTenant int
	// MaxQueuedTasksPerTenant caps a tenant's waiting tasks — in `created` awaiting admission, or
	// admitted with a plan awaiting a worker (0: no cap); create_task beyond it → 429 (limits.go).
	MaxQueuedTasksPerTenant int
	// Refusals counts capacity refusals by reason for /metrics (nil: not counted).
	Refusals *admission.Refusals
	// NodeStaleAfter is how long a node may miss heartbeats before its in-flight commands are
	// classified as interrupted (default DefaultNodeStaleAfter; the heartbeat runs every upkeep
	// round).
	NodeStaleAfter time.Duration
	// SoftwareVersion and ProtocolVersion are this build's versions, recorded with each
	// checkpoint; a checkpoint restores only under the same major.minor of both.
	SoftwareVersion, ProtocolVersion string
	// CheckpointMaxAge is how old a checkpoint may be when a session is restored from it
	// (default 24 h); an older one answers 409 checkpoint_stale.
	CheckpointMaxAge time.Duration
	// CancelDeadline bounds how long cancel_task waits for the task's in-flight commands to stop
	// and record their receipts before it cancels the task (default 3 s).
	CancelDeadline time.Duration
	// ServerKey keys the fingerprints of idempotent requests and the digests of held actions,
	// and seals plan fill values (ADR 0015; keys.go). Every node of a cluster needs the same. nil:
	// a random key of this Service alone (tests, and embeddings whose fingerprints and sealed
	// values need not outlive the process).
	ServerKey *serverkey.Key
	// AnchorInterval is how often a task whose history grows is anchored by Upkeep (default
	// DefaultAnchorInterval); a task is anchored when it ends in any case.
	AnchorInterval time.Duration
	// Now is the clock (default time.Now); tests may fix it.
	Now func() time.Time
	// Logger receives operational logs (default slog.Default()).
	Logger *slog.Logger
	// Tracer records spans of commands and browser calls (tracing.go); nil records none.
	Tracer Tracer
}

func (c *Config) setDefaults() {
	if c.IdempotencyTTL <= 0 {
		c.IdempotencyTTL = 24 * time.Hour
	}
	if c.InFlightRetryAfter <= 0 {
		c.InFlightRetryAfter = time.Second
	}
	if c.NodeStaleAfter <= 0 {
		c.NodeStaleAfter = DefaultNodeStaleAfter
	}
	if c.CheckpointMaxAge <= 0 {
		c.CheckpointMaxAge = 24 * time.Hour
	}
	if c.CancelDeadline <= 0 {
		c.CancelDeadline = 3 * time.Second
	}
	if c.AnchorInterval <= 0 {
		c.AnchorInterval = DefaultAnchorInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Tracer = TracerOrNone(c.Tracer)
}

// Validate reports a configuration the service cannot run with.
func (c *Config) Validate() error {
	if c.NodeID == "" {
		return errors.New("app: Config.NodeID is required")
	}
	if c.MaxActiveTasksPerTenant < 0 {
		return errors.New("app: Config.MaxActiveTasksPerTenant must not be negative")
	}
	return nil
}

// Service runs BAP's task commands and queries. Safe for concurrent use.
type Service struct {
	store         Store
	cfg           Config
	browserEvents chan browserEvent
	endedTasks    chan struct{} // wakes RunSessionCloser (session_end.go)
	held          sync.Map      // approval id → held: actions waiting for their approval
	lastUsed      sync.Map      // task id → lastUse: where its postcondition is evaluated
	handles       handleCache   // the node handles already recorded, per live session (handles.go)
	flights       flights       // two-phase commands between phase 1 and phase 3 (cancel.go)
	// running holds the ids of the two-phase commands this process is executing, each with a
	// channel closed when its run ends: recovery never classifies them, even when a stalled
	// heartbeat makes this node look dead, and a redelivery of the delivery that started one waits
	// for it (twophase.go, inbox.go).
	running sync.Map
	// deliveryWaits, when set (tests), is called when a redelivery starts waiting for its first
	// delivery's command.
	deliveryWaits func()

	// sessions holds the reservations of browser sessions being opened on this node (limits.go).
	sessions admission.Reservations

	keys keyring // what the server key derives (keys.go)
	// audit holds the audit signing keys (audit.go).
	audit auditKeys

	answered answeredKeys // the keys whose first response this process recorded (answered.go)
}

// NewService builds a Service over store.
func NewService(store Store, cfg Config) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{store: store, cfg: cfg, browserEvents: make(chan browserEvent, 4096),
		endedTasks: make(chan struct{}, 1), keys: newKeyring(cfg.ServerKey), answered: newAnsweredKeys()}, nil
}

// Call is one mutating request as a transport received it, after authentication and validation.
type Call struct {
	Actor Actor
	// ClientID is the caller's workload: the OAuth client its credential was issued to, or the
	// local profile's listener (WorkloadLocalSocket, WorkloadLocalAgent), WorkloadWorker for a
	// task's worker.
	ClientID string
	// Via is how the call reached the server (ViaSocket, ViaAPI, ViaMCP, ViaElicitation; "" is
	// ViaAPI); a decision records it.
	Via            string
	Operation      string
	IdempotencyKey string
	// Fingerprint is the request's keyed fingerprint (Service.Fingerprints).
	Fingerprint idempotency.Fingerprint
	// LegacyFingerprint is its unkeyed fingerprint of the releases before ADR 0015, compared only
	// with a record such a release wrote (zero: never matches one). Removable once no record of
	// those releases can be within its retention.
	LegacyFingerprint idempotency.Fingerprint
	// Lease fences a plan worker's command: it is recorded only while the worker still holds the
	// task's lease at that epoch (a stalled worker whose lease was taken over records nothing,
	// so it dispatches nothing). nil for clients.
	Lease *LeaseFence
	// Delivery is set on a command another node forwarded here (its node credential's id): it is
	// recorded in the inbox with the command, and a redelivery is answered from the first
	// response (inbox.go). nil for a request a client sent this node.
	Delivery *Delivery
}

// LeaseFence names the lease a worker's command runs under.
type LeaseFence struct {
	NodeID string
	Epoch  int64
}

// Response is the exact answer to a mutating request: what the first request got, stored with its
// command and replayed for later requests with the same key.
type Response struct {
	Status   int
	Body     []byte
	Replayed bool
}

// Responder renders a command's outcome into the transport's response bytes. It is called inside
// the command's transaction so that the stored first response and the command commit together;
// it must be deterministic and free of side effects. R is the command's result type: each command
// takes the responder of its own result, so no assertion recovers it.
type Responder[R any] interface {
	// Success renders the result of an accepted command.
	Success(result R) (Response, error)
	// Failure renders a refusal that was recorded with the rejected receipt rc.
	Failure(e *Error, rc *Receipt) (Response, error)
}

// refusal is a command refused by the task's state or policy and recorded (its rejected receipt,
// its stored response): it commits, where a plain error rolls the command back.
type refusal struct {
	err     *Error
	receipt *Receipt
}

// refused is exec's answer of a recorded refusal: reject's (refusal, error) as runCommand's
// (result, refusal, error).
func refused[R any](rf *refusal, err error) (none R, _ *refusal, _ error) { return none, rf, err }

// runCommand executes one mutating request: claim the key, run exec, store the rendered response,
// all in one transaction. exec records the command and its receipt and returns exactly one of:
// a result (rendered by r.Success), a recorded refusal (rendered by r.Failure; both commit), or an
// error, which rolls everything back — an *Error then means the request was refused before it
// became a command and is not recorded under its key. (A function, not a method: Go methods take
// no type parameters.)
func runCommand[R any](ctx context.Context, s *Service, call Call, r Responder[R],
	exec func(ctx context.Context, tx Tx, cmd *Command) (R, *refusal, error),
) (Response, error) {
	ctx, sp := s.startCommand(ctx, call, "")
	if resp, ok, err := s.replayAnswered(ctx, call); ok || err != nil { // a retry: one read (answered.go)
		endCommand(sp, nil, resp, err)
		return resp, err
	}
	var resp Response
	var cmd *Command
	err := s.store.InTx(ctx, func(tx Tx) error {
		resp = Response{}
		cmd = s.newCommand(call)
		done, replay, err := s.claim(ctx, tx, call, cmd)
		if err != nil || done {
			resp = replay
			return err
		}
		result, refused, err := exec(ctx, tx, cmd)
		switch {
		case err != nil:
			return err
		case refused != nil:
			resp, err = r.Failure(refused.err, refused.receipt)
		default:
			resp, err = r.Success(result)
		}
		if err != nil {
			return fmt.Errorf("rendering response: %w", err)
		}
		return tx.CompleteIdempotency(ctx, call.Actor.Tenant, call.IdempotencyKey, resp.Status, resp.Body)
	})
	endCommand(sp, cmd, resp, err)
	s.noteAnswered(call, resp, err)
	return resp, err
}

// newCommand is the record of call's command, bound to its actor and this node.
func (s *Service) newCommand(call Call) *Command {
	return &Command{
		ID: ids.New(ids.Command), Tenant: call.Actor.Tenant, Operation: call.Operation,
		Actor: call.Actor.Subject, NodeID: s.cfg.NodeID, RecordedAt: s.cfg.Now(), lease: call.Lease,
		client: call.ClientID, via: call.Via,
	}
}

// commandCtx carries one command's task, transaction and actor through its steps.
type commandCtx struct {
	s   *Service
	tx  Tx
	cmd *Command
	t   *Task
	now time.Time
}

// emit appends an event to the task's history (and outbox), assigning the next seq.
func (c *commandCtx) emit(ctx context.Context, t *Task, typ, cause string, data map[string]any) error {
	t.LastSeq++
	if data == nil {
		data = map[string]any{}
	}
	raw, err := json.Marshal(data) // as stored and as chained
	if err != nil {
		return fmt.Errorf("encoding %s event data: %w", typ, err)
	}
	// The database keeps microseconds: the chained time is the stored one.
	e := &Event{
		ID: ids.New(ids.Event), TaskID: t.ID, Tenant: t.Tenant, Seq: t.LastSeq, Type: typ, Time: c.now.Truncate(time.Microsecond),
		Actor: c.cmd.Actor, Cause: cause, CommandID: c.cmd.ID, Data: data, DataJSON: raw,
	}
	if err := c.s.keys.link(t, e); err != nil {
		return err
	}
	if err := c.tx.AppendEvent(ctx, e); err != nil {
		return fmt.Errorf("appending %s event to task %s: %w", typ, t.ID, err)
	}
	return nil
}

// transition moves t by trigger, recording a task.state_changed event; an impossible transition
// is an *Error with code invalid_transition.
func (c *commandCtx) transition(ctx context.Context, t *Task, trig task.Trigger, cause string) error {
	next, err := task.Next(t.State, trig)
	if err != nil {
		return Errorf(CodeInvalidTransition, "task is %s; %s is not possible from that state", t.State, trig)
	}
	from := t.State
	t.State = next
	t.UpdatedAt = c.now
	if next.Terminal() {
		end := c.now
		t.EndedAt = &end
		c.anchorAtCommit(t, historychain.ReasonTaskEnded)
		c.s.lastUsed.Delete(t.ID)               // nothing evaluates an ended task's page again
		c.tx.AfterCommit(c.s.closeSessionsSoon) // its browser sessions are closed (session_end.go)
	}
	if err := c.emit(ctx, t, "task.state_changed", cause, map[string]any{
		"from": string(from), "to": string(next), "trigger": string(trig),
	}); err != nil {
		return err
	}
	if next.Terminal() && from == task.WaitingForExternalInput {
		return c.endHandoff(ctx, t, cause) // a task that ends leaves no handoff open
	}
	return nil
}

// record records the command against t (locked or just created) with a command.recorded event.
func (c *commandCtx) record(ctx context.Context, t *Task, sideEffecting bool) error {
	c.t = t
	c.cmd.TaskID = t.ID
	c.cmd.SideEffecting = sideEffecting
	if err := c.tx.RecordCommand(ctx, c.cmd); err != nil {
		return fmt.Errorf("recording command: %w", err)
	}
	return c.emit(ctx, t, "command.recorded", c.cmd.Operation, map[string]any{
		"command_id": c.cmd.ID, "operation": c.cmd.Operation,
	})
}

// receipt issues the command's receipt, records receipt.issued and writes the task row.
func (c *commandCtx) receipt(ctx context.Context, outcome task.Outcome, code Code, detail string) (*Receipt, error) {
	r := &Receipt{
		ID: ids.New(ids.Receipt), CommandID: c.cmd.ID, TaskID: c.t.ID, Operation: c.cmd.Operation,
		Outcome: outcome, ProblemCode: code, Detail: detail, IssuedAt: c.now,
	}
	if err := c.tx.IssueReceipt(ctx, c.cmd.Tenant, r); err != nil {
		return nil, fmt.Errorf("issuing receipt: %w", err)
	}
	if err := c.recordDecision(ctx, r); err != nil { // decisions.go
		return nil, err
	}
	data := map[string]any{"receipt_id": r.ID, "command_id": r.CommandID, "operation": r.Operation, "outcome": string(r.Outcome)}
	if code != "" {
		data["problem_code"] = string(code)
	}
	if err := c.emit(ctx, c.t, "receipt.issued", c.cmd.Operation, data); err != nil {
		return nil, err
	}
	if err := c.tx.UpdateTask(ctx, c.t); err != nil {
		return nil, fmt.Errorf("writing task %s: %w", c.t.ID, err)
	}
	return r, nil
}

// reject records the command as rejected with e and returns the refusal to render.
func (c *commandCtx) reject(ctx context.Context, e *Error) (*refusal, error) {
	rc, err := c.receipt(ctx, task.Rejected, e.Code, e.Detail)
	if err != nil {
		return nil, err
	}
	return &refusal{err: e, receipt: rc}, nil
}

// beginOnTask starts a command against an existing task: lock it, expire it if its deadline
// passed, and record the command.
func (s *Service) beginOnTask(ctx context.Context, tx Tx, cmd *Command, taskID string, sideEffecting bool) (*commandCtx, error) {
	c := &commandCtx{s: s, tx: tx, cmd: cmd, now: s.cfg.Now()}
	t, err := tx.LockTask(ctx, cmd.Tenant, taskID)
	if err != nil {
		return nil, err
	}
	if cmd.lease != nil {
		if err := checkLease(ctx, tx, taskID, cmd.lease); err != nil {
			return nil, err
		}
	}
	if err := c.record(ctx, t, sideEffecting); err != nil {
		return nil, err
	}
	if err := c.expireIfDue(ctx, t); err != nil {
		return nil, err
	}
	return c, nil
}

// expireIfDue moves a task whose deadline passed to `expired`.
func (c *commandCtx) expireIfDue(ctx context.Context, t *Task) error {
	if t.Deadline == nil || t.State.Terminal() || c.now.Before(*t.Deadline) {
		return nil
	}
	if err := c.transition(ctx, t, task.Expire, "deadline"); err != nil {
		return err
	}
	if err := c.cancelPendingApprovals(ctx, t, task.ApprovalExpired); err != nil {
		return err
	}
	return c.admitWaiting(ctx, t)
}

// admitWaiting admits the oldest task waiting for capacity, if the tenant has room now that freed
// (just moved to a terminal state) no longer counts.
func (c *commandCtx) admitWaiting(ctx context.Context, freed *Task) error {
	max := c.s.cfg.MaxActiveTasksPerTenant
	if max == 0 {
		return nil
	}
	tenant := freed.Tenant
	// Write the freed task first so that the count below sees it terminal.
	if err := c.tx.UpdateTask(ctx, freed); err != nil {
		return err
	}
	n, err := c.tx.CountActiveTasks(ctx, tenant)
	if err != nil {
		return err
	}
	if n >= max {
		return nil
	}
	w, err := c.tx.OldestWaitingTask(ctx, tenant)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.transition(ctx, w, task.Admit, "capacity_freed"); err != nil {
		return err
	}
	return c.tx.UpdateTask(ctx, w)
}

// cancelPendingApprovals closes every pending approval of t with state (cancelled or expired).
func (c *commandCtx) cancelPendingApprovals(ctx context.Context, t *Task, state task.ApprovalState) error {
	pending, err := c.tx.PendingApprovals(ctx, t.Tenant, t.ID)
	if err != nil {
		return err
	}
	for _, a := range pending {
		c.s.forgetHeld(ctx, a.ID) // a held action of a closed approval never runs
		a.State = state
		closed := c.now
		a.ClosedAt = &closed
		if err := c.tx.CloseApproval(ctx, a, c.cmd.ID); err != nil {
			return err
		}
		if err := c.emit(ctx, t, "approval.resolved", c.cmd.Operation, map[string]any{
			"approval_id": a.ID, "state": string(a.State),
		}); err != nil {
			return err
		}
	}
	return nil
}
