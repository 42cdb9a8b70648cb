// Package worker drives delegated and autonomous tasks (ADR 0011, ADR 0013, docs/delegated.md,
// docs/orchestrator.md): the pool that claims a task's lease, one worker's run of a plan, the
// goal-driven loop with its roles, and the masking of what a model sees. It drives the use-cases
// only through app's exported API, as a transport does: the same command methods the HTTP API
// calls (Navigate, Act, CreateBrowserSession, CloseTask…), under a Call of the actor
// "worker:<node>" fenced by the lease, plus the driver seam (claim and renew a lease, read a
// task's progress, record a run's progress in a transaction that holds the lease). It never
// touches the store.
package worker

import (
	"context"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/idempotency"
	"github.com/originweave/bap/server/internal/page"
)

// Service is what the workers use of the use-cases (implemented by *app.Service).
type Service interface {
	// NodeID is this node's id (the lease holder).
	NodeID() string
	// Now is the service's clock.
	Now() time.Time

	ClaimLease(ctx context.Context, ttl time.Duration) (*app.LeaseClaim, error)
	RenewLease(ctx context.Context, claim *app.LeaseClaim, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, claim *app.LeaseClaim, delay time.Duration) error
	InLease(ctx context.Context, claim *app.LeaseClaim, actor string, fn func(*app.LeaseTx) error) error

	LeasedTask(ctx context.Context, claim *app.LeaseClaim) (*app.Task, error)
	// CompareReplayStep compares step i of a replay task with the recorded step and records the
	// comparison, and the verdict when the replay ends there (app/replay.go).
	CompareReplayStep(ctx context.Context, claim *app.LeaseClaim, actor string, i int, commandID string) (app.ReplayStepResult, error)
	// ReplayStepFailed records that step i of a replay task failed with code: its divergence.
	ReplayStepFailed(ctx context.Context, claim *app.LeaseClaim, actor string, i int, code app.Code) error
	PlanProgress(ctx context.Context, claim *app.LeaseClaim) ([]app.StepProgress, error)
	CommandKeyState(ctx context.Context, claim *app.LeaseClaim, key string) (*app.KeyState, error)
	ApprovalOutcomeOf(ctx context.Context, claim *app.LeaseClaim, approvalID string) (*app.ApprovalOutcome, error)
	LatestCheckpoint(ctx context.Context, claim *app.LeaseClaim) (string, error)
	LeasedEvents(ctx context.Context, claim *app.LeaseClaim, after int64, limit int) ([]app.Event, error)
	SessionLive(ctx context.Context, tenant, sessionID string) bool
	OpenStep(t *app.Task, i int) (app.PlanStep, *app.Error)
	Fingerprints() *idempotency.Fingerprinter
	SecretsForTask(ctx context.Context, t *app.Task) ([]app.SecretInfo, error)
	ExpireTask(ctx context.Context, ref app.TaskRef) error
	BeginModelCall(ctx context.Context, tenant, taskID string) (context.Context, func())

	// The commands, as a transport calls them.
	CreateBrowserSession(ctx context.Context, call app.Call, taskID string, req app.SessionRequest, r app.Responder[*app.SessionResult]) (app.Response, error)
	ResumeTask(ctx context.Context, call app.Call, taskID, checkpointID string, r app.Responder[*app.ResumeResult]) (app.Response, error)
	CheckpointBrowserSession(ctx context.Context, call app.Call, sessionID string, r app.Responder[*app.CheckpointResult]) (app.Response, error)
	Navigate(ctx context.Context, call app.Call, sessionID string, req page.NavigateRequest, timeoutMs int, r app.Responder[*app.NavigateResult]) (app.Response, error)
	Act(ctx context.Context, call app.Call, sessionID string, req page.ActRequest, artifactID string, timeoutMs int, r app.Responder[*app.ActOutcome]) (app.Response, error)
	HoldActForSafety(ctx context.Context, call app.Call, sessionID string, req page.ActRequest, artifactID string, timeoutMs int,
		reason string, r app.Responder[*app.ActOutcome]) (app.Response, error)
	CaptureEvidence(ctx context.Context, call app.Call, sessionID string, req app.EvidenceRequest, r app.Responder[*app.EvidenceResult]) (app.Response, error)
	RequestApproval(ctx context.Context, call app.Call, taskID, reason string, r app.Responder[*app.ApprovalResult]) (app.Response, error)
	CloseTask(ctx context.Context, call app.Call, taskID string, r app.Responder[*app.CloseResult]) (app.Response, error)
	Observe(ctx context.Context, actor app.Actor, sessionID string, req page.ObserveRequest) (*page.Snapshot, error)
	Extract(ctx context.Context, actor app.Actor, sessionID string, req page.ExtractRequest) (*page.ExtractResult, error)
}

// Models is the model port of the autonomous loop (the orchestrator; app.Orchestrator).
type Models interface {
	Eligible(ctx context.Context, role string, pol app.ModelPolicy) ([]app.ModelInfo, error)
	Complete(ctx context.Context, req app.ModelRequest) (*app.ModelReply, error)
}

var _ Service = (*app.Service)(nil)
