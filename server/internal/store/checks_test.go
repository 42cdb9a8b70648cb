package store_test

import (
	"context"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/originweave/bap/migrations"
	"github.com/originweave/bap/server/internal/pgtest"
)

// TestRewrittenChecksAcceptWhatTheirPatternsAccepted: migration 0028 rewrote every CHECK that
// used a bounded repetition ('^cmd_[A-Za-z0-9_-]{1,64}$') as a length bound and an unbounded
// pattern, because PostgreSQL matches the first 10 to 70 times slower. Each rule as it is now must
// accept exactly the strings its old pattern (kept in the migration's comments) accepted: here on
// strings of every boundary length, of characters inside and outside the classes, with and
// without the id's prefix, a trailing newline and a multi-byte character.
func TestRewrittenChecksAcceptWhatTheirPatternsAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	src, err := fs.ReadFile(migrations.FS, "0028_checks_without_bounded_repetition.sql")
	if err != nil {
		t.Fatal(err)
	}
	was := regexp.MustCompile(`(\w+_check) was (\S+?)(?:;|$)`)
	olds := map[string]string{}
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "-- ") {
			continue
		}
		for _, m := range was.FindAllStringSubmatch(line, -1) {
			olds[m[1]] = m[2]
		}
	}
	if len(olds) < 30 {
		t.Fatalf("read %d old patterns from the migration's comments, want all of them", len(olds))
	}
	for name, old := range olds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var table, def string
			if err := db.QueryRow(ctx, `SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1`, name).Scan(&table, &def); err != nil {
				t.Fatalf("constraint %s: %v", name, err)
			}
			if strings.Contains(def, "{") {
				t.Fatalf("%s still has a bounded repetition: %s", name, def)
			}
			// The constraint's column, and its expression over a parameter instead.
			col := strings.TrimSuffix(strings.TrimPrefix(name, table+"_"), "_check")
			expr := strings.TrimSuffix(strings.TrimPrefix(def, "CHECK ("), ")")
			expr = regexp.MustCompile(`\b`+col+`\b`).ReplaceAllString(expr, "s")
			corpus := probes(old)
			var differ []string
			rows, err := db.Query(ctx, `SELECT s FROM unnest($1::text[]) AS p (s)
				WHERE (s ~ $2) IS DISTINCT FROM coalesce((`+expr+`), true)`, corpus, old)
			if err != nil {
				t.Fatalf("comparing %s: %v", expr, err)
			}
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				differ = append(differ, s)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if len(differ) > 0 {
				t.Errorf("%s (%s) and the old %s disagree on %d of %d strings, e.g. %q", name, def, old, len(differ), len(corpus), differ[0])
			}
		})
	}
}

// probes are strings on both sides of pattern's rule: its literal prefix or another, filled with
// characters inside and outside its classes, at every length near its bounds.
func probes(pattern string) []string {
	prefix := strings.TrimPrefix(pattern, "^")
	if i := strings.IndexAny(prefix, "[("); i >= 0 {
		prefix = prefix[:i]
	}
	prefixes := []string{"", prefix, "x" + prefix, strings.ToUpper(prefix), "node:", "orchestrator"}
	fills := []string{"a", "A", "0", "f", "g", "_", "-", ".", ":", "!", "~", " ", "é"}
	var out []string
	for _, p := range prefixes {
		for n := 0; n <= 260; n++ {
			if n > 20 && !(n >= 30 && n <= 34) && !(n >= 60 && n <= 70) && !(n >= 98 && n <= 102) && !(n >= 126 && n <= 130) && !(n >= 198 && n <= 207) && n < 253 {
				continue
			}
			for _, f := range fills {
				if len(p) > n {
					continue
				}
				s := p + strings.Repeat(f, n-len(p))
				out = append(out, s, s+"\n", s+"é")
				if n > len(p) && len(f) == 1 {
					out = append(out, s[:len(s)-1]+" ") // one character out of the class, at the end
				}
			}
		}
	}
	return out
}

// TestNoCheckExpandsABoundedRepetition: a CHECK's pattern does not repeat a class a bounded number
// of times beyond a few (write '^x_[a-z]+$' with a char_length bound instead; migration 0028 says
// why), so that no future migration brings the cost back.
func TestNoCheckExpandsABoundedRepetition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	rows, err := db.Query(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'c'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	bound := regexp.MustCompile(`\{([0-9]+)(?:,([0-9]+))?\}`)
	n := 0
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			t.Fatal(err)
		}
		n++
		for _, m := range bound.FindAllStringSubmatch(def, -1) {
			hi := m[1]
			if m[2] != "" {
				hi = m[2]
			}
			if len(hi) > 1 { // ten or more
				t.Errorf("%s repeats a pattern up to %s times: %s", name, hi, def)
			}
		}
	}
	if err := rows.Err(); err != nil || n < 100 {
		t.Fatalf("read %d CHECK constraints: %v", n, err)
	}
}
