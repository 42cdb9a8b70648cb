package app

import (
	"context"
	"encoding/json"
	"time"

	"github.com/originweave/bap/server/internal/idempotency"
	"github.com/originweave/bap/server/internal/task"
)

// Store is the durable state of the runtime. Implementations must make every Tx atomic and must
// answer ErrNotFound for objects of another tenant exactly as for unknown ones. Safe for concurrent
// use.
//
// Every capability a use-case needs is part of it, so a store whose method drifts fails to
// compile where it is handed to NewService instead of switching a feature off at run time.
type Store interface {
	RecordStore // protocol records and task results (records.go)
	Owners      // which node holds a session, task or held action (ownership.go)
	PlanStore   // delegated plans and their leases (plan.go)
	SecretStore // stored secrets (secrets.go)
	AuditStore  // the history chain's keys and anchors (audit.go)
	// InTx runs fn in one READ COMMITTED transaction, committing when fn returns nil and rolling
	// back otherwise (including when ctx ends). fn may be retried by the store on a serialisation
	// failure, so it must not have effects outside tx.
	InTx(ctx context.Context, fn func(Tx) error) error
	// GetTask reads one task of tenant.
	GetTask(ctx context.Context, tenant, taskID string) (*Task, error)
	// ListEvents reads up to limit events of a task with seq > after, in seq order.
	ListEvents(ctx context.Context, tenant, taskID string, after int64, limit int) ([]Event, error)
	// RecordedFillValues reads the sealed values of a task's plain fills, by fill command.
	RecordedFillValues(ctx context.Context, tenant, taskID string) (map[string][]byte, error)
	// LastEventData reads the data of a task's latest event of eventType, as stored (ErrNotFound
	// when it has none).
	LastEventData(ctx context.Context, tenant, taskID, eventType string) (json.RawMessage, error)
	// DueForExpiry lists up to limit non-terminal task ids (with their tenants) whose deadline is before now.
	DueForExpiry(ctx context.Context, now time.Time, limit int) ([]TaskRef, error)
	// PurgeIdempotency deletes completed idempotency records that expired before now.
	PurgeIdempotency(ctx context.Context, now time.Time) (int64, error)
	// GetApproval reads an approval of tenant.
	GetApproval(ctx context.Context, tenant, approvalID string) (*Approval, error)
	// DueApprovals lists up to limit pending approvals (of every tenant) whose expires_at is not
	// after now, oldest expiry first.
	DueApprovals(ctx context.Context, now time.Time, limit int) ([]ApprovalRef, error)
	// ListTasks lists tasks of tenant narrowed by f, newest first (the operator's task list).
	ListTasks(ctx context.Context, tenant string, f TaskFilter) ([]*Task, error)
	// ListApprovals lists up to limit approvals of tenant in state, oldest request first.
	ListApprovals(ctx context.Context, tenant string, state task.ApprovalState, limit int) ([]*Approval, error)
	// ListDecisions lists recorded decisions with what they are bound to, newest first.
	ListDecisions(ctx context.Context, f DecisionFilter) ([]DecisionBinding, error)
	// ListReconciliations lists reconciliations of every tenant (open ones unless all).
	ListReconciliations(ctx context.Context, all bool) ([]Reconciliation, error)
	// ListDeadLetters lists up to limit dead letters of tenant, newest first.
	ListDeadLetters(ctx context.Context, tenant string, limit int) ([]DeadLetterRecord, error)
	// GetSession reads a browser session of tenant.
	GetSession(ctx context.Context, tenant, sessionID string) (*SessionRecord, error)
	// GetArtifact reads an artifact reference of tenant with its stored bytes.
	GetArtifact(ctx context.Context, tenant, artifactID string) (*Artifact, []byte, error)
	// ArtifactChain checks the provenance rows an artifact reference names.
	ArtifactChain(ctx context.Context, a *Artifact) (*ArtifactChain, error)
	// IdempotencyRecord reads tenant's record of an Idempotency-Key; ErrNotFound when there is
	// none (replayFirst).
	IdempotencyRecord(ctx context.Context, tenant, key string) (*IdempotencyClaim, error)
	// OrphanedClaims lists in-flight idempotency claims whose node stopped, or last heartbeat
	// before staleBefore.
	OrphanedClaims(ctx context.Context, staleBefore time.Time, limit int) ([]IdempotencyClaim, error)
	// GetCheckpoint reads a checkpoint of tenant.
	GetCheckpoint(ctx context.Context, tenant, checkpointID string) (*Checkpoint, error)
	// OrphanedSessions lists up to limit open browser sessions whose node stopped, or last
	// heartbeat before staleBefore.
	OrphanedSessions(ctx context.Context, staleBefore time.Time, limit int) ([]SessionRecord, error)
	// OpenSessionsOfEndedTasks lists up to limit open browser sessions whose task has ended.
	OpenSessionsOfEndedTasks(ctx context.Context, limit int) ([]SessionRecord, error)
	// RegisterNode records a running node (or refreshes its heartbeat).
	RegisterNode(ctx context.Context, n NodeInfo) error
	// StopNode marks a node stopped.
	StopNode(ctx context.Context, nodeID string) error
	// StopNodesAt marks stopped every running node other than except registered at advertiseURL
	// (none when it is empty) and returns their ids.
	StopNodesAt(ctx context.Context, advertiseURL, except string) ([]string, error)
	// OpenHandoff returns the task's open handoff (ErrNotFound when none is open), for reads.
	OpenHandoff(ctx context.Context, tenant, taskID string) (*Handoff, error)
}

// TaskRef names a task and its tenant.
type TaskRef struct{ Tenant, TaskID string }

// NodeInfo describes a running bap serve process.
type NodeInfo struct {
	ID              string
	AdvertiseURL    string
	SoftwareVersion string
}

// IdempotencyClaim is the record of an Idempotency-Key: claimed in the command's transaction and
// completed with the first response.
type IdempotencyClaim struct {
	Tenant      string
	Key         string
	Operation   string
	Fingerprint idempotency.Fingerprint
	// LegacyFingerprint marks a record whose Fingerprint is unkeyed: written by a release before
	// ADR 0015, it is compared with Call.LegacyFingerprint until it expires.
	LegacyFingerprint bool
	CommandID         string
	NodeID            string
	Completed         bool
	Status            int
	Body              []byte
	ExpiresAt         time.Time
}

// Tx is one open command transaction. Writes may be buffered and sent at commit; reads see earlier
// writes of the same Tx.
type Tx interface {
	ResultTx     // task results (records.go)
	PlanTx       // the workers' leases and step progress (plan.go)
	AutonomousTx // the autonomous loop's plan steps (autonomy.go)
	SecretTx     // secret writes with their key's answer (secrets.go)
	InboxTx      // inbound deliveries, recorded with their effect (inbox.go)
	// RecordFillValue keeps the sealed value a recording task's plain fill (commandID) typed.
	RecordFillValue(ctx context.Context, tenant, taskID, commandID string, sealed []byte) error
	// ClaimIdempotency records c as in flight. When the key is already recorded it returns that
	// record and claimed=false, waiting first for any transaction that holds the key.
	//
	// As a transaction's first statement the claim may be only queued (ADR 0027): claimed=true is
	// then confirmed by the transaction's next read or its commit, and when the key turns out to
	// be taken — or the transaction fails before that — the store runs it again with the claim
	// answered first. So until its first read, a command does nothing outside its transaction.
	ClaimIdempotency(ctx context.Context, c IdempotencyClaim) (existing *IdempotencyClaim, claimed bool, err error)
	// CompleteIdempotency stores the first response of a claimed key.
	CompleteIdempotency(ctx context.Context, tenant, key string, status int, body []byte) error

	// DeleteIdempotency forgets a claim whose command never committed.
	DeleteIdempotency(ctx context.Context, tenant, key string) error
	// LockCommand reads a recorded command that has no receipt yet and locks it; ErrNotFound when
	// it was never recorded or already has a receipt.
	LockCommand(ctx context.Context, tenant, commandID string) (*Command, error)
	// GetReconciliation reads a reconciliation of any tenant (operators settle them), locking it.
	GetReconciliation(ctx context.Context, id string) (*Reconciliation, error)
	// ResolveReconciliation writes a reconciliation's resolution.
	ResolveReconciliation(ctx context.Context, r *Reconciliation) error
	// CountOpenReconciliations counts a task's open reconciliations.
	CountOpenReconciliations(ctx context.Context, taskID string) (int, error)
	// OpenReconciliation opens a reconciliation for an interrupted side-effecting command.
	OpenReconciliation(ctx context.Context, tenant, reconciliationID, taskID, commandID string) error

	// InsertTask creates a task with its policy and plan.
	InsertTask(ctx context.Context, t *Task) error
	// LockTask reads a task of tenant and locks it until the end of the transaction.
	LockTask(ctx context.Context, tenant, taskID string) (*Task, error)
	// UpdateTask writes a task's state, verification, timestamps and last_seq.
	UpdateTask(ctx context.Context, t *Task) error
	// AppendEvent appends an event (seq already assigned) and its outbox message.
	AppendEvent(ctx context.Context, e *Event) error
	// AfterCommit runs fn once the transaction has committed (never when it rolls back or is run
	// again): what acts on the transaction's outcome outside it must not race its commit.
	AfterCommit(fn func())
	// BeforeCommit runs fn after the command's work, just before its transaction commits (in it):
	// what must see the command's final state, such as the anchor of a task that ended.
	BeforeCommit(fn func(ctx context.Context) error)
	// AuditKeys reads every audit signing key, newest first, its private key sealed.
	AuditKeys(ctx context.Context) ([]SealedAuditKey, error)
	// LockAuditKeys takes, until the transaction ends, the lock under which a node creates the
	// first audit key: two nodes never both create one.
	LockAuditKeys(ctx context.Context) error
	// InsertAuditKey stores a new audit signing key.
	InsertAuditKey(ctx context.Context, k SealedAuditKey) error
	// InsertAnchor records an anchor of a task's chain head (none when that head is anchored).
	InsertAnchor(ctx context.Context, a *AnchorRecord) error
	// RecordCommand records a command before anything it causes.
	RecordCommand(ctx context.Context, c *Command) error
	// IssueReceipt records the receipt of a command of tenant.
	IssueReceipt(ctx context.Context, tenant string, r *Receipt) error
	// RecordDecision records a policy decision taken by the command (migration 0014).
	RecordDecision(ctx context.Context, d AuthDecision) error
	// OldestWaitingTask finds the oldest task of tenant still in `created` (awaiting admission),
	// locking it and skipping tasks another transaction holds.
	OldestWaitingTask(ctx context.Context, tenant string) (*Task, error)
	// CountActiveTasks counts tenant's non-terminal tasks past admission.
	CountActiveTasks(ctx context.Context, tenant string) (int, error)
	// CountQueuedTasks counts tenant's waiting tasks: in `created`, or `admitted` with a plan.
	CountQueuedTasks(ctx context.Context, tenant string) (int, error)

	// InsertSession records a browser session.
	InsertSession(ctx context.Context, s *SessionRecord) error
	// LockSession reads a browser session of tenant and locks it.
	LockSession(ctx context.Context, tenant, sessionID string) (*SessionRecord, error)
	// UpdateSession writes a session's state and end time.
	UpdateSession(ctx context.Context, s *SessionRecord) error
	// CountOpenSessions counts tenant's open browser sessions.
	CountOpenSessions(ctx context.Context, tenant string) (int, error)
	// RecordContext records a browsing context of a session (idempotent).
	RecordContext(ctx context.Context, tenant, sessionID, contextID, openerContextID string) error
	// RecordEpoch records a document epoch of a context (idempotent; records the context too).
	RecordEpoch(ctx context.Context, tenant, sessionID, contextID, epochID, url string) error
	// InsertArtifact stores content by its SHA-256 (once) and records the artifact reference.
	InsertArtifact(ctx context.Context, a *Artifact, content []byte) error
	// InsertCheckpoint records a checkpoint (its state artifact is inserted first).
	InsertCheckpoint(ctx context.Context, c *Checkpoint) error
	// TaskHasCheckpoint tells whether a task has any checkpoint.
	TaskHasCheckpoint(ctx context.Context, tenant, taskID string) (bool, error)
	// InsertHandoff records a handoff just opened (at most one is open per task).
	InsertHandoff(ctx context.Context, h *Handoff) error
	// OpenHandoff returns the task's open handoff (ErrNotFound when none is open).
	OpenHandoff(ctx context.Context, tenant, taskID string) (*Handoff, error)
	// CloseHandoff writes the end of an open handoff (its state, end, ender, command, checkpoint).
	CloseHandoff(ctx context.Context, h *Handoff) error
	// CountTaskOpenSessions counts a task's open browser sessions.
	CountTaskOpenSessions(ctx context.Context, tenant, taskID string) (int, error)

	// InsertApproval records a pending approval.
	InsertApproval(ctx context.Context, a *Approval) error
	// GetApproval reads an approval of tenant without locking it.
	GetApproval(ctx context.Context, tenant, approvalID string) (*Approval, error)
	// LockApproval reads an approval of tenant and locks it.
	LockApproval(ctx context.Context, tenant, approvalID string) (*Approval, error)
	// CloseApproval writes an approval's new state and, when present, its decision.
	CloseApproval(ctx context.Context, a *Approval, commandID string) error
	// CorrectApprovalDecision records d, a correction of a's decision record, superseding its
	// current one (migration 0013).
	CorrectApprovalDecision(ctx context.Context, a *Approval, d Decision) error
	// CorrectTaskOutcome records o, a correction of how ended task t ended, superseding its
	// current outcome (migration 0013); UpdateTask then writes the task's state and verification.
	CorrectTaskOutcome(ctx context.Context, t *Task, o OutcomeRecord) error
	// PendingApprovals lists the pending approvals of a task, locked.
	PendingApprovals(ctx context.Context, tenant, taskID string) ([]*Approval, error)
}

// Command is the record of one mutating request against a task.
type Command struct {
	ID            string
	Tenant        string
	TaskID        string
	Operation     string
	Actor         string
	SideEffecting bool
	NodeID        string
	RecordedAt    time.Time

	lease *LeaseFence // the worker lease it must run under (not stored)
	// What its decision record binds besides the command itself (decisions.go): the principal's
	// client and channel, and what the command's steps noted.
	client, via string
	note        decisionNote
}
