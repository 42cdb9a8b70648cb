package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/pgcluster"
)

// EnvDatabaseURL names the variable holding an existing server to test against.
const EnvDatabaseURL = "BAP_TEST_DATABASE_URL"

const (
	namePrefix = "bap_test_"
	dirPrefix  = "bap-pgtest-"
	ownerFile  = "owner.pid"
	// openTimeout bounds starting the private cluster and running setup.
	openTimeout = 5 * time.Minute
	// cleanupTimeout bounds dropping one test database.
	cleanupTimeout = time.Minute
)

// privateSettings make the throwaway cluster fast; its data need not survive a crash. max_connections
// leaves room for many parallel tests, each with a pool of its own.
var privateSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	"max_connections":    "300",
}

// current is the harness of this test binary. It is package state because testing.M offers no other
// way to hand a value from TestMain to the tests: Main sets it once before running them, and the
// harness guards its own mutable parts.
var current *harness

// Main runs the package's tests with one PostgreSQL for the whole test binary: BAP_TEST_DATABASE_URL
// if set (an existing server where we may CREATE DATABASE), else a private pgcluster in a temp dir,
// stopped after m.Run(). The server is prepared lazily at the first NewDB: a template database is
// created and setup (may be nil) is called once with a connection string to it; setup must close its
// connections before returning (leftovers are terminated). Main calls os.Exit.
func Main(m *testing.M, setup func(ctx context.Context, connString string) error) {
	os.Exit(run(m, setup))
}

// Run is Main without the exit: it returns m.Run's code after stopping the database, for a
// TestMain that has more to tear down (a browser) before it exits.
func Run(m *testing.M, setup func(ctx context.Context, connString string) error) int {
	return run(m, setup)
}

func run(m *testing.M, setup func(ctx context.Context, connString string) error) int {
	h := &harness{setup: setup, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	h.open = sync.OnceValues(h.prepare)
	current = h
	code := m.Run()
	if err := h.close(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// NewDB returns a pool on a fresh database for this test, created from the template database that
// Main's setup prepared once per test binary; the pool is closed and the database dropped at
// t.Cleanup. It fails the test if no database is available.
func NewDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	conn := NewDBURL(t)
	pool, err := pgxpool.New(t.Context(), conn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close) // runs before the DROP registered by NewDBURL
	if err := pool.Ping(t.Context()); err != nil {
		t.Fatalf("pgtest: connecting to the test database: %v", err)
	}
	return pool
}

// NewDBURL is NewDB as a connection string, for tests that start a whole server or open their own
// connections. Connections still open at cleanup are terminated when the database is dropped.
func NewDBURL(t testing.TB) string {
	t.Helper()
	h := current
	if h == nil {
		t.Fatal("pgtest: no database: the package's TestMain must call pgtest.Main")
	}
	e, err := h.open()
	if err != nil {
		t.Fatalf("pgtest: no database: %v", err)
	}
	name, err := dbName(t.Name())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if _, err := e.admin.Exec(t.Context(), "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(e.template)); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	conn, err := withDatabase(e.base, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return conn
}

// harness owns the server of one test binary.
type harness struct {
	setup func(ctx context.Context, connString string) error
	log   *slog.Logger
	// open prepares the server on first use and returns the same result ever after.
	open func() (*server, error)

	mu       sync.Mutex
	cleanups []func(context.Context) error // run in reverse order by close
}

// server is a prepared database server.
type server struct {
	base     string // connection string of a database to administer from
	admin    *pgxpool.Pool
	template string
}

func (h *harness) onClose(f func(context.Context) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cleanups = append(h.cleanups, f)
}

func (h *harness) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	var errs []error
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		errs = append(errs, h.cleanups[i](ctx))
	}
	h.cleanups = nil
	return errors.Join(errs...)
}

func (h *harness) prepare() (*server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	base := os.Getenv(EnvDatabaseURL)
	if base == "" {
		var err error
		if base, err = h.startPrivate(ctx); err != nil {
			return nil, err
		}
	}
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		return nil, fmt.Errorf("parsing the connection string: %w", err)
	}
	cfg.MaxConns = 4
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	h.onClose(func(context.Context) error { admin.Close(); return nil })

	s := &server{base: base, admin: admin}
	if s.template, err = dbName("tmpl"); err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident(s.template)); err != nil {
		return nil, fmt.Errorf("creating the template database: %w", err)
	}
	h.onClose(func(ctx context.Context) error {
		_, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(s.template)+" WITH (FORCE)")
		return err
	})
	if h.setup != nil {
		conn, err := withDatabase(base, s.template)
		if err != nil {
			return nil, err
		}
		if err := h.setup(ctx, conn); err != nil {
			return nil, fmt.Errorf("setting up the template database: %w", err)
		}
	}
	// CREATE DATABASE ... TEMPLATE fails while anyone is connected to the template.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+ident(s.template)+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return nil, fmt.Errorf("closing the template database: %w", err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
		s.template); err != nil {
		return nil, fmt.Errorf("disconnecting setup's sessions from the template database: %w", err)
	}
	return s, nil
}

// startPrivate starts a private cluster in a fresh directory and returns a connection string to its
// `postgres` database.
func (h *harness) startPrivate(ctx context.Context) (string, error) {
	sweep(ctx, h.log)
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return "", fmt.Errorf("creating the cluster directory: %w", err)
	}
	h.onClose(func(context.Context) error { return os.RemoveAll(dir) })
	// As root, the cluster runs as `postgres`, which must be able to enter the directory.
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", fmt.Errorf("opening the cluster directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", ownerFile, err)
	}
	c, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: dir, Logger: h.log, Settings: privateSettings})
	if err != nil {
		return "", err
	}
	h.onClose(c.Stop)
	return c.ConnString("postgres"), nil
}

// sweep stops and removes private clusters left by test binaries that died (their owner.pid names a
// process that no longer exists). Problems are logged, not returned: the leftovers are not ours.
func sweep(ctx context.Context, log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours, or its owner has not written the file yet
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processExists(pid) {
			continue
		}
		log.Warn("removing a test cluster left by a dead test binary", "dir", dir, "pid", pid)
		if pidFile, err := os.ReadFile(filepath.Join(dir, "pgdata", "postmaster.pid")); err == nil {
			pmPID, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
			if pmPID > 0 && processExists(pmPID) {
				// Adopt the server to stop it.
				c, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: dir, Logger: log, Settings: privateSettings})
				if err == nil {
					err = c.Stop(ctx)
				}
				if err != nil {
					log.Warn("could not stop a leftover test cluster", "dir", dir, "error", err)
					continue
				}
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("could not remove a leftover test cluster", "dir", dir, "error", err)
		}
	}
}

func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// dbName makes a unique database name that says which test made it: bap_test_<test>_<random>, within
// PostgreSQL's 63-byte limit.
func dbName(testName string) (string, error) {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[:40]
	}
	var rnd [5]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", fmt.Errorf("naming a database: %w", err)
	}
	return namePrefix + name + "_" + hex.EncodeToString(rnd[:]), nil
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// withDatabase returns conn (a postgres:// URL or a keyword/value string) with its database set to db.
func withDatabase(conn, db string) (string, error) {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", fmt.Errorf("parsing the database URL: %w", err)
		}
		u.Path = "/" + db
		u.RawPath = ""
		q := u.Query()
		q.Del("dbname")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// In keyword/value strings the last occurrence of a keyword wins.
	quoted := "'" + strings.ReplaceAll(strings.ReplaceAll(db, `\`, `\\`), "'", `\'`) + "'"
	return strings.TrimSpace(conn) + " dbname=" + quoted, nil
}
