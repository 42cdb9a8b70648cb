package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/migrations"
)

// migrationLockKey is the advisory lock that serialises migrators of several nodes on one database.
const migrationLockKey = 0x6261706d6967 // "bapmig"

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		return nil, fmt.Errorf("reading migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q: name must be NNNN_description.sql", name)
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := range out {
		if out[i].Version != i+1 {
			return nil, fmt.Errorf("migration %s: versions must be 1, 2, 3, … without gaps", out[i].Name)
		}
	}
	return out, nil
}

// SchemaVersion is the highest migration version this build knows.
func SchemaVersion() int {
	ms, err := Migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Migrate applies every migration not yet recorded in schema_migration, each in its own
// transaction, under an advisory lock so that concurrent nodes do not race. It returns the versions
// it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquiring connection for migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey); err != nil {
		return nil, fmt.Errorf("taking migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the unlock must run even when ctx was cancelled mid-migration.
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLockKey)
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migration (
		version    integer PRIMARY KEY CHECK (version > 0),
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("creating schema_migration: %w", err)
	}
	applied := map[int]bool{}
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migration`)
	if err != nil {
		return nil, fmt.Errorf("reading schema_migration: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("reading schema_migration: %w", err)
	}
	for _, v := range versions {
		applied[v] = true
	}
	if err := refuseNewer(ctx, conn, ms); err != nil {
		return nil, err
	}
	var done []int
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migration (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return done, fmt.Errorf("applying migration %s: %w", m.Name, err)
		}
		done = append(done, m.Version)
	}
	return done, nil
}

// SchemaTooNewError is the refusal to run on a database that a newer release migrated: this build
// does not know the tables and constraints it would write around (docs/release-and-rollback.md).
type SchemaTooNewError struct {
	// Database is the database's highest applied migration, Name its name.
	Database int
	Name     string
	// Known is the highest migration this build knows.
	Known int
}

// Error names both versions and what to do.
func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("the database schema is at version %d (%s), newer than version %d, the newest this build of bap knows: "+
		"a newer release migrated it; run a release that knows version %d, or restore the database from the backup taken before "+
		"that upgrade (docs/release-and-rollback.md)", e.Database, e.Name, e.Known, e.Database)
}

// refuseNewer returns a *SchemaTooNewError when q's database holds a migration newer than ms.
func refuseNewer(ctx context.Context, q Querier, ms []Migration) error {
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].Version
	}
	var v int
	var name string
	err := q.QueryRow(ctx, `SELECT version, name FROM schema_migration WHERE version > $1 ORDER BY version DESC LIMIT 1`, known).Scan(&v, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading schema_migration: %w", err)
	}
	return &SchemaTooNewError{Database: v, Name: name, Known: known}
}

// SchemaStatus is a database's schema against this build's migrations.
type SchemaStatus struct {
	// Applied is the highest applied migration (0 on an empty database); Known the highest this
	// build knows.
	Applied, Known int
	// Pending are the migrations this build knows and the database lacks, in order.
	Pending []Migration
}

// Status reads the database's schema without changing it (`bap migrate --check`). A database
// newer than this build is a *SchemaTooNewError.
func Status(ctx context.Context, q Querier) (SchemaStatus, error) {
	ms, err := Migrations()
	if err != nil {
		return SchemaStatus{}, err
	}
	st := SchemaStatus{Known: ms[len(ms)-1].Version}
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('schema_migration') IS NOT NULL`).Scan(&exists); err != nil {
		return SchemaStatus{}, fmt.Errorf("looking for schema_migration: %w", err)
	}
	applied := map[int]bool{}
	if exists {
		if err := refuseNewer(ctx, q, ms); err != nil {
			return SchemaStatus{}, err
		}
		rows, err := q.Query(ctx, `SELECT version FROM schema_migration`)
		if err != nil {
			return SchemaStatus{}, fmt.Errorf("reading schema_migration: %w", err)
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return SchemaStatus{}, fmt.Errorf("reading schema_migration: %w", err)
		}
		for _, v := range versions {
			applied[v] = true
			st.Applied = max(st.Applied, v)
		}
	}
	for _, m := range ms {
		if !applied[m.Version] {
			st.Pending = append(st.Pending, m)
		}
	}
	return st, nil
}

// AppliedVersion reports the highest applied migration version (0 when none).
func AppliedVersion(ctx context.Context, q Querier) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migration`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("reading applied schema version: %w", err)
	}
	return v, nil
}

// MigrateURL connects to connString, applies the migrations and disconnects (test harnesses and
// tools use it as their setup step).
func MigrateURL(ctx context.Context, connString string) error {
	pool, err := Open(ctx, connString, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = Migrate(ctx, pool)
	return err
}
