package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/serverkey"
	"github.com/originweave/bap/server/internal/store"
)

// The first node records its server key's id; a node with another key is refused, one with the
// same key is not, and the database holds the id only, never the key.
func TestBindServerKeyRefusesAnotherKey(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	first, other := serverkey.Ephemeral(), serverkey.Ephemeral()
	if err := store.BindServerKey(ctx, db, first.ID()); err != nil {
		t.Fatal(err)
	}
	if err := store.BindServerKey(ctx, db, first.ID()); err != nil {
		t.Fatalf("the same key again: %v", err)
	}
	if err := store.BindServerKey(ctx, db, other.ID()); !errors.Is(err, store.ErrServerKeyMismatch) {
		t.Fatalf("another key: %v, want ErrServerKeyMismatch", err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM server_key`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows (%v)", n, err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO server_key (singleton, key_id) VALUES (false, $1)`, other.ID()); err == nil {
		t.Fatal("a second row was accepted")
	}
	if err := store.BindServerKey(ctx, db, "not-an-id"); err == nil {
		t.Fatal("a malformed id was recorded or accepted")
	}
}
