package admission

import (
	"sync"
	"sync/atomic"
)

// Reason names what a capacity refusal ran out of. Tenant reasons answer 429 rate_limited, node
// reasons 503 overloaded, both with Retry-After.
type Reason string

// The reasons, used as the `reason` label of bap_admission_refusals_total.
const (
	// TenantCommands: the tenant has as many commands in flight on this node as it may.
	TenantCommands Reason = "tenant_commands"
	// NodeCommands: this node has as many commands in flight as it may.
	NodeCommands Reason = "node_commands"
	// TenantSessions: the tenant has as many open browser sessions as it may.
	TenantSessions Reason = "tenant_sessions"
	// NodeSessions: this node runs as many browser sessions as it may.
	NodeSessions Reason = "node_sessions"
	// TenantQueuedTasks: the tenant has as many tasks waiting (for admission or for a worker) as it may.
	TenantQueuedTasks Reason = "tenant_queued_tasks"
	// ClientRate: an OAuth client sent requests faster than its rate limit (remote profile).
	ClientRate Reason = "client_rate"
)

// Reasons lists every reason, in a stable order.
var Reasons = []Reason{TenantCommands, NodeCommands, TenantSessions, NodeSessions, TenantQueuedTasks, ClientRate}

// Tenant reports whether r is a per-tenant limit (429) rather than a node limit (503).
func (r Reason) Tenant() bool { return r != NodeCommands && r != NodeSessions }

// Refusals counts capacity refusals by reason. The zero value is ready; a nil *Refusals counts
// nothing. Safe for concurrent use.
type Refusals struct {
	n [6]atomic.Uint64 // indexed like Reasons
}

func index(r Reason) int {
	for i, x := range Reasons {
		if x == r {
			return i
		}
	}
	return -1
}

// Add counts one refusal for r.
func (c *Refusals) Add(r Reason) {
	if i := index(r); c != nil && i >= 0 {
		c.n[i].Add(1)
	}
}

// Count returns how many refusals r had.
func (c *Refusals) Count(r Reason) uint64 {
	if i := index(r); c != nil && i >= 0 {
		return c.n[i].Load()
	}
	return 0
}

// Full says which cap refused an acquisition.
type Full int

// The answers of Slots.TryAcquire and Reservations.Reserve.
const (
	// NotFull: acquired.
	NotFull Full = iota
	// KeyFull: the key (tenant) holds as many as it may.
	KeyFull
	// TotalFull: every key together (the node) holds as many as it may.
	TotalFull
)

// Slots bounds how many holders a key and all keys together may have at once; acquiring never
// waits. A cap <= 0 is no cap (the slots then only count). The zero value has no caps. Safe for
// concurrent use.
type Slots struct {
	perKey, total int

	mu    sync.Mutex
	byKey map[string]int
	held  int
}

// NewSlots returns slots with at most perKey holders per key and total holders in all.
func NewSlots(perKey, total int) *Slots {
	return &Slots{perKey: perKey, total: total}
}

// Caps returns the caps (0: none).
func (s *Slots) Caps() (perKey, total int) { return max(s.perKey, 0), max(s.total, 0) }

// TryAcquire takes a slot of key if both caps allow it. On success release (idempotent) gives
// the slot back; otherwise full says which cap refused (the key's is checked first).
func (s *Slots) TryAcquire(key string) (release func(), full Full) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.perKey > 0 && s.byKey[key] >= s.perKey:
		return nil, KeyFull
	case s.total > 0 && s.held >= s.total:
		return nil, TotalFull
	}
	if s.byKey == nil {
		s.byKey = map[string]int{}
	}
	s.byKey[key]++
	s.held++
	var once sync.Once
	return func() { once.Do(func() { s.release(key) }) }, NotFull
}

func (s *Slots) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held--
	if s.byKey[key]--; s.byKey[key] <= 0 {
		delete(s.byKey, key) // no entry per idle tenant
	}
}

// Held returns how many slots are held in all.
func (s *Slots) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// HeldBy returns how many slots key holds.
func (s *Slots) HeldBy(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKey[key]
}

// Reservations admits work whose durable trace appears only when it completes (a browser session
// is a database row once it is open): a reservation stands for it in between. Reserve counts what
// already exists (a database query for the key, an in-memory count for the node) and the
// reservations held, under the key's lock; a reservation is released under the same lock, so a
// Reserve never misses work that completed while it counted (at worst it counts it twice, and
// refuses early). The zero value is ready. Safe for concurrent use.
type Reservations struct {
	mu    sync.Mutex // guards keys and held
	keys  map[string]*keyState
	total int
}

type keyState struct {
	lock sync.Mutex // held from counting to reserving, and while releasing
	held int        // guarded by Reservations.mu
	refs int        // guarded by Reservations.mu: Reserve calls and reservations using this entry
}

// Limits are the caps of one Reserve call (<= 0: no cap).
type Limits struct {
	PerKey, Total int
}

func (r *Reservations) ref(key string) *keyState {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[string]*keyState{}
	}
	k := r.keys[key]
	if k == nil {
		k = &keyState{}
		r.keys[key] = k
	}
	k.refs++
	return k
}

func (r *Reservations) unref(key string, k *keyState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k.refs--; k.refs == 0 {
		delete(r.keys, key)
	}
}

// Reserve takes a reservation for key when countKey() + the key's reservations stays under
// lim.PerKey and countTotal() + all reservations under lim.Total. countKey runs under the key's
// lock (it may query a database; other keys are not held up); countTotal runs under the lock of
// every key's state, so it must be quick and must not call back into r. Either may be nil (counts
// 0). On success the Reservation must be ended; a counting error is returned as is.
func (r *Reservations) Reserve(key string, lim Limits, countKey func() (int, error), countTotal func() int) (res *Reservation, full Full, err error) {
	k := r.ref(key)
	k.lock.Lock()
	defer k.lock.Unlock()
	n := 0
	if countKey != nil && lim.PerKey > 0 {
		if n, err = countKey(); err != nil {
			r.unref(key, k)
			return nil, NotFull, err
		}
	}
	r.mu.Lock()
	switch {
	case lim.PerKey > 0 && n+k.held >= lim.PerKey:
		full = KeyFull
	case lim.Total > 0 && total(countTotal)+r.total >= lim.Total:
		full = TotalFull
	default:
		k.held++
		r.total++
	}
	r.mu.Unlock()
	if full != NotFull {
		r.unref(key, k)
		return nil, full, nil
	}
	return &Reservation{r: r, key: key, k: k}, NotFull, nil
}

// Reservation is one reservation of Reservations. Its methods are idempotent and safe for
// concurrent use.
type Reservation struct {
	r               *Reservations
	key             string
	k               *keyState
	totalEnd, ended sync.Once
}

// EndTotal stops counting the reservation against the total, once countTotal counts its work
// (a browser counts a session as soon as it is open, before its row commits); the key still
// counts it until End.
func (x *Reservation) EndTotal() {
	x.totalEnd.Do(func() {
		x.r.mu.Lock()
		x.r.total--
		x.r.mu.Unlock()
	})
}

// End ends the reservation, once countKey counts its work (or it failed).
func (x *Reservation) End() {
	x.EndTotal()
	x.ended.Do(func() {
		x.k.lock.Lock()
		x.r.mu.Lock()
		x.k.held--
		x.r.mu.Unlock()
		x.k.lock.Unlock()
		x.r.unref(x.key, x.k)
	})
}

func total(f func() int) int {
	if f == nil {
		return 0
	}
	return f()
}

// Held returns how many reservations count against the total.
func (r *Reservations) Held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// HeldBy returns how many reservations key holds.
func (r *Reservations) HeldBy(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.keys[key]; k != nil {
		return k.held
	}
	return 0
}
