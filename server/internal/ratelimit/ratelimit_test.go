package ratelimit

import (
	"testing"
	"time"
)

func TestLimiterRefillsAndRefuses(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	l := New(1, 3).WithClock(func() time.Time { return now })
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("request %d refused within the burst", i)
		}
	}
	ok, wait := l.Allow("a")
	if ok || wait < time.Second {
		t.Fatalf("4th request: ok=%v wait=%v, want refused with Retry-After >= 1s", ok, wait)
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another key shares the bucket")
	}
	now = now.Add(1500 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("no token after refill")
	}
	l.Charge("c")
	l.Charge("c")
	l.Charge("c")
	if ok, _ := l.Peek("c"); ok {
		t.Fatal("charged bucket still allows")
	}
	l.Reset("c")
	if ok, _ := l.Peek("c"); !ok {
		t.Fatal("reset bucket refuses")
	}
	var off *Limiter
	if ok, _ := off.Allow("x"); !ok {
		t.Fatal("nil limiter refuses")
	}
}
