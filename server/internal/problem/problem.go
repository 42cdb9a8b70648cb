// Package problem is the one table of BAP's stable problem codes: each code with the HTTP status
// and title it is answered with, wherever it is answered (the HTTP API, the MCP adapter, a
// worker's stored reply). The table is generated from spec/schemas/ProblemCode.json
// (`x-problems`) by `make generate`; problem.gen.go is not edited by hand.
package problem

// Code is a stable BAP problem code (the `code` of an RFC 9457 problem).
type Code string

type entry struct {
	status int
	title  string
}

// Status is the HTTP status code answers with; 500 for a code the spec does not list (a bug, never
// a client's doing).
func (c Code) Status() int {
	if e, ok := table[c]; ok {
		return e.status
	}
	return 500
}

// Title is the short human title of the code, "Internal error" for one the spec does not list.
func (c Code) Title() string {
	if e, ok := table[c]; ok {
		return e.title
	}
	return table[InternalError].title
}

// Known reports whether the spec lists c.
func (c Code) Known() bool {
	_, ok := table[c]
	return ok
}
