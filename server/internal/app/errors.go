package app

import (
	"errors"
	"fmt"
	"time"
)

// Code is a stable BAP problem code (the `code` of an RFC 9457 problem).
type Code string

// Problem codes used by the use-cases. The transport maps each to its HTTP status.
const (
	CodeInvalidRequest         Code = "invalid_request"
	CodeIdempotencyKeyRequired Code = "idempotency_key_required"
	CodeUnauthenticated        Code = "unauthenticated"
	CodeInsufficientScope      Code = "insufficient_scope"
	CodeOriginNotAllowed       Code = "origin_not_allowed"
	// CodeApproverNotPermitted refuses a resolve_approval by whoever requested or caused the
	// approval (separation of duties), or through a channel the approval's rule does not allow.
	CodeApproverNotPermitted   Code = "approver_not_permitted"
	CodeNotFound               Code = "not_found"
	CodeActionTimeout          Code = "action_timeout"
	CodeInvalidTransition      Code = "invalid_transition"
	CodeIdempotencyInFlight    Code = "idempotency_in_flight"
	CodeStaleNodeHandle        Code = "stale_node_handle"
	CodeApprovalNotPending     Code = "approval_not_pending"
	CodeCheckpointForeign      Code = "checkpoint_foreign"
	CodeCheckpointIncompatible Code = "checkpoint_incompatible"
	CodeCheckpointStale        Code = "checkpoint_stale"
	CodeBrowserSessionLost     Code = "browser_session_lost"
	CodePayloadTooLarge        Code = "payload_too_large"
	CodeUnsupportedMediaType   Code = "unsupported_media_type" // a body not sent as application/json
	CodeIdempotencyKeyReused   Code = "idempotency_key_reused"
	CodeRateLimited            Code = "rate_limited"
	CodeOverloaded             Code = "overloaded"
	CodeBrowserUnavailable     Code = "browser_unavailable"
	CodeNotImplemented         Code = "not_implemented"
	CodeNavigationFailed       Code = "navigation_failed"
	CodeInternal               Code = "internal_error"
)

// Error is a refusal the client can act on: a stable code and a detail written for people. Detail
// never contains request values, secrets or tokens.
type Error struct {
	Code       Code
	Detail     string
	RetryAfter time.Duration
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
