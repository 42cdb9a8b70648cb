// Package observation gives every browser engine the same observation budgets and deltas (issue
// #25, ADR 0028): it keeps a session's recent observations, a few per browsing context and only
// of each context's current document epoch, cuts an answer into parts under observe's max_bytes
// with a sealed continuation cursor, and answers observe's since with only the nodes added,
// changed or removed. An engine adapter observes whole snapshots; the composition root puts a
// [Keeper] in front of each of its sessions. Standard library and packages page and pagekit only.
package observation
