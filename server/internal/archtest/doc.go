// Package archtest enforces the layer rules of docs/architecture.md: which package of this module
// may import which. Its only content is a test (arch_test.go) that loads the import graph with
// `go list -deps -json` and checks it against one table of rules, failing with a message that names
// the offending import and the chain of packages that pulls it in.
//
// A new package under server/ must be given a place in that table (and in the package map of
// docs/architecture.md) before the test passes again.
//
// Package archtest imports only the standard library, and no package may import it.
package archtest
