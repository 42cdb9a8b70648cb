package store

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestMergeQueries: copies of one INSERT merge into one statement of all their rows only in the two
// forms whose rows are exactly the copies' rows; every other statement is left to run once per
// command.
func TestMergeQueries(t *testing.T) {
	for _, tt := range []struct {
		name     string
		sql      string
		args     [][]any
		wantSQL  string
		wantArgs []any
	}{
		{
			name:     "values with a function and a constant",
			sql:      "INSERT INTO t (a, b, c) VALUES ($1, left($2, 200), 'x-y')",
			args:     [][]any{{"a1", "b1"}, {"a2", "b2"}, {"a3", "b3"}},
			wantSQL:  "INSERT INTO t (a, b, c) VALUES ($1, left($2, 200), 'x-y'), ($3, left($4, 200), 'x-y'), ($5, left($6, 200), 'x-y')",
			wantArgs: []any{"a1", "b1", "a2", "b2", "a3", "b3"},
		},
		{
			name:     "values numbered past nine, across lines",
			sql:      "INSERT INTO t (a, b, c, d, e, f, g, h, i, j)\n\t\tVALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb)",
			args:     [][]any{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {11, 12, 13, 14, 15, 16, 17, 18, 19, 20}},
			wantSQL:  "INSERT INTO t (a, b, c, d, e, f, g, h, i, j)\n\t\tVALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb), ($11, $12, $13, $14, $15, $16, $17, $18, $19, $20::jsonb)",
			wantArgs: []any{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
		},
		{
			name:     "unnest of arrays",
			sql:      "INSERT INTO t (a, b) SELECT a, b FROM unnest($1::text[], $2::bigint[]) AS e (a, b)",
			args:     [][]any{{[]string{"x", "y"}, []int64{1, 2}}, {[]string{"z"}, []int64{3}}},
			wantSQL:  "INSERT INTO t (a, b) SELECT a, b FROM unnest($1::text[], $2::bigint[]) AS e (a, b)",
			wantArgs: []any{[]string{"x", "y", "z"}, []int64{1, 2, 3}},
		},
		{
			name: "unnest of arrays of different lengths",
			sql:  "INSERT INTO t (a, b) SELECT a, b FROM unnest($1::text[], $2::bigint[]) AS e (a, b)",
			args: [][]any{{[]string{"x", "y"}, []int64{1}}, {[]string{"z"}, []int64{3}}},
		},
		{
			name: "unnest of a bytea parameter",
			sql:  "INSERT INTO t (a, b) SELECT a, b FROM unnest($1::bytea[], $2::text[]) AS e (a, b)",
			args: [][]any{{[]byte{1}, []string{"x"}}, {[]byte{2}, []string{"y"}}},
		},
		{
			name: "unnest beside a scalar parameter",
			sql:  "INSERT INTO t (a, b) SELECT a, $2 FROM unnest($1::text[]) AS e (a)",
			args: [][]any{{[]string{"x"}, "k"}, {[]string{"y"}, "l"}},
		},
		{
			name: "values reading a table",
			sql:  "INSERT INTO r (a, b) SELECT tenant_id, $1 FROM c WHERE id = $2",
			args: [][]any{{"a", "b"}, {"c", "d"}},
		},
		{
			name: "returning",
			sql:  "INSERT INTO t (a) VALUES ($1) RETURNING a",
			args: [][]any{{"a"}, {"b"}},
		},
		{
			name: "on conflict",
			sql:  "INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING",
			args: [][]any{{"a"}, {"b"}},
		},
		{
			name: "a dollar in a constant",
			sql:  "INSERT INTO t (a, b) VALUES ($1, 'cost $2')",
			args: [][]any{{"a", "b"}, {"c", "d"}},
		},
		{
			name: "an update",
			sql:  "UPDATE t SET a = $1 WHERE b = $2",
			args: [][]any{{"a", "b"}, {"c", "d"}},
		},
		{
			name: "two statements",
			sql:  "INSERT INTO t (a) VALUES ($1); DELETE FROM t",
			args: [][]any{{"a"}, {"b"}},
		},
		{
			name: "copies with another number of arguments",
			sql:  "INSERT INTO t (a, b) VALUES ($1, $2)",
			args: [][]any{{"a", "b"}, {"c"}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var m merger
			qs := make([]*pgx.QueuedQuery, len(tt.args))
			for i, a := range tt.args {
				qs[i] = &pgx.QueuedQuery{SQL: tt.sql, Arguments: a}
			}
			for range 2 { // the second time from the remembered form and text
				q, ok := m.mergeQueries(qs)
				if tt.wantSQL == "" {
					if ok {
						t.Fatalf("merged into %q, want copies left alone", q.SQL)
					}
					continue
				}
				if !ok {
					t.Fatal("not merged")
				}
				if q.SQL != tt.wantSQL {
					t.Errorf("SQL\n%q, want\n%q", q.SQL, tt.wantSQL)
				}
				if !reflect.DeepEqual(q.Arguments, tt.wantArgs) {
					t.Errorf("arguments %v, want %v", q.Arguments, tt.wantArgs)
				}
			}
		})
	}
}

// TestBuildKeepsEachCommandsOrder: a group of the same command merges statement by statement; a
// group of different commands sends each command's statements after the previous command's.
func TestBuildKeepsEachCommandsOrder(t *testing.T) {
	batch := func(sqls ...string) *pgx.Batch {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		for i, s := range sqls {
			b.Queue(s, fmt.Sprint(i))
		}
		b.Queue("COMMIT")
		return b
	}
	ins := func(table string) string { return "INSERT INTO " + table + " (a) VALUES ($1)" }
	sel := "INSERT INTO r (a, b) SELECT a, $1 FROM c"
	texts := func(b *pgx.Batch) []string {
		var out []string
		for _, q := range b.QueuedQueries {
			out = append(out, q.SQL)
		}
		return out
	}
	var g committer
	same := g.build([]*groupMember{{b: batch(ins("t"), sel, ins("u"))}, {b: batch(ins("t"), sel, ins("u"))}})
	const generic = "SET LOCAL plan_cache_mode = force_generic_plan"
	want := []string{"BEGIN", generic, "INSERT INTO t (a) VALUES ($1), ($2)", sel, sel, "INSERT INTO u (a) VALUES ($1), ($2)", "COMMIT"}
	if got := texts(same); !reflect.DeepEqual(got, want) {
		t.Errorf("same commands: %q, want %q", got, want)
	}
	other := g.build([]*groupMember{{b: batch(ins("t"), ins("u"))}, {b: batch(ins("u"))}})
	want = []string{"BEGIN", generic, ins("t"), ins("u"), ins("u"), "COMMIT"}
	if got := texts(other); !reflect.DeepEqual(got, want) {
		t.Errorf("different commands: %q, want %q", got, want)
	}
}
