package app

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// The inbox (issue #23 item 1, ADR 0019 addendum, migrations/0019): what other systems deliver to
// this node is processed exactly once. Each delivery names its source and the sender's id of it;
// its row in inbox_event (UNIQUE on source and id) is inserted in the same transaction as its
// effect. A redelivery — the sender did not get the acknowledgement, whatever crashed between the
// effect and it — finds the row and is answered from the first result, never run again; a reused
// id with other content is refused. Two sources deliver today:
//   - another node of the cluster forwarding a command to this one, the session's owner (api,
//     forward.go): the delivery id is the node credential's id, and the first result is the
//     command's stored first response (its idempotency record);
//   - the model orchestrator answering a model call (its chat completion id): the reply is
//     recorded once as the task's model.called event and charged once; a reply delivered again is
//     never taken as the next step.

// SourceOrchestrator is the inbox source of the model orchestrator's replies.
const SourceOrchestrator = "orchestrator"

// NodeSource is the inbox source of the commands node forwards.
func NodeSource(nodeID string) string { return "node:" + nodeID }

// Delivery is one inbound delivery: who sent it, the sender's id of it and a digest of what it
// carried.
type Delivery struct {
	Source string
	ID     string
	Digest [sha256.Size]byte
}

// InboxEntry is a delivery as the inbox records it, with what it was processed into: a
// forwarded command's idempotency record, or the history event of an orchestrator reply.
type InboxEntry struct {
	Delivery
	Tenant         string
	IdempotencyKey string // a forwarded command
	TaskID         string // an orchestrator reply: the task and seq of its model.called event
	EventSeq       int64
}

// InboxTx is the part of a transaction that records deliveries.
type InboxTx interface {
	// RecordDelivery inserts e. When its source and id are already recorded it inserts nothing
	// and returns the recorded entry with dup=true, waiting first for any transaction that holds
	// it (so of two concurrent deliveries exactly one is processed).
	RecordDelivery(ctx context.Context, e InboxEntry) (first *InboxEntry, dup bool, err error)
}

// ErrDeliveryReused is a delivery whose source and id were recorded with other content: it is
// neither processed nor answered from the first result.
var ErrDeliveryReused = errors.New("a delivery id was used again with other content")

// ParseDeliveryID validates a sender's delivery id: 1–255 visible ASCII characters (what
// inbox_event's CHECK admits). A reply or credential with any other id is not deduplicated by id.
func ParseDeliveryID(raw string) (string, error) {
	if raw == "" || len(raw) > 255 {
		return "", fmt.Errorf("delivery id: %d bytes, want 1–255", len(raw))
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] < 0x21 || raw[i] > 0x7e {
			return "", errors.New("delivery id: not visible ASCII")
		}
	}
	return raw, nil
}

// recordDelivery records e in tx and reports whether it is a redelivery of the same content. A
// reused id with other content is ErrDeliveryReused.
func recordDelivery(ctx context.Context, tx InboxTx, e InboxEntry) (dup bool, err error) {
	first, dup, err := tx.RecordDelivery(ctx, e)
	if err != nil {
		return false, fmt.Errorf("recording delivery: %w", err)
	}
	if !dup {
		return false, nil
	}
	if first.Digest != e.Digest || first.Tenant != e.Tenant {
		return true, ErrDeliveryReused
	}
	return true, nil
}

// claimDelivery records a forwarded command's delivery in its command transaction, after its
// idempotency claim (claimed: this request claimed the key), and reports whether it is a
// redelivery. A first delivery is processed as usual; a redelivery is answered with the key's
// first response, never run again: at once when it is recorded, after the first delivery's run
// when this process still runs it, once classified when the node that ran it is dead
// (awaitFirstDelivery).
func (s *Service) claimDelivery(ctx context.Context, tx Tx, call Call, claimed bool) (redelivered bool, err error) {
	d := call.Delivery
	dup, err := recordDelivery(ctx, tx, InboxEntry{Delivery: *d, Tenant: call.Actor.Tenant, IdempotencyKey: call.IdempotencyKey})
	switch {
	case errors.Is(err, ErrDeliveryReused):
		s.cfg.Logger.Warn("a forwarded delivery id came again with another request", slog.String("source", d.Source))
		return false, &Error{Code: CodeIdempotencyKeyReused, Detail: "this forwarded delivery was already received with another request"}
	case err != nil:
		return false, err
	case dup && claimed:
		// The first delivery's row goes with its idempotency record: a row without it is a bug.
		return false, fmt.Errorf("delivery %s of %s recorded without its idempotency record", d.ID, d.Source)
	}
	return dup, nil
}

// firstDeliveryRunning is the answer to a redelivery whose first delivery's command is still
// in flight (claim: its idempotency record, naming the command and the node that runs it):
// awaitFirstDelivery waits for it, classifies it, or refuses with err's Retry-After.
type firstDeliveryRunning struct {
	claim IdempotencyClaim
	err   *Error
}

func (f *firstDeliveryRunning) Error() string { return f.err.Error() }
func (f *firstDeliveryRunning) Unwrap() error { return f.err }

// firstDeliverySettled is what one request did about its first delivery's command: a request
// classifies it or finds it just ended at most once, so that a claim that stays in flight
// afterwards (it cannot: a bug) answers a problem instead of looping.
type firstDeliverySettled struct{ tried bool }

// awaitFirstDelivery decides, for err of one run of a command, whether its request (a
// redelivery whose first delivery's command is in flight) runs again, which then answers the
// key's first response as a replay: the sender delivered once, so it must not get
// idempotency_in_flight for its own first delivery.
//   - This process runs that command: wait for its end (or the request's context: then the
//     idempotency_in_flight problem, with Retry-After).
//   - The node that ran it is dead (stopped, or no heartbeat for NodeStaleAfter): the first
//     delivery died with its process. Classify the command now, as recovery would
//     (recoverClaim: unknown_outcome, or reconciliation_required for a side effect), under the
//     same lock on the command, so that of this, recovery and a run that outlived its heartbeat
//     exactly one records the receipt; the run again answers that classification.
//   - This node ran it and it just ended (the claim was read before its end): run again once.
//   - Another live node runs it, or its node is not yet taken for dead: it cannot be classified
//     yet, and waiting here could outlast the sender's patience, so 503 browser_unavailable with
//     Retry-After (never 500, never the client's 409): the retry is answered once that node
//     ends it or is taken for dead.
func (s *Service) awaitFirstDelivery(ctx context.Context, err error, settled *firstDeliverySettled) (bool, error) {
	var f *firstDeliveryRunning
	if !errors.As(err, &f) {
		return false, err
	}
	if v, ok := s.running.Load(f.claim.CommandID); ok {
		if s.deliveryWaits != nil {
			s.deliveryWaits()
		}
		select {
		case <-v.(chan struct{}):
			return true, nil
		case <-ctx.Done():
			return false, f.err
		}
	}
	if settled.tried {
		return false, firstDeliveryUnsettled(f.err.RetryAfter)
	}
	settled.tried = true
	if f.claim.NodeID == s.cfg.NodeID {
		return true, nil // this process ran it, and its run ended since the claim was read
	}
	live := false
	if f.claim.NodeID != "" { // a claim without a node is orphaned, as recovery takes it
		var lerr error
		if live, lerr = s.store.NodeLive(ctx, f.claim.NodeID, s.cfg.Now().Add(-s.cfg.NodeStaleAfter)); lerr != nil {
			return false, lerr
		}
	}
	if live {
		return false, firstDeliveryUnsettled(f.err.RetryAfter)
	}
	if err := s.recoverClaim(ctx, f.claim); err != nil {
		return false, err
	}
	s.cfg.Logger.Info("a redelivered command whose first delivery's node is dead was classified",
		slog.String("command", f.claim.CommandID), slog.String("node", f.claim.NodeID))
	return true, nil
}

// firstDeliveryUnsettled answers a redelivery whose first delivery's command another node still
// runs (or whose node is not yet taken for dead).
func firstDeliveryUnsettled(retryAfter time.Duration) *Error {
	return &Error{Code: CodeBrowserUnavailable, RetryAfter: retryAfter,
		Detail: "the first delivery of this forwarded command is still in flight on a node of the cluster that is not known to have stopped; " +
			"send it again after Retry-After: it is answered once that node records its outcome or is taken for dead"}
}

// endRun marks command id's run ended: recovery may classify it, and the redeliveries waiting
// for it go on.
func (s *Service) endRun(id string) {
	if v, ok := s.running.LoadAndDelete(id); ok {
		close(v.(chan struct{}))
	}
}
