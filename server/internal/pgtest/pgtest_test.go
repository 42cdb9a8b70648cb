package pgtest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, func(ctx context.Context, connString string) error {
		conn, err := pgx.Connect(ctx, connString)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(ctx) }()
		_, err = conn.Exec(ctx, "CREATE TABLE widget (name text PRIMARY KEY); INSERT INTO widget VALUES ('from-setup')")
		return err
	})
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func widgets(t *testing.T, q querier) []string {
	t.Helper()
	rows, err := q.Query(t.Context(), "SELECT name FROM widget ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestNewDBIsolated(t *testing.T) {
	t.Parallel()
	a, b := pgtest.NewDB(t), pgtest.NewDB(t)

	var nameA, nameB string
	if err := a.QueryRow(t.Context(), "SELECT current_database()").Scan(&nameA); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRow(t.Context(), "SELECT current_database()").Scan(&nameB); err != nil {
		t.Fatal(err)
	}
	if nameA == nameB || !strings.HasPrefix(nameA, "bap_test_testnewdbisolated_") {
		t.Fatalf("databases %q and %q: want two distinct bap_test_testnewdbisolated_* names", nameA, nameB)
	}

	// Both start from the template that setup prepared.
	for db, q := range map[string]querier{nameA: a, nameB: b} {
		if got := widgets(t, q); fmt.Sprint(got) != "[from-setup]" {
			t.Errorf("%s: widgets = %v, want [from-setup]", db, got)
		}
	}

	// What one test writes, the other does not see.
	if _, err := a.Exec(t.Context(), "INSERT INTO widget VALUES ('only-in-a'); CREATE TABLE gadget (id int)"); err != nil {
		t.Fatal(err)
	}
	if got := widgets(t, b); fmt.Sprint(got) != "[from-setup]" {
		t.Errorf("b sees a's row: widgets = %v", got)
	}
	if got := widgets(t, a); fmt.Sprint(got) != "[from-setup only-in-a]" {
		t.Errorf("a: widgets = %v", got)
	}
	var gadget *string
	if err := b.QueryRow(t.Context(), "SELECT to_regclass('gadget')::text").Scan(&gadget); err != nil || gadget != nil {
		t.Errorf("b sees a's table gadget: %v, %v", gadget, err)
	}
}

// TestDropAtCleanup checks that a test's database is gone once the test is over, even with a
// connection left open.
func TestDropAtCleanup(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("inner", func(t *testing.T) {
		conn, err := pgx.Connect(t.Context(), pgtest.NewDBURL(t))
		if err != nil {
			t.Fatal(err)
		}
		// Deliberately not closed: the drop terminates it.
		if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	var n int
	if err := pgtest.NewDB(t).QueryRow(t.Context(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if name == "" || n != 0 {
		t.Fatalf("database %q: %d left after its test ended, want 0", name, n)
	}
}

// TestManyParallel creates databases from the same template concurrently.
func TestManyParallel(t *testing.T) {
	t.Parallel()
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			if got := widgets(t, pgtest.NewDB(t)); len(got) != 1 {
				t.Errorf("widgets = %v", got)
			}
		})
	}
}
