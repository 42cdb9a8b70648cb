// Package historychain is the keyed hash chain over a task's history (ADR 0033): the canonical
// bytes of a history event, the link that chains each event to the one before it, the public
// hash an outsider can recompute, and the signed anchors that pin a chain's head.
//
// Every event carries digest = HMAC-SHA256(key, canonical(event) ‖ prev_digest), where
// prev_digest is the digest of the event before it (32 zero bytes for a task's first chained
// event) and key derives from the server key, which the database does not hold. Whoever can write
// to the database but does not hold the key cannot edit, insert or drop an event without the
// chain breaking at that event's seq.
//
// The keyed chain convinces the server itself; an outsider, who does not hold the key, checks the
// public chain instead: history_sha256 = SHA-256(prev_history_sha256 ‖ canonical(event)). An
// anchor is a statement, signed ES256 by the server's audit key (a key the database holds only
// sealed), of a task's (seq, digest, history_sha256) at one moment: at the task's end and
// periodically while it runs. With the history and the server's public keys, anyone recomputes
// history_sha256 and checks the anchor's signature — offline, with nothing else.
//
// The package is pure (standard library only): the use-cases compute links as they append
// events, and the command-line verifiers use the same code on a bundle.
package historychain
