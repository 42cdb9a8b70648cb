package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

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
	Reason  string      `json:"reason,omitempty"`
	Errors  []Violation `json:"errors,omitempty"`
	Receipt any         `json:"receipt,omitempty"`
}

func newProblem(e *app.Error) (int, problem) {
	// The one table of codes, statuses and titles, generated from the spec (package problem).
	status := e.Code.Status()
	return status, problem{
		Type: "urn:bap:problem:" + string(e.Code), Title: e.Code.Title(), Status: status, Detail: e.Detail, Code: e.Code,
		Reason: e.Reason,
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
	writeRawHeader(w, status, contentType)
	_, _ = w.Write(body)
}

// writeRawHeader sends the status and headers of a raw (non-JSON) answer whose body the caller
// then writes (streams).
func writeRawHeader(w http.ResponseWriter, status int, contentType string) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
}
