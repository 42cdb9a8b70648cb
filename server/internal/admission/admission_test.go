package admission

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestSlotsRefuseWithoutWaitingAndRelease(t *testing.T) {
	t.Parallel()
	s := NewSlots(2, 3)
	a1, f1 := s.TryAcquire("a")
	a2, f2 := s.TryAcquire("a")
	if f1 != NotFull || f2 != NotFull {
		t.Fatalf("first two of tenant a: %v %v", f1, f2)
	}
	if _, f := s.TryAcquire("a"); f != KeyFull {
		t.Fatalf("third of tenant a: %v, want KeyFull", f)
	}
	b1, f := s.TryAcquire("b")
	if f != NotFull {
		t.Fatalf("first of tenant b: %v", f)
	}
	if _, f := s.TryAcquire("c"); f != TotalFull {
		t.Fatalf("fourth in all: %v, want TotalFull", f)
	}
	// A tenant at its own cap hears about its cap first, even when the node is full too.
	if _, f := s.TryAcquire("a"); f != KeyFull {
		t.Fatalf("tenant a at its cap on a full node: %v, want KeyFull", f)
	}
	a1()
	a1() // idempotent
	if s.Held() != 2 || s.HeldBy("a") != 1 {
		t.Fatalf("after one release: held %d, a %d", s.Held(), s.HeldBy("a"))
	}
	c1, f := s.TryAcquire("c")
	if f != NotFull {
		t.Fatalf("after a release: %v", f)
	}
	for _, r := range []func(){a2, b1, c1} {
		r()
	}
	if s.Held() != 0 || len(s.byKey) != 0 {
		t.Fatalf("all released: held %d, %d keys remembered", s.Held(), len(s.byKey))
	}
	if pk, tot := s.Caps(); pk != 2 || tot != 3 {
		t.Fatalf("Caps = %d, %d", pk, tot)
	}
}

func TestSlotsWithoutCapsOnlyCount(t *testing.T) {
	t.Parallel()
	var s Slots
	for range 1000 {
		if _, f := s.TryAcquire("a"); f != NotFull {
			t.Fatal("uncapped slots refused")
		}
	}
	if s.HeldBy("a") != 1000 {
		t.Fatalf("HeldBy = %d", s.HeldBy("a"))
	}
}

// Under contention the caps hold exactly: never more holders than allowed, and every refusal is
// immediate.
func TestSlotsHoldTheirCapsUnderContention(t *testing.T) {
	t.Parallel()
	s := NewSlots(5, 8)
	var inKey [3]atomic.Int32
	var inAll, peakAll atomic.Int32
	var peakKey [3]atomic.Int32
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := i % 3
			rel, f := s.TryAcquire(string(rune('a' + k)))
			if f != NotFull {
				return
			}
			n := inKey[k].Add(1)
			m := inAll.Add(1)
			for p := peakKey[k].Load(); n > p && !peakKey[k].CompareAndSwap(p, n); p = peakKey[k].Load() {
			}
			for p := peakAll.Load(); m > p && !peakAll.CompareAndSwap(p, m); p = peakAll.Load() {
			}
			inKey[k].Add(-1)
			inAll.Add(-1)
			rel()
		}()
	}
	wg.Wait()
	for k := range 3 {
		if peakKey[k].Load() > 5 {
			t.Fatalf("key %d peaked at %d holders, cap 5", k, peakKey[k].Load())
		}
	}
	if peakAll.Load() > 8 {
		t.Fatalf("peaked at %d holders, cap 8", peakAll.Load())
	}
	if s.Held() != 0 {
		t.Fatalf("held %d after everything was released", s.Held())
	}
}

// durable simulates the database: a reservation's work becomes a row (count) just before the
// reservation is released, as a session row commits before its opener lets go.
type durable struct {
	mu   sync.Mutex
	rows map[string]int
}

func (d *durable) count(key string) func() (int, error) {
	return func() (int, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.rows[key], nil
	}
}

func (d *durable) commit(key string) {
	d.mu.Lock()
	d.rows[key]++
	d.mu.Unlock()
}

func TestReservationsCountDurableRowsAndReservations(t *testing.T) {
	t.Parallel()
	d := &durable{rows: map[string]int{"a": 2}}
	var r Reservations
	open := 0 // the node's own count (e.g. the browser's open sessions)
	node := func() int { return open }
	lim := Limits{PerKey: 3, Total: 4}
	res, f, err := r.Reserve("a", lim, d.count("a"), node)
	if err != nil || f != NotFull {
		t.Fatalf("a with 2 rows, cap 3: %v %v", f, err)
	}
	if _, f, _ := r.Reserve("a", lim, d.count("a"), node); f != KeyFull {
		t.Fatalf("a with 2 rows + 1 reservation, cap 3: %v, want KeyFull", f)
	}
	open = 3
	if _, f, _ := r.Reserve("b", lim, d.count("b"), node); f != TotalFull {
		t.Fatalf("node with 3 open + 1 reserved, cap 4: %v, want TotalFull", f)
	}
	res.EndTotal() // the node counts it now (open), the key not yet (no row)
	res.EndTotal()
	if r.Held() != 0 || r.HeldBy("a") != 1 {
		t.Fatalf("after EndTotal: held %d, a %d", r.Held(), r.HeldBy("a"))
	}
	if _, f, _ := r.Reserve("a", lim, d.count("a"), node); f != KeyFull {
		t.Fatalf("a's reservation still counts for a after EndTotal: %v, want KeyFull", f)
	}
	open = 0
	d.commit("a")
	res.End()
	res.End()
	if _, f, _ := r.Reserve("a", lim, d.count("a"), node); f != KeyFull {
		t.Fatalf("a with 3 rows: %v, want KeyFull", f)
	}
	if r.Held() != 0 || r.HeldBy("a") != 0 || len(r.keys) != 0 {
		t.Fatalf("held %d, a %d, %d keys remembered", r.Held(), r.HeldBy("a"), len(r.keys))
	}
	boom := errors.New("database down")
	if _, _, err := r.Reserve("a", lim, func() (int, error) { return 0, boom }, node); !errors.Is(err, boom) {
		t.Fatalf("counting error: %v", err)
	}
	if len(r.keys) != 0 {
		t.Fatal("a failed Reserve left its key behind")
	}
}

// Many openers of one tenant at once: the work that completes (rows) never exceeds the cap,
// although each opener counts rows before it reserves and commits before it releases.
func TestReservationsNeverOvershootUnderContention(t *testing.T) {
	t.Parallel()
	d := &durable{rows: map[string]int{}}
	var r Reservations
	var wg sync.WaitGroup
	var admitted atomic.Int32
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := string(rune('a' + i%2))
			res, f, err := r.Reserve(key, Limits{PerKey: 7, Total: 10}, d.count(key), nil)
			if err != nil {
				t.Error(err)
				return
			}
			if f != NotFull {
				return
			}
			admitted.Add(1)
			res.EndTotal()
			d.commit(key) // the session row commits, then the reservation ends
			res.End()
		}()
	}
	wg.Wait()
	if d.rows["a"] > 7 || d.rows["b"] > 7 {
		t.Fatalf("rows a=%d b=%d, cap 7 each", d.rows["a"], d.rows["b"])
	}
	if d.rows["a"] != 7 || d.rows["b"] != 7 {
		// Every opener either sees the cap reached or gets a slot; with 100 per key all 7 fill.
		t.Fatalf("rows a=%d b=%d, want both filled to 7", d.rows["a"], d.rows["b"])
	}
	if r.Held() != 0 {
		t.Fatalf("held %d", r.Held())
	}
}

func TestRefusalsCountByReason(t *testing.T) {
	t.Parallel()
	var c Refusals
	if len(c.n) != len(Reasons) {
		t.Fatalf("%d counters for %d reasons", len(c.n), len(Reasons))
	}
	c.Add(TenantSessions)
	c.Add(TenantSessions)
	c.Add(NodeCommands)
	c.Add("unknown")
	if c.Count(TenantSessions) != 2 || c.Count(NodeCommands) != 1 || c.Count(ClientRate) != 0 {
		t.Fatalf("counts %d %d %d", c.Count(TenantSessions), c.Count(NodeCommands), c.Count(ClientRate))
	}
	var none *Refusals
	none.Add(NodeSessions)
	if none.Count(NodeSessions) != 0 {
		t.Fatal("nil Refusals counted")
	}
	for _, r := range Reasons {
		if want := r != NodeCommands && r != NodeSessions; r.Tenant() != want {
			t.Fatalf("%s.Tenant() = %v", r, r.Tenant())
		}
	}
}
