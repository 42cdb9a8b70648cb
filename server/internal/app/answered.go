package app

import (
	"context"
	"hash/maphash"
	"sync/atomic"
)

// answeredSlots is the size of a Service's answered-key table: 32,768 slots of 8 bytes.
const answeredSlots = 1 << 15

// answeredKeys remembers, lossily, the Idempotency-Keys whose first response this process
// recorded or replayed, so that a retry of one is answered with one read of its record instead
// of running the command: a command's idempotency claim travels in the command's one pipeline
// (ADR 0027), and on a taken key that pipeline fails, is rolled back and runs again with the
// claim first, and pgx prepares every statement of a failed pipeline again.
//
// It is only a hint. A slot holds the hash of one (tenant, key); a later key that lands on the
// same slot overwrites it, and two keys may share a hash. A key it forgets (evicted, answered by
// another node, before a restart) takes the command's path, which answers a replay as before;
// a key it wrongly remembers costs one read that finds no replayable record, and the command then
// runs as it would have. The answer itself always comes from the database, so the UNIQUE key of
// idempotency_record still decides which of concurrent first requests runs. Safe for concurrent
// use; no lock.
type answeredKeys struct {
	seed  maphash.Seed
	slots []atomic.Uint64
}

func newAnsweredKeys() answeredKeys {
	return answeredKeys{seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, answeredSlots)}
}

// hash is the (never zero) hash of call's tenant and key.
func (a *answeredKeys) hash(call Call) uint64 {
	var h maphash.Hash
	h.SetSeed(a.seed)
	h.WriteString(call.Actor.Tenant)
	h.WriteByte(0) // a tenant id holds no NUL: "a"+"bc" and "ab"+"c" hash apart
	h.WriteString(call.IdempotencyKey)
	return h.Sum64() | 1
}

// note remembers call's key as answered.
func (a *answeredKeys) note(call Call) {
	if call.IdempotencyKey == "" {
		return
	}
	h := a.hash(call)
	a.slots[h%answeredSlots].Store(h)
}

// seen reports whether call's key is probably one this process answered.
func (a *answeredKeys) seen(call Call) bool {
	if call.IdempotencyKey == "" {
		return false
	}
	h := a.hash(call)
	return a.slots[h%answeredSlots].Load() == h
}

// replayAnswered answers a retry of a key this process answered with its recorded first response
// (replayFirst: one read); ok is false when the key is not known here or its record is not a
// replay (in flight, another body, purged), and the command then runs.
func (s *Service) replayAnswered(ctx context.Context, call Call) (resp Response, ok bool, err error) {
	if !s.answered.seen(call) {
		return Response{}, false, nil
	}
	return s.replayFirst(ctx, call)
}

// noteAnswered remembers call's key when resp is its recorded first response or a replay of it.
func (s *Service) noteAnswered(call Call, resp Response, err error) {
	if err == nil && resp.Status != 0 {
		s.answered.note(call)
	}
}
