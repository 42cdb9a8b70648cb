package worker

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
)

// sideEffectingOp tells the plan operations whose effect must never be repeated (act) from the
// safe ones a worker may run again after a takeover (a GET navigation, observe, extract,
// capture_evidence).
func sideEffectingOp(op string) bool { return op == "act" }

// Arguments of each step kind: the body of the operation it names (already validated against
// spec/schemas/PlanStep.json by create_task).
type navigateArgs struct {
	URL       string `json:"url"`
	ContextID string `json:"context_id"`
	WaitUntil string `json:"wait_until"`
	TimeoutMs int    `json:"timeout_ms"`
}

type actArgs struct {
	ContextID  string      `json:"context_id"`
	Action     string      `json:"action"`
	NodeID     string      `json:"node_id"`
	Query      *page.Query `json:"query"`
	Value      string      `json:"value"`
	SecretRef  string      `json:"secret_ref"` // a stored secret typed by reference (secrets.go): never a value
	Values     []string    `json:"values"`
	Key        string      `json:"key"`
	ArtifactID string      `json:"artifact_id"`
	TimeoutMs  int         `json:"timeout_ms"`
}

type observeArgs struct {
	ContextID string `json:"context_id"`
	Within    string `json:"within"`
	MaxNodes  int    `json:"max_nodes"`
	Mode      string `json:"mode"`
	Since     string `json:"since"`
	Cursor    string `json:"cursor"`
	MaxBytes  int    `json:"max_bytes"`
}

type extractArgs struct {
	ContextID string                `json:"context_id"`
	Kind      string                `json:"kind"`
	NodeID    string                `json:"node_id"`
	Query     *page.Query           `json:"query"`
	Schema    json.RawMessage       `json:"schema"`
	Fields    map[string]page.Query `json:"fields"`
}

type evidenceArgs struct {
	ContextID string   `json:"context_id"`
	Kinds     []string `json:"kinds"`
	FullPage  bool     `json:"full_page"`
	NodeID    string   `json:"node_id"`
}

// decodeArgs decodes a step's arguments; a step the runtime cannot read is an invalid_request,
// which no retry cures.
func decodeArgs(st app.PlanStep, v any) *app.Error {
	raw := st.Args
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return app.Errorf(app.CodeInvalidRequest, "the arguments of this %s step cannot be read: %v", st.Op, err)
	}
	return nil
}

// errorClass is how a worker treats a step's problem.
type errorClass int

const (
	// retryable problems consume an attempt; the step runs again after a backoff.
	retryable errorClass = iota
	// fatal problems cannot improve on retry: the plan fails at once, consuming no attempt.
	fatal
	// throttled problems (the node or tenant is saturated) are waited out without consuming one.
	throttled
	// sessionGone problems need a new browser session (restored from the last checkpoint).
	sessionGone
	// stateChanged problems (invalid_transition) mean the task changed under the worker.
	stateChanged
)

func classify(code app.Code) errorClass {
	switch code {
	case app.CodeInvalidRequest, app.CodeOriginNotAllowed, app.CodeInsufficientScope, app.CodeApproverNotPermitted, app.CodeBrowserUnavailable,
		app.CodeSecretOriginMismatch, app.CodeSecretNotFound,
		app.CodeNotImplemented, app.CodeCheckpointForeign, app.CodeCheckpointIncompatible, app.CodeCheckpointStale,
		app.CodeIdempotencyKeyReused, app.CodePayloadTooLarge, app.CodeUnsupportedMediaType, app.CodeUnauthenticated, app.CodeIdempotencyKeyRequired,
		app.CodeReplayNotPossible:
		return fatal
	case app.CodeRateLimited, app.CodeOverloaded, app.CodeIdempotencyInFlight:
		return throttled
	case app.CodeBrowserSessionLost:
		return sessionGone
	case app.CodeInvalidTransition:
		return stateChanged
	default: // action_timeout, not_found (a query matching nothing), stale_node_handle, navigation_failed, …
		return retryable
	}
}

// planKey is the Idempotency-Key of a worker's command: the task, the lease epoch (a worker
// taking over never replays its predecessor's keys by accident), and what the command is for.
func planKey(taskID string, epoch int64, what string) string {
	return fmt.Sprintf("plan:%s:%d:%s", taskID, epoch, what)
}

// stepKey is the key of attempt `attempt` of step i; try counts the throttled retries of that
// attempt (each a command of its own, since a refusal is recorded under its key).
func stepKey(taskID string, epoch int64, i, attempt, try int) string {
	if try == 0 {
		return planKey(taskID, epoch, fmt.Sprintf("step:%d:%d", i, attempt))
	}
	return planKey(taskID, epoch, fmt.Sprintf("step:%d:%d:%d", i, attempt, try))
}
