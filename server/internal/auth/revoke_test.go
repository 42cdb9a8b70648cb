package auth

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/waitfor"
)

// A revocation made by another process (`bap client revoke` writes the database directly) reaches
// a running server through NOTIFY: its cached "active" answers are dropped at once. The cache
// keeps an answer for an hour here, so only the notice can make the revoked token fail within the
// wait (no timing is asserted: a loaded machine once took 263 ms).
func TestRevocationByAnotherProcessIsSeenAtOnce(t *testing.T) {
	t.Parallel()
	b := setupWith(t, time.Hour, 0, nil)
	c := b.client("acme", "bap:tasks.read")
	tok := b.accessToken(c)
	waitfor.True(t, 5*time.Second, "the revocation listener connects", b.srv.active.isListening)
	if r := b.api("GET", "/bap/v1/tasks/tsk_unknown", tok, ""); r.status != 404 {
		t.Fatalf("before: %d", r.status)
	}
	if r := b.api("GET", "/bap/v1/tasks/tsk_unknown", tok, ""); r.status != 404 { // now cached
		t.Fatalf("before: %d", r.status)
	}
	if err := RevokeClient(context.Background(), b.pool, c.ClientID); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, 10*time.Second, "the revoked token is refused", func() (bool, string) {
		r := b.api("GET", "/bap/v1/tasks/tsk_unknown", tok, "")
		return r.status == 401, fmt.Sprintf("%d %s", r.status, r.raw)
	})
}
