package pgtest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://u:p@db.example:5432/other?sslmode=disable", "postgres://u:p@db.example:5432/x_1?sslmode=disable"},
		{"postgresql://u@h/other?dbname=y&sslmode=require", "postgresql://u@h/x_1?sslmode=require"},
		{"postgres://u@h", "postgres://u@h/x_1"},
		{"host=/tmp/s port=5432 user=bap dbname=postgres", "host=/tmp/s port=5432 user=bap dbname=postgres dbname='x_1'"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.in, "x_1")
		if err != nil || got != tt.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			continue
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil || cfg.Database != "x_1" {
			t.Errorf("pgx reads database %q (%v) from %q", cfg.Database, err, got)
		}
	}
}

func TestDBName(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^bap_test_[a-z0-9_]+_[0-9a-f]{10}$`)
	for _, in := range []string{"TestX", "TestX/sub test#01", strings.Repeat("TestLong", 20)} {
		got, err := dbName(in)
		if err != nil || !valid.MatchString(got) || len(got) > 63 {
			t.Errorf("dbName(%q) = %q, %v", in, got, err)
		}
		if again, _ := dbName(in); again == got {
			t.Errorf("dbName(%q) twice gave %q", in, got)
		}
	}
}
