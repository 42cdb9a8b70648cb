package app

import (
	"errors"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/problem"
)

// Code is a stable BAP problem code (the `code` of an RFC 9457 problem). Its status and title
// come from the one table generated from the spec (package problem).
type Code = problem.Code

// Problem codes used by the use-cases, under the names the use-cases have always used; each is the
// spec's (package problem), so none exists without its status.
const (
	CodeInvalidRequest         = problem.InvalidRequest
	CodeIdempotencyKeyRequired = problem.IdempotencyKeyRequired
	CodeUnauthenticated        = problem.Unauthenticated
	CodeInsufficientScope      = problem.InsufficientScope
	CodeOriginNotAllowed       = problem.OriginNotAllowed
	// CodeApproverNotPermitted refuses a resolve_approval by whoever requested or caused the
	// approval (separation of duties), or through a channel the approval's rule does not allow.
	CodeApproverNotPermitted = problem.ApproverNotPermitted
	CodeNotFound             = problem.NotFound
	CodeActionTimeout        = problem.ActionTimeout
	CodeInvalidTransition    = problem.InvalidTransition
	CodeIdempotencyInFlight  = problem.IdempotencyInFlight
	CodeStaleNodeHandle      = problem.StaleNodeHandle
	CodeApprovalNotPending   = problem.ApprovalNotPending
	// CodeTaskHandedOff refuses a command on a task a person took over (handoff.go).
	CodeTaskHandedOff          = problem.TaskHandedOff
	CodeCheckpointForeign      = problem.CheckpointForeign
	CodeCheckpointIncompatible = problem.CheckpointIncompatible
	CodeCheckpointStale        = problem.CheckpointStale
	CodeBrowserSessionLost     = problem.BrowserSessionLost
	CodeObservationStale       = problem.ObservationStale // since or cursor of an earlier epoch
	CodePayloadTooLarge        = problem.PayloadTooLarge
	CodeUnsupportedMediaType   = problem.UnsupportedMediaType // a body not sent as application/json
	CodeIdempotencyKeyReused   = problem.IdempotencyKeyReused
	CodeRateLimited            = problem.RateLimited
	CodeOverloaded             = problem.Overloaded
	CodeBrowserUnavailable     = problem.BrowserUnavailable
	CodeNotImplemented         = problem.NotImplemented
	// CodeEngineCapabilityUnsupported refuses an operation the session's browser engine cannot do
	// (engines.go).
	CodeEngineCapabilityUnsupported = problem.EngineCapabilityUnsupported
	CodeNavigationFailed            = problem.NavigationFailed
	CodeInternal                    = problem.InternalError
	// CodeReplayNotPossible refuses a replay_task the task cannot support (not finished, no steps
	// recorded, a plain fill value not kept, an archive with a tunnel or none on this node).
	CodeReplayNotPossible = problem.ReplayNotPossible
)

// Error is a refusal the client can act on: a stable code and a detail written for people. Detail
// never contains request values, secrets or tokens.
type Error struct {
	Code       Code
	Detail     string
	RetryAfter time.Duration
	// Reason refines Code where the spec names reasons (the problem's `reason`): for
	// stale_node_handle, HandleEpochSuperseded or HandleSessionLost.
	Reason string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Detail }

// Errorf builds an *Error with a formatted detail.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// ErrNotFound is returned by stores for an unknown object or one of another tenant; the two are
// deliberately indistinguishable.
var ErrNotFound = errors.New("not found")

// AsError returns the *Error in err's chain, translating ErrNotFound, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, ErrNotFound) {
		return &Error{Code: CodeNotFound, Detail: "no such object"}
	}
	return nil
}
