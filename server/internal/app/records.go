package app

import (
	"context"
	"time"
)

// RecordStore is the part of the store that keeps the protocol records — node handles and the
// adapters each node serves — and task results (migrations/0012, ADR 0019).
type RecordStore interface {
	// RecordHandles records the node handles a read handed out, under their document epoch (the
	// epoch and its browsing context are recorded too when the browser's events have not yet).
	RecordHandles(ctx context.Context, tenant, sessionID string, b HandleBatch) error
	// NodeHandle reads the record of a handle of tenant, preferring the one session sessionID
	// issued; ErrNotFound when no session of the tenant issued it.
	NodeHandle(ctx context.Context, tenant, handle, sessionID string) (*HandleRecord, error)
	// RecordAdapters replaces the protocol adapters node serves.
	RecordAdapters(ctx context.Context, nodeID string, adapters []ProtocolAdapter) error
	// NodeAdapters lists the protocol adapters node serves, by adapter id.
	NodeAdapters(ctx context.Context, nodeID string) ([]ProtocolAdapter, error)
	// GetTaskResult reads a task's result; ErrNotFound when it has none.
	GetTaskResult(ctx context.Context, tenant, taskID string) (*ResultRecord, error)
	// TaskResultByManifest reads the result whose manifest is artifactID; ErrNotFound when none.
	TaskResultByManifest(ctx context.Context, tenant, artifactID string) (*ResultRecord, error)
	// ManifestReceipts lists the receipts of a task's commands whose receipt.issued event has
	// seq <= throughSeq, in seq order.
	ManifestReceipts(ctx context.Context, tenant, taskID string, throughSeq int64) ([]ManifestReceipt, error)
}

// ResultTx is the part of a transaction that writes task results.
type ResultTx interface {
	// ManifestReceipts is RecordStore.ManifestReceipts inside the transaction.
	ManifestReceipts(ctx context.Context, tenant, taskID string, throughSeq int64) ([]ManifestReceipt, error)
	// TaskEvidence lists a task's evidence artifacts (screenshots, DOM and accessibility
	// snapshots), oldest first.
	TaskEvidence(ctx context.Context, tenant, taskID string) ([]*Artifact, error)
	// InsertTaskResult writes a task's result and its evidence rows (once: results never change).
	InsertTaskResult(ctx context.Context, r *ResultRecord) error
}

// HandleBatch is the handles one observe or query_nodes handed out, all of one document epoch.
type HandleBatch struct {
	ContextID, EpochID, URL string
	// Opener is the context that opened ContextID, when known ("" for a first tab).
	Opener  string
	Handles []string
	Roles   []string // the role of each handle's node, parallel to Handles
}

// HandleRecord is what the runtime recorded of a node handle.
type HandleRecord struct {
	Handle       string
	SessionID    string
	SessionState string // SessionOpen, SessionClosed or SessionLost
	EpochID      string
}

// ProtocolAdapter is one protocol a node serves: BAP over HTTP, MCP, CDP to its browser.
type ProtocolAdapter struct {
	ID              string // "bap-http", "mcp", "cdp"
	Name            string
	ProtocolVersion string
	// Implementation names what implements it when that is not BAP itself (the browser's
	// product and version); "" otherwise.
	Implementation string
}

// Protocol adapter ids of protocol_adapter.
const (
	AdapterBAPHTTP = "bap-http"
	AdapterMCP     = "mcp"
	AdapterCDP     = "cdp"
	AdapterBiDi    = "bidi" // WebDriver BiDi, to Firefox ESR
)

// ResultRecord is a finished task's verifiable result: what close_task found, whether it was
// checked (Verification, apart from the task's state, which says it finished), and the digest of
// the canonical manifest of its receipts and evidence (result.go).
type ResultRecord struct {
	Tenant, TaskID string
	CommandID      string // the close_task command
	Summary        string
	// VerificationState is VerificationVerified or VerificationUnverified; VerificationReason
	// says why, always.
	VerificationState, VerificationReason string
	// ThroughSeq bounds the task history the manifest covers (its receipts).
	ThroughSeq int64
	// ManifestArtifactID is the manifest, stored as an artifact of kind result_manifest; Digest
	// is its SHA-256 (64 lowercase hex).
	ManifestArtifactID string
	Digest             string
	Evidence           []*Artifact
	CreatedAt          time.Time
	// Anchor is the signed statement of the task's history-chain head made when it ended (nil
	// for a task that ended before the chain existed; audit.go).
	Anchor *AnchorRecord
	// Replay is a replay task's verdict (its replay.finished event), nil for any other task.
	Replay *ReplayVerdict
}

// ManifestReceipt is one receipt as a result manifest lists it.
type ManifestReceipt struct {
	ReceiptID   string
	CommandID   string
	Operation   string
	Outcome     string
	ProblemCode string // "" unless rejected
}

// Result verification states: `verified` only when the task's postcondition held and evidence
// of the page it held on was captured; `unverified` otherwise, whatever a model or worker said.
const (
	VerificationVerified   = "verified"
	VerificationUnverified = "unverified"
)

// MCPTaskRecord is the durable binding of one MCP Tasks-extension task (protocol_session_binding,
// migrations/0016): which BAP task and session its tool call drives, whose it is, and the state
// the adapter presented, so that any node answers tasks/get (ADR 0019).
type MCPTaskRecord struct {
	Tenant, Subject string
	// ID is the MCP task id (external_ref).
	ID string
	// BAPTaskID is the BAP task the call drives, given directly (close_task) or through its
	// session (navigate, act); SessionID is that session, when there is one.
	BAPTaskID, SessionID string
	// Status is the extension's: working, input_required, completed, failed or cancelled.
	Status, Message string
	// Outcome is the terminal answer, {"result": …} or {"error": …}; nil before the end.
	Outcome []byte
	// InputRequests are what an input_required task waits for: the extension's `inputRequests`
	// object (request key → request), nil in any other status (and on a binding recorded before
	// they were, migrations/0022).
	InputRequests    []byte
	Created, Updated time.Time
	Expires          time.Time
	// NodeID is the node that runs the task (written at bind; "" for tasks bound before it was
	// recorded). RunnerGone, on a read, says that node stopped or missed its heartbeats: a task
	// it left unended will never be ended by it.
	NodeID     string
	RunnerGone bool
}
