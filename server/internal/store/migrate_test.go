package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// Release and rollback (issue #23 item 9): Status reports the migrations a database lacks without
// applying them (`bap migrate --check`), and a build refuses a database that a newer release
// migrated — Migrate (every `bap serve` and `bap migrate` start) and Status both answer a
// *SchemaTooNewError naming the two versions, and nothing is applied.
func TestSchemaStatusAndNewerSchemaRefusal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	known := store.SchemaVersion()

	st, err := store.Status(ctx, db)
	if err != nil || st.Applied != known || st.Known != known || len(st.Pending) != 0 {
		t.Fatalf("Status of a migrated database = %+v, %v; want applied = known = %d, nothing pending", st, err, known)
	}
	var last string
	if err := db.QueryRow(ctx, `DELETE FROM schema_migration WHERE version = $1 RETURNING name`, known).Scan(&last); err != nil {
		t.Fatal(err)
	}
	st, err = store.Status(ctx, db)
	if err != nil || st.Applied != known-1 || len(st.Pending) != 1 || st.Pending[0].Version != known || st.Pending[0].Name != last {
		t.Fatalf("Status with the last migration unrecorded = %+v, %v; want %s pending", st, err, last)
	}
	if _, err := db.Exec(ctx, `INSERT INTO schema_migration (version, name) VALUES ($1, $2), ($3, $4)`,
		known, last, known+1, fmt.Sprintf("%04d_from_a_newer_release", known+1)); err != nil {
		t.Fatal(err)
	}

	applied, err := store.Migrate(ctx, db)
	var newer *store.SchemaTooNewError
	if !errors.As(err, &newer) || newer.Database != known+1 || newer.Known != known || len(applied) != 0 {
		t.Fatalf("Migrate on a newer schema = %v, %v; want a SchemaTooNewError %d > %d", applied, err, known+1, known)
	}
	for _, want := range []string{fmt.Sprintf("version %d", known+1), fmt.Sprintf("version %d, the newest this build", known), "release-and-rollback"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if _, err := store.Status(ctx, db); !errors.As(err, &newer) {
		t.Errorf("Status on a newer schema: %v, want a SchemaTooNewError", err)
	}
}
