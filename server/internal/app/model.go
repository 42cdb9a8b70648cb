package app

import (
	"encoding/json"
	"time"

	"github.com/originweave/bap/server/internal/task"
)

// Actor is the authenticated caller a command or decision is bound to. Transports fill it from
// verified credentials only, never from a request body.
type Actor struct {
	// Tenant owns every object the actor creates and bounds every object it may see.
	Tenant string
	// Subject identifies the caller within the tenant, e.g. "operator:local" or "client:<id>".
	Subject string
}

// Task is a durable task as the runtime keeps it.
type Task struct {
	ID            string
	Tenant        string
	Goal          string
	State         task.State
	Verification  string // "", "verified", "unverified" or "unmet"
	Policy        PolicySpec
	Postcondition json.RawMessage // nil when none was declared; a JSON object {"all": [...]}
	Deadline      *time.Time
	Plan          []PlanStep
	CreatedBy     string
	// CreatedClient is the OAuth client create_task came through ("" without one): with CreatedBy
	// it is who caused the holds the task's own worker raises (separation of duties).
	CreatedClient string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	EndedAt       *time.Time
	LastSeq       int64
	// ChainDigest and ChainSHA256 are the head of the task's history chain (ADR 0033): the digest
	// of event LastSeq and the public hash through it; nil while no event is chained.
	ChainDigest, ChainSHA256 []byte
	// Result is the verifiable result close_task recorded (nil before, and for a task that was
	// cancelled or expired).
	Result *ResultRecord
	// Mode is ModeInteractive or ModeAutonomous (autonomy.go); ModelPolicy and Budget apply to
	// autonomous tasks only.
	Mode        string
	ModelPolicy ModelPolicy
	Budget      Budget
	// ReplayOf is the task this one replays against its archive ("" for any other task;
	// replay.go, ADR 0035).
	ReplayOf string
	// ReplayMode is how a replay runs: ReplayArchive or ReplayLiveDryRun ("" for any other task).
	ReplayMode string
	// Outcomes is how an ended task ended and each correction of it, oldest first (read by
	// Store.GetTask; empty for a live task). The last is current: State and Verification are its.
	Outcomes []OutcomeRecord
}

// PolicySpec is a task's declared policy, as written by the client.
type PolicySpec struct {
	AllowedOrigins []string
	ApprovalRules  []ApprovalRuleSpec
	// Record archives what the task's browser sessions exchange as WARC (recording.go).
	Record bool
}

// ApprovalRuleSpec marks actions of an effect (optionally only on some origins) as needing approval.
type ApprovalRuleSpec struct {
	Effect  string
	Origins []string
	// TTL is how long its approvals stay pending (0: DefaultApprovalTTL).
	TTL time.Duration
	// Channel is who may answer its approvals: ApprovalChannelApprover ("": the same) or
	// ApprovalChannelElicitation.
	Channel string
}

// PlanStep is one step of a delegated task's plan.
type PlanStep struct {
	Op string
	// Args are the step's arguments. Once the task is recorded, its protected values (what a
	// fill types) are masked here and kept only in Sealed (keys.go, ADR 0015).
	Args        json.RawMessage
	MaxAttempts int // 0: the runtime's default
	// Sealed holds the step's protected values, sealed with the server key for this step alone;
	// nil when it has none. Opened only when the step runs.
	Sealed []byte
}

// Event is one entry of a task's append-only history.
type Event struct {
	ID        string
	TaskID    string
	Tenant    string
	Seq       int64
	Type      string
	Time      time.Time
	Actor     string
	Cause     string
	CommandID string
	Data      map[string]any
	// DataJSON is Data as stored and chained (emit encodes it once).
	DataJSON []byte
	// PrevDigest and Digest chain the event to the one before it (ADR 0033; audit.go).
	PrevDigest, Digest []byte
}

// Receipt is the durable record that a command was accepted and what became of it. It is not task
// success.
type Receipt struct {
	ID          string
	CommandID   string
	TaskID      string
	Operation   string
	Outcome     task.Outcome
	ProblemCode Code // set when Outcome is rejected
	Detail      string
	IssuedAt    time.Time
}

// Approval is a request for a person to approve an action or a step of a task.
type Approval struct {
	ID          string
	TaskID      string
	Tenant      string
	CommandID   string
	State       task.ApprovalState
	Reason      string
	Effect      string
	Digest      []byte // SHA-256 of the held action, when an action is held
	RequestedBy string
	// RequestedClient is the OAuth client of the request ("" without one).
	RequestedClient string
	// OnBehalfOf and OnBehalfClient name the task's creator when the task's own worker raised the
	// hold (a delegated or autonomous task): they caused it too.
	OnBehalfOf, OnBehalfClient string
	RequestedAt                time.Time
	// ExpiresAt is when a still pending approval expires (the rule's TTL after RequestedAt).
	ExpiresAt time.Time
	// Channel is who may answer it: ApprovalChannelApprover or ApprovalChannelElicitation.
	Channel string
	// HeldMethod and HeldURL name the request a form_submission rule holds inside the browser
	// (Digest is then the keyed digest of its method, URL and body); empty for a held action.
	HeldMethod, HeldURL string
	// ScreenshotArtifactID is the page as it was when the request was held ("" when none).
	ScreenshotArtifactID string
	ClosedAt             *time.Time
	Decision             *Decision
	// Decisions is the decision and each correction of its record, oldest first (read by
	// Store.ListApprovals); the last is current and is Decision.
	Decisions []Decision
}

// Decision is the recorded resolution of an approval, bound to the authenticated approver.
type Decision struct {
	Decision  string // "approve" or "deny"
	DecidedBy string
	// Workload is the OAuth client (or local listener, ADR 0031) the decision came through ("" only
	// on records written before migration 0021).
	Workload string
	// Via is how the decision reached the server (ViaSocket, ViaAPI, ViaMCP, ViaElicitation).
	Via       string
	Reason    string
	DecidedAt time.Time
	// ID identifies the decision record; Supersedes is the one it corrects (0 for the first).
	ID, Supersedes int64
}

// PostconditionResult is the evaluation of a task's postcondition at close.
type PostconditionResult struct {
	Satisfied bool
	Unmet     []json.RawMessage
	ContextID string // the browsing context it was evaluated on ("" when none was live)
}
