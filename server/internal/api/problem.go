package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// statusOf is the one place a problem code becomes an HTTP status.
var statusOf = map[app.Code]int{
	app.CodeInvalidRequest:          http.StatusBadRequest,
	app.CodeIdempotencyKeyRequired:  http.StatusBadRequest,
	app.CodeUnauthenticated:         http.StatusUnauthorized,
	app.CodeInsufficientScope:       http.StatusForbidden,
	app.CodeOriginNotAllowed:        http.StatusForbidden,
	app.CodeApproverNotPermitted:    http.StatusForbidden,
	app.CodeNotFound:                http.StatusNotFound,
	app.CodeActionTimeout:           http.StatusRequestTimeout,
	app.CodeInvalidTransition:       http.StatusConflict,
	app.CodeIdempotencyInFlight:     http.StatusConflict,
	app.CodeStaleNodeHandle:         http.StatusConflict,
	app.CodeApprovalNotPending:      http.StatusConflict,
	app.CodeCheckpointForeign:       http.StatusConflict,
	app.CodeCheckpointIncompatible:  http.StatusConflict,
	app.CodeCheckpointStale:         http.StatusConflict,
	app.CodeBrowserSessionLost:      http.StatusConflict,
	app.CodePayloadTooLarge:         http.StatusRequestEntityTooLarge,
	app.CodeUnsupportedMediaType:    http.StatusUnsupportedMediaType,
	app.CodeIdempotencyKeyReused:    http.StatusUnprocessableEntity,
	app.CodeModelPolicyUnsatisfied:  http.StatusUnprocessableEntity,
	app.CodeRateLimited:             http.StatusTooManyRequests,
	app.CodeOverloaded:              http.StatusServiceUnavailable,
	app.CodeBrowserUnavailable:      http.StatusServiceUnavailable,
	app.CodeOrchestratorUnavailable: http.StatusServiceUnavailable,
	app.CodeNotImplemented:          http.StatusNotImplemented,
	app.CodeNavigationFailed:        http.StatusBadGateway,
	app.CodeInternal:                http.StatusInternalServerError,
}

var titleOf = map[app.Code]string{
	app.CodeInvalidRequest:          "Invalid request",
	app.CodeIdempotencyKeyRequired:  "Idempotency-Key required",
	app.CodeUnauthenticated:         "Unauthenticated",
	app.CodeInsufficientScope:       "Insufficient scope",
	app.CodeOriginNotAllowed:        "Origin not allowed",
	app.CodeApproverNotPermitted:    "Approver not permitted",
	app.CodeNotFound:                "Not found",
	app.CodeActionTimeout:           "Action timed out",
	app.CodeInvalidTransition:       "Invalid transition",
	app.CodeIdempotencyInFlight:     "Request still in flight",
	app.CodeStaleNodeHandle:         "Stale node handle",
	app.CodeApprovalNotPending:      "Approval not pending",
	app.CodeCheckpointForeign:       "Checkpoint of another task",
	app.CodeCheckpointIncompatible:  "Checkpoint incompatible",
	app.CodeCheckpointStale:         "Checkpoint too old",
	app.CodeBrowserSessionLost:      "Browser session lost",
	app.CodePayloadTooLarge:         "Payload too large",
	app.CodeUnsupportedMediaType:    "Unsupported media type",
	app.CodeIdempotencyKeyReused:    "Idempotency-Key reused",
	app.CodeModelPolicyUnsatisfied:  "Model policy unsatisfied",
	app.CodeRateLimited:             "Rate limited",
	app.CodeOverloaded:              "Overloaded",
	app.CodeBrowserUnavailable:      "Browser unavailable",
	app.CodeOrchestratorUnavailable: "Orchestrator unavailable",
	app.CodeNotImplemented:          "Not implemented",
	app.CodeNavigationFailed:        "Navigation failed",
	app.CodeInternal:                "Internal error",
}

// Violation points at one part of a request that failed validation.
type Violation struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// problem is the RFC 9457 body. Detail is written by us, never copied from request values.
type problem struct {
	Type    string      `json:"type"`
	Title   string      `json:"title"`
	Status  int         `json:"status"`
	Detail  string      `json:"detail"`
	Code    app.Code    `json:"code"`
	Errors  []Violation `json:"errors,omitempty"`
	Receipt any         `json:"receipt,omitempty"`
}

func newProblem(e *app.Error) (int, problem) {
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	return status, problem{
		Type: "urn:bap:problem:" + string(e.Code), Title: titleOf[e.Code], Status: status, Detail: e.Detail, Code: e.Code,
	}
}

// writeProblem answers e as application/problem+json.
func writeProblem(w http.ResponseWriter, e *app.Error, violations ...Violation) {
	status, p := newProblem(e)
	p.Errors = violations
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeJSON answers v as application/json with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, &app.Error{Code: app.CodeInternal, Detail: "could not encode the response"})
		return
	}
	writeRaw(w, status, "application/json", body)
}

func writeRaw(w http.ResponseWriter, status int, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
