package store_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/pgtest"
)

// Every database object the migrations create has a name of at least two words in snake_case (the
// brief's persistence rule): tables, views, indexes, sequences, functions, triggers and
// constraints. PostgreSQL's own objects (pg_catalog, information_schema, the toast and temporary
// schemas) and whatever an extension owns are not the migrations' and are left out.
func TestEveryDatabaseObjectNameIsSnakeCaseOfTwoWords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	bad, count := badObjectNames(t, ctx, db)
	for _, b := range bad {
		t.Errorf("%s is not snake_case of at least two words", b)
	}
	// The query still sees what the migrations create (a broken filter would pass vacuously).
	for _, kind := range []string{"table", "view", "index", "sequence", "function", "trigger", "constraint"} {
		if count[kind] == 0 {
			t.Errorf("no %s found: is the catalog query still right? (%v)", kind, count)
		}
	}
	if count["table"] < 19 {
		t.Errorf("only %d tables found, the brief suggests 19", count["table"])
	}
	// And it finds a name that breaks the rule.
	if _, err := db.Exec(ctx, `CREATE TABLE widget (part_id int CONSTRAINT "Part_Check" CHECK (part_id > 0))`); err != nil {
		t.Fatal(err)
	}
	if bad, _ := badObjectNames(t, ctx, db); len(bad) != 2 || bad[0] != `constraint "Part_Check"` || bad[1] != `table "widget"` {
		t.Errorf("a one-word table and a camel-case constraint: found %q", bad)
	}
}

// badObjectNames returns the objects of the migrations' schemas whose names break the rule, as
// `kind "name"` sorted, and how many of each kind it looked at.
func badObjectNames(t *testing.T, ctx context.Context, db *pgxpool.Pool) ([]string, map[string]int) {
	t.Helper()
	// Every schema but PostgreSQL's own; no object an extension owns.
	const ours = `n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'`
	const notExtension = `NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = o.oid AND d.deptype = 'e')`
	rows, err := db.Query(ctx, `
		SELECT CASE o.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' WHEN 'v' THEN 'view' WHEN 'm' THEN 'view'
				WHEN 'i' THEN 'index' WHEN 'I' THEN 'index' ELSE 'sequence' END, o.relname::text
			FROM pg_class o JOIN pg_namespace n ON n.oid = o.relnamespace
			WHERE `+ours+` AND o.relkind IN ('r', 'p', 'v', 'm', 'i', 'I', 'S') AND `+notExtension+`
		UNION ALL
		SELECT 'function', o.proname::text FROM pg_proc o JOIN pg_namespace n ON n.oid = o.pronamespace
			WHERE `+ours+` AND `+notExtension+`
		UNION ALL
		SELECT 'trigger', o.tgname::text FROM pg_trigger o JOIN pg_class c ON c.oid = o.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE `+ours+` AND NOT o.tgisinternal
		UNION ALL
		SELECT 'constraint', o.conname::text FROM pg_constraint o JOIN pg_namespace n ON n.oid = o.connamespace
			WHERE `+ours+` AND `+notExtension+`
		UNION ALL
		SELECT 'type', o.typname::text FROM pg_type o JOIN pg_namespace n ON n.oid = o.typnamespace
			WHERE `+ours+` AND o.typtype IN ('e', 'd', 'c') AND o.typrelid = 0 AND `+notExtension+`
		ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	name := regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)+$`)
	var bad []string
	count := map[string]int{}
	for rows.Next() {
		var kind, n string
		if err := rows.Scan(&kind, &n); err != nil {
			t.Fatal(err)
		}
		count[kind]++
		if !name.MatchString(n) {
			bad = append(bad, fmt.Sprintf("%s %q", kind, n))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return bad, count
}
