package mcpserver

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/originweave/bap/server/internal/app"
)

// The adapter answers a few problems itself, before a request reaches the BAP API: arguments
// that cannot become an HTTP request (not an object, a path argument that is not a string…),
// and the transport-level 401/403. They have the BAP problem shape (RFC 9457 with `code`).

// problem is the RFC 9457 body of a BAP problem.
type problem struct {
	Type   string   `json:"type"`
	Title  string   `json:"title"`
	Status int      `json:"status"`
	Detail string   `json:"detail"`
	Code   app.Code `json:"code"`
}

// newProblem takes the status and title from the one table of codes (package problem), as the
// API does.
func newProblem(e *app.Error) problem {
	return problem{Type: "urn:bap:problem:" + string(e.Code), Title: e.Code.Title(), Status: e.Code.Status(), Detail: e.Detail, Code: e.Code}
}

// writeProblem answers e as application/problem+json (used for 401 and 403 of the transport).
func writeProblem(w http.ResponseWriter, e *app.Error) {
	p := newProblem(e)
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

func invalidArguments(detail string) *app.Error {
	return &app.Error{Code: app.CodeInvalidRequest, Detail: detail}
}
