package app

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// The orchestrator port (issue #11): goal-driven tasks ask an external, OpenAI-compatible
// orchestrator for models. BAP holds no provider credential and never lets a model decide what is
// allowed: a model proposes, the task's policy decides. The adapter (server/internal/orchestrator)
// implements Orchestrator over HTTP with a workload credential of its own.

// Model roles.
const (
	RoleObserver = "observer" // low-cost observation and extraction
	RolePlanner  = "planner"  // proposes the next typed BAP step
	RoleVerifier = "verifier" // judges the final evidence against the goal
	RoleSafety   = "safety"   // classifies proposed steps and pages for sensitive data
)

// Data classifications, lowest first: a model may see data up to its MaxClassification.
var DataClassifications = []string{"public", "internal", "confidential", "restricted"}

// ModelInfo is a model the orchestrator offers, with the metadata model policy is judged on. A
// field the configuration and the orchestrator leave unknown is empty (or -1), and policy treats
// unknown as not satisfied (fail closed).
type ModelInfo struct {
	ID                string
	Provider          string
	Region            string
	RetentionDays     int    // how long the provider keeps prompts; -1 when unknown
	MaxClassification string // highest data classification it may see; "" when unknown
	// Prices in US dollars per million tokens (0 when unknown: cost budgets then count tokens only).
	InputPricePerM, OutputPricePerM float64
}

// ModelPolicy is a task's model_policy: what a model must satisfy to see the task's data.
type ModelPolicy struct {
	AllowedProviders []string // empty: any provider
	AllowedRegions   []string // empty: any region
	MaxRetentionDays *int     // nil: any retention
	// DataClassification is the task's data: a model needs MaxClassification at least this high.
	// "" means "restricted" (fail closed: the most sensitive).
	DataClassification string
}

// ModelMessage is one chat message.
type ModelMessage struct {
	Role    string // system, user or assistant
	Content string
}

// ModelRequest asks a role for one JSON answer.
type ModelRequest struct {
	Role     string
	Policy   ModelPolicy
	Messages []ModelMessage
	// SchemaName and Schema constrain the answer (JSON-schema-constrained output); the adapter
	// validates the answer against Schema and treats a non-conforming answer as a model failure.
	SchemaName string
	Schema     json.RawMessage
	MaxTokens  int
	// Reasoning is the reasoning setting asked for (e.g. "high" for the planner), recorded in
	// provenance; "" for the model's default.
	Reasoning string
}

// ModelFailure is a model that was tried and failed (outage, timeout, invalid answer).
type ModelFailure struct {
	Model   ModelInfo
	Reason  string
	Latency time.Duration
	// Tokens and cost the failed attempt spent (an answer that did not match the schema still
	// costs what its usage says); budgets count them too.
	InputTokens, OutputTokens int
	CostUSD                   float64
	// UsageUnknown: the answer carried no token usage; the tokens are the worst case charged.
	UsageUnknown bool
}

// ModelReply is an answer with its provenance.
type ModelReply struct {
	Model        ModelInfo
	Content      json.RawMessage // the JSON answer, valid against the request's Schema
	PromptSHA256 string          // of the messages as sent (hex)
	InputTokens  int
	OutputTokens int
	CostUSD      float64
	Latency      time.Duration
	Reasoning    string
	// RequestedModel is the model id asked for when the answer names another serving model
	// (Model); "" when they are the same.
	RequestedModel string
	// UsageUnknown: the answer carried no token usage, so InputTokens and OutputTokens (and
	// CostUSD) are the worst case the adapter charged: budgets count them as spent.
	UsageUnknown bool
	// TruncatedBytes is how much message text the adapter cut (with a marker) to keep the request
	// under the orchestrator's body limit; 0 when nothing was cut.
	TruncatedBytes int
	// Fallbacks lists the models tried before Model, in order, and why each failed.
	Fallbacks []ModelFailure
	// ReplyID is the orchestrator's id of this answer (a chat completion's id, as ParseDeliveryID
	// admits it). The inbox records it with the model call, so an answer delivered again is neither
	// recorded, charged nor acted on twice (inbox.go). Required: an implementation takes an answer
	// without one for its model's failure, and a reply without one is refused (ADR 0031).
	ReplyID string
}

// Orchestrator is the port to the external model orchestrator. Implementations are safe for
// concurrent use and honour ctx (cancel_task and deadlines cancel in-flight model calls).
type Orchestrator interface {
	// Eligible lists, in configured order, the models of role that satisfy pol. It answers
	// ErrNoCompliantModel when none does and ErrOrchestratorUnavailable when the orchestrator
	// cannot be reached to discover its models.
	Eligible(ctx context.Context, role string, pol ModelPolicy) ([]ModelInfo, error)
	// Complete asks the eligible models of req.Role in order until one answers with JSON valid
	// against req.Schema; the failures before it are in the reply's Fallbacks. When every
	// eligible model failed it answers an *AllModelsFailedError listing them. A fallback never
	// widens policy: only models satisfying req.Policy are tried.
	Complete(ctx context.Context, req ModelRequest) (*ModelReply, error)
}

// Orchestrator errors.
var (
	ErrOrchestratorUnavailable = errors.New("no model orchestrator is configured or reachable")
	ErrNoCompliantModel        = errors.New("no approved model satisfies the task's model policy")
	// ErrOrchestratorBudget: the orchestrator refuses calls because its own spend budget is
	// exhausted (and stayed so while the adapter retried). It is not a model failure: no fallback.
	ErrOrchestratorBudget = errors.New("the model orchestrator's spend budget is exhausted")
)

// AllModelsFailedError reports that every eligible model of a role failed.
type AllModelsFailedError struct {
	Role     string
	Failures []ModelFailure
}

func (e *AllModelsFailedError) Error() string {
	return "every approved model of role " + e.Role + " failed"
}
