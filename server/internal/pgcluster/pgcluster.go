package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultRunAsUser is the cluster user when the process runs as root.
const DefaultRunAsUser = "postgres"

// defaultWait bounds every wait whose context has no deadline, like pg_ctl's own default (-t 60).
const defaultWait = 60 * time.Second

// Config configures an embedded cluster.
type Config struct {
	// DataDir holds the cluster and everything that goes with it (see the package doc). Required; a
	// relative path is made absolute. It is created if missing.
	DataDir string
	// Logger receives progress and problems; nil discards them.
	Logger *slog.Logger
	// RunAsUser is the OS user that runs PostgreSQL and owns its files when this process runs as root
	// (euid 0). Default DefaultRunAsUser. When not root, the cluster runs as the current user and
	// RunAsUser must be empty or name that user.
	RunAsUser string
	// Settings are extra server parameters written to bap.conf over the defaults (for example
	// {"shared_buffers": "256MB"}). The connection parameters (listen_addresses, port, unix_socket_*) are
	// fixed by pgcluster and rejected here.
	Settings map[string]string
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RunAsUser == "" && os.Geteuid() == 0 {
		c.RunAsUser = DefaultRunAsUser
	}
}

func (c *Config) validate() error {
	if c.DataDir == "" {
		return errors.New("DataDir is required")
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("DataDir: %w", err)
	}
	c.DataDir = abs
	// pg_ctl runs the server through /bin/sh with the paths in double quotes.
	if strings.ContainsAny(c.DataDir, "\"$`\\\n\r\x00") {
		return fmt.Errorf("DataDir %q contains a character pg_ctl cannot pass to the shell (\" $ ` \\ or a line break)", c.DataDir)
	}
	return validateSettings(c.Settings)
}

// Cluster is a running PostgreSQL server that this process owns, either started by Start or adopted
// from a previous process. Its methods are safe for concurrent use.
type Cluster struct {
	dataDir        string
	pgdata         string
	socketDir      string
	fallbackSocket bool
	port           int
	settings       map[string]string
	run            runner
	log            *slog.Logger

	mu      sync.Mutex
	stopped bool
}

// Start makes the cluster under cfg.DataDir run and returns once it accepts connections and the
// database `bap` exists: it runs initdb if there is no cluster yet, adopts a server already running on
// it, or starts it with pg_ctl. ctx bounds the whole call (60 s when it has no deadline); if ctx ends
// while the server is starting, Start tries to stop it again before returning the error.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()

	o, err := resolveOwner(os.Geteuid(), cfg.RunAsUser)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	perm := os.FileMode(0o700)
	if o.Switch {
		perm = 0o711 // the cluster user must be able to enter it
	}
	if err := os.MkdirAll(cfg.DataDir, perm); err != nil {
		return nil, fmt.Errorf("pgcluster: creating the data dir: %w", err)
	}
	unlock, err := lockDir(ctx, filepath.Join(cfg.DataDir, "pgcluster.lock"))
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	defer unlock()
	if err := o.CheckSearchable(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}

	c := &Cluster{
		dataDir:  cfg.DataDir,
		pgdata:   filepath.Join(cfg.DataDir, "pgdata"),
		port:     port,
		settings: cfg.Settings,
		log:      cfg.Logger.With("data_dir", cfg.DataDir),
	}
	c.socketDir, c.fallbackSocket = socketDirFor(cfg.DataDir)

	dataMajor, err := readDataVersion(c.pgdata)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	bin, err := findBinaries(ctx, os.Getenv("PATH"), debianBinGlob, dataMajor)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	c.run = runner{bin: bin, owner: o, workDir: cfg.DataDir, log: c.log}

	adopted, err := c.adopt(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if !adopted {
		if dataMajor == "" {
			if err := c.initdb(ctx); err != nil {
				return nil, fmt.Errorf("pgcluster: initialising %s: %w", c.pgdata, err)
			}
		}
		if err := c.start(ctx); err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
	}
	if err := c.ensureDatabase(ctx); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", errors.Join(err, c.stopAfterFailedStart(ctx)))
	}
	return c, nil
}

// ConnString returns a libpq keyword/value connection string (usable by pgx) for database dbname as
// the superuser, over the Unix socket, e.g. "host=/var/lib/bap/pgsock port=5432 user=bap dbname=bap".
func (c *Cluster) ConnString(dbname string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s", dsnQuote(c.socketDir), c.port, Superuser, dsnQuote(dbname))
}

// Stop shuts the server down with pg_ctl's fast mode (open sessions are disconnected, transactions
// roll back) and waits until it is gone. It returns nil when the server is already stopped, so it may
// be called more than once and concurrently; after an error it can be retried. ctx bounds the wait (60 s
// when it has no deadline); at shutdown, pass one that is not already cancelled.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	if err := c.stop(ctx); err != nil {
		return fmt.Errorf("pgcluster: stopping PostgreSQL: %w", err)
	}
	c.stopped = true
	if c.fallbackSocket {
		_ = os.Remove(c.socketDir) // only succeeds when empty; postgres removed its socket
	}
	c.log.Info("PostgreSQL stopped")
	return nil
}

func (c *Cluster) stop(ctx context.Context) error {
	pidPath := filepath.Join(c.pgdata, "postmaster.pid")
	if pf, ok, _ := readPidFile(pidPath); !ok || !alive(pf.pid) || zombie(pf.pid) {
		return nil // not running; a stale postmaster.pid is for the next start to deal with
	}
	err := c.run.run(ctx, "pg_ctl", "stop", "-D", c.pgdata, "-m", "fast", "-w", "-t", waitSeconds(ctx), "-s")
	if err != nil {
		if _, ok, _ := readPidFile(pidPath); !ok {
			return nil // it went away on its own meanwhile
		}
		return err
	}
	return nil
}

// stopAfterFailedStart stops a server that Start launched or adopted but cannot hand out, so that no
// server is left running without an owner. It gets a fresh deadline since ctx may be what ended.
func (c *Cluster) stopAfterFailedStart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultWait)
	defer cancel()
	if err := c.stop(ctx); err != nil {
		return fmt.Errorf("stopping the server again: %w", err)
	}
	return nil
}

// adopt takes over a server already running on pgdata. It returns false when none runs (no
// postmaster.pid, or its process is gone: pg_ctl start deals with the stale file), and waits while one
// is starting up or shutting down, or has exited but is still a zombie.
func (c *Cluster) adopt(ctx context.Context) (bool, error) {
	pidPath := filepath.Join(c.pgdata, "postmaster.pid")
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		pf, ok, err := readPidFile(pidPath)
		switch {
		case err != nil:
			last = err // being written; look again
		case !ok:
			return false, nil
		case !alive(pf.pid):
			c.log.Info("stale postmaster.pid: its process is gone; pg_ctl start will replace it", "pid", pf.pid)
			return false, nil
		case zombie(pf.pid):
			// Its parent (init, for a daemonised postmaster) has not reaped it yet; postgres will not
			// start until it has.
			last = fmt.Errorf("the postmaster (PID %d) has exited but is not reaped yet (a zombie)", pf.pid)
		case !looksLikePostgres(pf.pid):
			return false, fmt.Errorf("%s names PID %d, which is running but is not PostgreSQL, so PostgreSQL "+
				"will refuse to start; if no server runs on %s, remove that file", pidPath, pf.pid, c.pgdata)
		case pf.socketDir == "" || pf.port == 0:
			last = errors.New("the server has not opened its socket yet")
		default:
			conn := connString(pf.socketDir, pf.port, "postgres")
			dir, err := serverDataDir(ctx, conn)
			if err == nil {
				if !sameFile(dir, c.pgdata) {
					return false, fmt.Errorf("the server on %s (PID %d) serves %s, not %s", pf.socketDir, pf.pid, dir, c.pgdata)
				}
				c.socketDir, c.port = pf.socketDir, pf.port
				ours, isFallback := socketDirFor(c.dataDir)
				c.fallbackSocket = isFallback && c.socketDir == ours
				c.log.Info("adopted the running PostgreSQL", "pid", pf.pid, "status", pf.status)
				return true, nil
			}
			last = err
		}
		select {
		case <-ctx.Done():
			//nolint:errorlint // last may be nil; it is context for the reader, the cause is what callers match
			return false, fmt.Errorf("a PostgreSQL server (%s) runs on %s but does not answer (last error: %v): %w",
				pidPath, c.pgdata, last, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// initdb creates the cluster in pgdata.initdb and renames it to pgdata when complete, so a pgdata that
// exists is always a whole cluster. A pgdata.initdb left by a killed Start is discarded.
func (c *Cluster) initdb(ctx context.Context) error {
	tmp := c.pgdata + ".initdb"
	if _, err := os.Lstat(tmp); err == nil {
		c.log.Warn("removing an incomplete initdb", "dir", tmp)
		if err := os.RemoveAll(tmp); err != nil {
			return fmt.Errorf("removing %s: %w", tmp, err)
		}
	}
	if err := c.run.owner.EnsurePrivateDir(tmp, true); err != nil {
		return err
	}
	c.log.Info("initialising a PostgreSQL cluster", "version", c.run.bin.version, "bin", c.run.bin.dir)
	began := time.Now()
	// C locale: byte-order collation that no libc upgrade can change under an index. UTF8 encoding.
	if err := c.run.run(ctx, "initdb", "-D", tmp, "-U", Superuser, "--auth-local=trust", "--auth-host=reject",
		"--encoding=UTF8", "--locale=C"); err != nil {
		return err
	}
	// Both files exist (owned by the cluster user); writing in place keeps their owner.
	if err := os.WriteFile(filepath.Join(tmp, "pg_hba.conf"), []byte(hbaConf), 0o600); err != nil {
		return fmt.Errorf("writing pg_hba.conf: %w", err)
	}
	if err := c.ensureInclude(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.pgdata); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	if err := syncDir(c.dataDir); err != nil {
		return err
	}
	c.log.Info("initialised the cluster", "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// start writes bap.conf and runs pg_ctl start, which waits until the server is ready.
func (c *Cluster) start(ctx context.Context) error {
	if err := c.ensureInclude(c.pgdata); err != nil {
		return err
	}
	if err := c.writeOwned(filepath.Join(c.pgdata, "bap.conf"), renderConf(c.socketDir, c.settings)); err != nil {
		return err
	}
	if err := c.run.owner.EnsurePrivateDir(c.socketDir, !c.fallbackSocket); err != nil {
		return fmt.Errorf("the socket directory: %w", err)
	}
	logPath := filepath.Join(c.dataDir, "postgres.log")
	if err := c.ensureLog(logPath); err != nil {
		return err
	}
	began := time.Now()
	err := c.run.run(ctx, "pg_ctl", "start", "-D", c.pgdata, "-l", logPath, "-w", "-t", waitSeconds(ctx), "-s")
	if err != nil {
		err = fmt.Errorf("starting PostgreSQL (see %s): %w%s", logPath, err, logTail(logPath))
		if ctx.Err() != nil {
			err = errors.Join(err, c.stopAfterFailedStart(ctx))
		}
		return err
	}
	c.log.Info("PostgreSQL started", "version", c.run.bin.version, "socket_dir", c.socketDir,
		"took", time.Since(began).Round(time.Millisecond))
	return nil
}

// ensureDatabase creates the database `bap` unless it exists.
func (c *Cluster) ensureDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", Database).Scan(&exists); err != nil {
		return fmt.Errorf("looking for database %s: %w", Database, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{Database}.Sanitize()); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database
			return nil
		}
		return fmt.Errorf("creating database %s: %w", Database, err)
	}
	c.log.Info("created database", "database", Database)
	return nil
}

// ensureInclude appends the include of bap.conf to postgresql.conf unless it is there.
func (c *Cluster) ensureInclude(pgdata string) error {
	path := filepath.Join(pgdata, "postgresql.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading postgresql.conf: %w", err)
	}
	if bytes.Contains(b, []byte("\ninclude 'bap.conf'")) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("opening postgresql.conf: %w", err)
	}
	_, err = f.WriteString(confInclude)
	return errors.Join(err, f.Close())
}

// writeOwned replaces path atomically with data, owned by the cluster user, mode 0600.
func (c *Cluster) writeOwned(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := c.run.owner.Chown(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (c *Cluster) ensureLog(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	return c.run.owner.Chown(path)
}

// runner runs the PostgreSQL programs as the cluster user.
type runner struct {
	bin     binaries
	owner   owner
	workDir string
	log     *slog.Logger
}

func (r runner) run(ctx context.Context, program string, args ...string) error {
	cmd := exec.CommandContext(ctx, r.bin.path(program), args...)
	cmd.Dir = r.workDir
	cmd.Env = childEnv(os.Environ())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.owner.Credential()}
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	r.log.Debug("ran "+program, "args", args, "output", string(out), "error", err)
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", program, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// childEnv drops the PG* variables (PGPORT, PGDATA, ... would change what the programs do) and the
// locale, so that the programs behave the same everywhere and log in English.
func childEnv(env []string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") ||
			strings.HasPrefix(kv, "LANGUAGE=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LC_ALL=C")
}

func connString(socketDir string, port int, dbname string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s connect_timeout=5",
		dsnQuote(socketDir), port, Superuser, dsnQuote(dbname))
}

// serverDataDir connects and asks the server which data directory it serves.
func serverDataDir(ctx context.Context, conn string) (string, error) {
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close(context.WithoutCancel(ctx)) }()
	var dir string
	if err := c.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return "", err
	}
	return dir, nil
}

// readDataVersion returns the major version in pgdata/PG_VERSION, or "" when there is no cluster.
func readDataVersion(pgdata string) (string, error) {
	b, err := os.ReadFile(filepath.Join(pgdata, "PG_VERSION"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(pgdata); err == nil {
			return "", fmt.Errorf("%s exists but holds no cluster (no PG_VERSION); move it away", pgdata)
		}
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the cluster version: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return errors.Join(d.Sync(), d.Close())
}

// logTail returns the last lines of the server log, to put the server's own complaint in an error.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	const tailBytes = 2048
	if fi, err := f.Stat(); err == nil && fi.Size() > tailBytes {
		_, _ = f.Seek(-tailBytes, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "\npostgres.log ends with:\n" + strings.Join(lines, "\n")
}

func withDefaultDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultWait)
}

// waitSeconds is pg_ctl's -t for the time left in ctx.
func waitSeconds(ctx context.Context) string {
	s := int(defaultWait / time.Second)
	if d, ok := ctx.Deadline(); ok {
		s = int((time.Until(d) + time.Second - 1) / time.Second)
	}
	return strconv.Itoa(max(s, 1))
}
