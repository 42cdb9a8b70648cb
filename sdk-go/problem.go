package bap

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// Problem is an RFC 9457 problem answered by the server (application/problem+json), and the
// error every failed call returns for an HTTP error status; use errors.As to get it. An error
// answer that is not a problem document still gives a *Problem, with Code "" and the status.
// It mirrors spec/schemas/Problem.json (which is why types.gen.go leaves it out) plus Body.
type Problem struct {
	// Type is the problem type URI (urn:bap:problem:<code>).
	Type string `json:"type"`
	// Title is a short human-readable summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail"`
	// Code is the stable machine error code (ProblemCode constants, e.g. ProblemCodeNotFound).
	Code ProblemCode `json:"code"`
	// Reason refines Code where the spec names reasons (stale_node_handle: "epoch_superseded" or
	// "session_lost").
	Reason string `json:"reason,omitempty"`
	// Instance identifies this occurrence, when the server gives one.
	Instance string `json:"instance,omitempty"`
	// Errors holds validation details (invalid_request).
	Errors []ProblemViolation `json:"errors,omitempty"`
	// Receipt is the receipt of a command refused by policy (outcome rejected).
	Receipt *Receipt `json:"receipt,omitempty"`

	// Body is the raw answer body.
	Body []byte `json:"-"`
	// Header holds the answer's headers (Retry-After, WWW-Authenticate, …).
	Header http.Header `json:"-"`
}

// Error implements error: "bap: 404 not_found: No task tsk_…".
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bap: %d", p.Status)
	if p.Code != "" {
		b.WriteString(" " + string(p.Code))
	} else if t := http.StatusText(p.Status); t != "" {
		b.WriteString(" " + t)
	}
	switch {
	case p.Detail != "":
		b.WriteString(": " + p.Detail)
	case p.Title != "" && p.Code != "":
		b.WriteString(": " + p.Title)
	}
	return b.String()
}

// IsProblem reports whether err is (or wraps) a *Problem with the given code.
func IsProblem(err error, code ProblemCode) bool {
	var p *Problem
	return errors.As(err, &p) && p.Code == code
}

// newProblem builds the *Problem of an error answer. The status line wins over a body that
// claims another status.
func newProblem(status int, header http.Header, body []byte) *Problem {
	p := &Problem{}
	mt, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		if err := json.Unmarshal(body, p); err != nil {
			p = &Problem{}
		}
	}
	p.Status = status
	if p.Title == "" {
		p.Title = http.StatusText(status)
	}
	p.Body = body
	p.Header = header
	return p
}
