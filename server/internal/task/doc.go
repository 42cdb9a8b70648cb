// Package task owns the BAP task lifecycle as pure rules: the task states and
// the triggers that move a task between them ([Next]), the receipt outcome
// classes of a command ([Outcome], [ClassifyInterrupted]) and the approval
// states with their resolution rules ([ApprovalState]).
//
// The transition table is the one of CONTRACT "Task lifecycle";
// docs/lifecycle.md draws it as a Mermaid state diagram, and diagram_test.go
// checks that the diagram and [Next] agree edge for edge.
//
// Package task decides; it never performs. It holds no state of its own and
// has no I/O: persisting a transition, its history event, its receipt and its
// outbox message in one transaction is the job of the use-case layer and the
// store adapter.
//
// Package task must import only the standard library. It must not import pgx,
// net/http, watermill, chromedp, fosite or any other package of this module,
// so that every other layer can depend on it and it can be tested
// exhaustively with tables.
package task
