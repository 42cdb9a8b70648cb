package ratelimit

import (
	"sync"
	"time"
)

// Limiter is a set of token buckets, one per key, each refilled at Rate tokens per second up to
// Burst. Buckets idle long enough to be full again are forgotten. Safe for concurrent use.
type Limiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	sweep   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// New returns a limiter allowing burst requests at once and rate per second after that. A rate or
// burst <= 0 makes a limiter that allows everything.
func New(rate float64, burst int) *Limiter {
	return &Limiter{rate: rate, burst: float64(burst), now: time.Now, buckets: map[string]*bucket{}}
}

// WithClock replaces the clock (tests).
func (l *Limiter) WithClock(now func() time.Time) *Limiter {
	l.now = now
	return l
}

// Allow takes one token from key's bucket. When the bucket is empty it returns false and how long
// until a token is available.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	return l.take(key, 1, true)
}

// Peek reports whether key has a token left without taking it.
func (l *Limiter) Peek(key string) (bool, time.Duration) {
	return l.take(key, 1, false)
}

// Charge takes a token from key's bucket even when that empties it (for counting failures).
func (l *Limiter) Charge(key string) {
	if l == nil || l.rate <= 0 || l.burst <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.refill(key, l.now())
	b.tokens--
	if b.tokens < -l.burst {
		b.tokens = -l.burst
	}
}

// Reset forgets key (e.g. after a successful sign-in).
func (l *Limiter) Reset(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	delete(l.buckets, key)
	l.mu.Unlock()
}

func (l *Limiter) take(key string, n float64, consume bool) (bool, time.Duration) {
	if l == nil || l.rate <= 0 || l.burst <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.refill(key, now)
	if b.tokens >= n {
		if consume {
			b.tokens -= n
		}
		return true, 0
	}
	wait := time.Duration((n - b.tokens) / l.rate * float64(time.Second))
	if wait < time.Second {
		wait = time.Second
	}
	return false, wait
}

// refill returns key's bucket topped up to now; l.mu is held.
func (l *Limiter) refill(key string, now time.Time) *bucket {
	if now.Sub(l.sweep) > time.Minute {
		l.sweep = now
		full := time.Duration(2 * l.burst / l.rate * float64(time.Second))
		for k, b := range l.buckets {
			if now.Sub(b.last) > full {
				delete(l.buckets, k)
			}
		}
	}
	b, ok := l.buckets[key]
	if !ok {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
		return b
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens += el * l.rate
		if b.tokens > l.burst {
			b.tokens = l.burst
		}
		b.last = now
	}
	return b
}
