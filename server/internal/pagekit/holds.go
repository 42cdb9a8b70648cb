package pagekit

import (
	"context"
	"time"
)

// The waits of request holds, the same on every engine (browser/hold.go, firefox/hold.go): an
// act that may submit waits, after it settled, until the page has been quiet at interception for
// RequestQuiet (at most RequestQuietMax), since browsers report some requests late (beacons, a
// loaded machine) and a non-safe request that arrives after the act returned is refused rather
// than held. The late requests of an act a person approved go out for ApprovedGrace after it.
const (
	RequestQuiet    = 150 * time.Millisecond
	RequestQuietMax = time.Second
	ApprovedGrace   = time.Second
)

// AwaitQuiet waits until state reports a hold, or no request reached interception for
// RequestQuiet, or RequestQuietMax passed, or ctx ends. state returns whether a request is held,
// when the last request reached interception, and a channel closed at the next change.
func AwaitQuiet(ctx context.Context, state func() (held bool, last time.Time, changed <-chan struct{})) {
	start := time.Now()
	for {
		held, last, ch := state()
		now := time.Now()
		until := start
		if last.After(until) {
			until = last
		}
		until = until.Add(RequestQuiet)
		if held || !now.Before(until) || now.Sub(start) >= RequestQuietMax {
			return
		}
		timer := time.NewTimer(until.Sub(now))
		select {
		case <-timer.C:
		case <-ch:
		case <-ctx.Done():
			timer.Stop()
			return
		}
		timer.Stop()
	}
}
