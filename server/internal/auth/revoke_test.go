package auth

import (
	"context"
	"testing"
	"time"
)

// A revocation made by another process (`bap client revoke` writes the database directly) reaches
// a running server through NOTIFY: its cached "active" answers are dropped at once.
func TestRevocationByAnotherProcessIsSeenAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c := b.client("acme", "bap:tasks.read")
	tok := b.accessToken(c)
	deadline := time.Now().Add(5 * time.Second)
	for !b.srv.active.isListening() {
		if time.Now().After(deadline) {
			t.Fatal("revocation listener not connected")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := b.api("GET", "/bap/v1/tasks/tsk_unknown", tok, ""); r.status != 404 {
		t.Fatalf("before: %d", r.status)
	}
	if r := b.api("GET", "/bap/v1/tasks/tsk_unknown", tok, ""); r.status != 404 { // now cached
		t.Fatalf("before: %d", r.status)
	}
	if err := RevokeClient(context.Background(), b.pool, c.ClientID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		r := b.api("GET", "/bap/v1/tasks/tsk_unknown", tok, "")
		if r.status == 401 {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("still %d %s two seconds after the revocation", r.status, r.raw)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("revocation took %v to be seen", d)
	}
}
