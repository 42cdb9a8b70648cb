package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/waitfor"
)

// newDataDir returns a fresh directory the cluster user can enter. t.TempDir() is 0700, which the
// postgres user cannot enter when the tests run as root.
func newDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgcluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// start starts a cluster on dir and stops it at the end of the test.
func start(t *testing.T, dir string) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	began := time.Now()
	c, err := Start(ctx, Config{DataDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("Start took %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
	return c
}

func stop(t *testing.T, c *Cluster) {
	t.Helper()
	if err := c.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func connect(t *testing.T, c *Cluster, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.ConnString(db))
	if err != nil {
		t.Fatalf("connecting with %q: %v", c.ConnString(db), err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func selectOne(t *testing.T, c *Cluster) {
	t.Helper()
	var one int
	if err := connect(t, c, Database).QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}

func postmasterPID(t *testing.T, dir string) (int, bool) {
	t.Helper()
	pf, ok, err := readPidFile(filepath.Join(dir, "pgdata", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	return pf.pid, ok
}

func TestStartStopRestart(t *testing.T) {
	t.Parallel()
	dir := newDataDir(t)

	c := start(t, dir)
	selectOne(t, c)
	conn := connect(t, c, Database)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE marker (x int); INSERT INTO marker VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	var settings [3]string
	if err := conn.QueryRow(t.Context(),
		"SELECT current_setting('listen_addresses'), current_setting('fsync'), current_setting('idle_in_transaction_session_timeout')",
	).Scan(&settings[0], &settings[1], &settings[2]); err != nil {
		t.Fatal(err)
	}
	if settings != [3]string{"", "on", "1min"} {
		t.Errorf("listen_addresses, fsync, idle_in_transaction_session_timeout = %q", settings)
	}
	stop(t, c)
	stop(t, c) // idempotent
	if pid, ok := postmasterPID(t, dir); ok {
		t.Fatalf("postmaster.pid (PID %d) still present after Stop", pid)
	}

	// Same dir again: the cluster is reused (the table survived), not initialised anew.
	c = start(t, dir)
	var x int
	if err := connect(t, c, Database).QueryRow(t.Context(), "SELECT x FROM marker").Scan(&x); err != nil || x != 42 {
		t.Fatalf("after restart: SELECT x FROM marker = %d, %v", x, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "postgres.log")); err != nil {
		t.Errorf("postgres.log: %v", err)
	}
}

// TestAdopt simulates a bap that was killed with its PostgreSQL still running: a second Start on the
// same data dir adopts the running server rather than starting another.
func TestAdopt(t *testing.T) {
	t.Parallel()
	dir := newDataDir(t)

	first := start(t, dir)
	pid, ok := postmasterPID(t, dir)
	if !ok {
		t.Fatal("no postmaster.pid after Start")
	}
	second := start(t, dir)
	if got, _ := postmasterPID(t, dir); got != pid {
		t.Fatalf("postmaster PID %d after the second Start, want the adopted %d", got, pid)
	}
	selectOne(t, second)

	// Stop from two goroutines at once: both succeed, the server is gone.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = second.Stop(t.Context()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Stop: %v", err)
	}
	if _, ok := postmasterPID(t, dir); ok {
		t.Fatal("postmaster.pid still present after the adopter stopped the server")
	}
	// The postmaster removes postmaster.pid just before it exits.
	waitfor.True(t, 30*time.Second, fmt.Sprintf("postmaster %d exits after Stop", pid), func() bool { return !alive(pid) || zombie(pid) })
	stop(t, first) // the server is already gone: nil
}

// TestStalePidFile simulates a machine crash: every server process is killed, postmaster.pid stays,
// and Start recovers by letting pg_ctl replace the stale file.
func TestStalePidFile(t *testing.T) {
	t.Parallel()
	dir := newDataDir(t)

	c := start(t, dir)
	conn := connect(t, c, Database)
	if _, err := conn.Exec(t.Context(), "CREATE TABLE marker (x int); INSERT INTO marker VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(t.Context())
	pid, _ := postmasterPID(t, dir)
	// pg_ctl starts the postmaster in its own session and process group, shared with its children.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing process group %d: %v", pid, err)
	}
	// Poll a real condition: every process of the group has exited (zombies count as gone).
	waitfor.True(t, 30*time.Second, fmt.Sprintf("process group %d exits after SIGKILL", pid), func() bool { return !groupAlive(t, pid) })
	if _, ok := postmasterPID(t, dir); !ok {
		t.Fatal("postmaster.pid vanished; the test cannot simulate a stale one")
	}

	c = start(t, dir)
	var x int
	if err := connect(t, c, Database).QueryRow(t.Context(), "SELECT x FROM marker").Scan(&x); err != nil || x != 7 {
		t.Fatalf("after crash recovery: SELECT x FROM marker = %d, %v", x, err)
	}
}

// groupAlive reports whether a live (non-zombie) process is in process group pgid.
func groupAlive(t *testing.T, pgid int) bool {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// "pid (comm) state ppid pgrp ..."
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

// TestOddDataDirs checks data dirs too deep for a Unix socket path (the socket moves to /tmp) and
// data dirs with characters that need quoting in bap.conf, the shell command of pg_ctl and the
// connection string.
func TestOddDataDirs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		sub      string
		fallback bool
		wantErr  bool
	}{
		{name: "too long for a socket path", sub: strings.Repeat("long-path-", 10), fallback: true},
		{name: "quote and spaces", sub: "it's a dir"},
		{name: "comma", sub: "a,b", fallback: true},
		{name: "double quote", sub: `a "dir"`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(newDataDir(t), tt.sub)
			if err := os.Mkdir(dir, 0o711); err != nil {
				t.Fatal(err)
			}
			if tt.wantErr {
				if _, err := Start(t.Context(), Config{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "pg_ctl cannot pass") {
					t.Fatalf("Start = %v, want the DataDir refused", err)
				}
				return
			}
			c := start(t, dir)
			want, fallback := socketDirFor(dir)
			if fallback != tt.fallback || c.socketDir != want {
				t.Fatalf("socket dir %q (fallback %v), want %q (fallback %v)", c.socketDir, fallback, want, tt.fallback)
			}
			if tt.fallback && !strings.HasPrefix(want, "/tmp/bap-pg-") {
				t.Fatalf("fallback socket dir %q is not under /tmp", want)
			}
			selectOne(t, c)
			stop(t, c)
			if _, err := os.Lstat(want); tt.fallback && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("fallback socket dir %s after Stop: %v, want it removed", want, err)
			}
		})
	}
}

func TestCheckSearchable(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("only root runs the cluster as another user: run the suite as root, as make test and CI do")
	}
	o, err := resolveOwner(0, DefaultRunAsUser)
	if err != nil {
		t.Fatalf("the cluster's user: %v (make deps creates it)", err)
	}
	base := newDataDir(t)
	closed := filepath.Join(base, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := o.CheckSearchable(base); err != nil {
		t.Errorf("CheckSearchable(%s) = %v, want nil", base, err)
	}
	err = o.CheckSearchable(filepath.Join(closed, "data"))
	if err == nil || !strings.Contains(err.Error(), "cannot enter "+closed+" ") {
		t.Errorf("CheckSearchable below a 0700 root dir = %v, want it to name %s", err, closed)
	}
	_, err = Start(t.Context(), Config{DataDir: filepath.Join(closed, "data")})
	if err == nil || !strings.Contains(err.Error(), "chmod o+x "+closed) {
		t.Errorf("Start below a 0700 root dir = %v, want the chmod hint", err)
	}
}

func TestFindBinariesNotInstalled(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	_, err := findBinaries(t.Context(), empty, filepath.Join(empty, "*", "bin"), "")
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("findBinaries with nothing installed = %v, want ErrNotInstalled", err)
	}
	if !strings.Contains(ErrNotInstalled.Error(), "`postgresql`") {
		t.Errorf("ErrNotInstalled %q does not name the Debian package", ErrNotInstalled)
	}
}

func TestChoose(t *testing.T) {
	t.Parallel()
	path15 := binaries{dir: "/usr/local/pg", version: "15.18", major: "15"}
	deb16 := binaries{dir: "/usr/lib/postgresql/16/bin", version: "16.4", major: "16"}
	deb15 := binaries{dir: "/usr/lib/postgresql/15/bin", version: "15.18", major: "15"}
	tests := []struct {
		name      string
		found     []binaries
		dataMajor string
		want      string
		wantErr   bool
	}{
		{name: "none", wantErr: true},
		{name: "highest wins", found: []binaries{path15, deb16, deb15}, want: deb16.dir},
		{name: "tie goes to PATH", found: []binaries{path15, deb15}, want: path15.dir},
		{name: "existing cluster picks its major", found: []binaries{deb16, deb15}, dataMajor: "15", want: deb15.dir},
		{name: "existing cluster without its major", found: []binaries{deb16}, dataMajor: "15", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := choose(tt.found, tt.dataMajor)
			if (err != nil) != tt.wantErr || got.dir != tt.want {
				t.Fatalf("choose = %q, %v; want %q, error %v", got.dir, err, tt.want, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrNotInstalled) {
				t.Errorf("error %v does not wrap ErrNotInstalled", err)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	tests := []struct{ out, version, major string }{
		{"postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n", "15.18", "15"},
		{"postgres (PostgreSQL) 17.2\n", "17.2", "17"},
		{"postgres (PostgreSQL) 18devel\n", "18", "18"},
		{"postgres (PostgreSQL) 9.6.24\n", "9.6.24", "9.6"},
		{"something else", "", ""},
	}
	for _, tt := range tests {
		v, err := parseVersion(tt.out)
		if v != tt.version || (err != nil) != (tt.version == "") {
			t.Errorf("parseVersion(%q) = %q, %v; want %q", tt.out, v, err, tt.version)
			continue
		}
		if err == nil && majorOf(v) != tt.major {
			t.Errorf("majorOf(%q) = %q, want %q", v, majorOf(v), tt.major)
		}
	}
}

func TestSocketDirFor(t *testing.T) {
	t.Parallel()
	short := "/var/lib/bap"
	if got, fb := socketDirFor(short); got != "/var/lib/bap/pgsock" || fb {
		t.Errorf("socketDirFor(%q) = %q, %v", short, got, fb)
	}
	// The longest data dir that keeps its own socket dir: len(dir)+len("/pgsock/.s.PGSQL.5432") == 107.
	edge := "/" + strings.Repeat("d", maxSocketPath-len("/pgsock/.s.PGSQL.5432")-1)
	if got, fb := socketDirFor(edge); fb || len(got+"/"+socketFile) != maxSocketPath {
		t.Errorf("socketDirFor(%d bytes) = %q, fallback %v", len(edge), got, fb)
	}
	long := edge + "d"
	got, fb := socketDirFor(long)
	if !fb || !strings.HasPrefix(got, "/tmp/bap-pg-") || len(got) != len("/tmp/bap-pg-")+16 {
		t.Errorf("socketDirFor(%d bytes) = %q, %v; want /tmp/bap-pg-<16 hex>", len(long), got, fb)
	}
	if _, fb := socketDirFor("/srv/a,b"); !fb {
		t.Errorf("socketDirFor(a path with a comma) does not fall back")
	}
	if again, _ := socketDirFor(long); again != got {
		t.Errorf("socketDirFor is not deterministic: %q then %q", got, again)
	}
}

func TestValidateSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		settings map[string]string
		ok       bool
	}{
		{map[string]string{"shared_buffers": "256MB", "auto_explain.log_min_duration": "1s"}, true},
		{map[string]string{"listen_addresses": "*"}, false},
		{map[string]string{"unix_socket_permissions": "0777"}, false},
		{map[string]string{"Bad Name": "x"}, false},
		{map[string]string{"work_mem": "4MB\nlisten_addresses = '*'"}, false},
	}
	for _, tt := range tests {
		if err := validateSettings(tt.settings); (err == nil) != tt.ok {
			t.Errorf("validateSettings(%v) = %v, want ok %v", tt.settings, err, tt.ok)
		}
	}
}

func TestRenderConf(t *testing.T) {
	t.Parallel()
	conf := string(renderConf("/tmp/a'b", map[string]string{"shared_buffers": "1GB", "fsync": "off"}))
	for _, want := range []string{
		"shared_buffers = '1GB'\n", "fsync = 'off'\n", "listen_addresses = ''\n",
		`unix_socket_directories = '"/tmp/a''b"'` + "\n", "unix_socket_permissions = 0700\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("bap.conf lacks %q:\n%s", want, conf)
		}
	}
}

func TestDSNQuote(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"/var/lib/bap/pgsock", "/var/lib/bap/pgsock"},
		{"", "''"},
		{"/a b", "'/a b'"},
		{`/it's\x`, `'/it\'s\\x'`},
	}
	for _, tt := range tests {
		if got := dsnQuote(tt.in); got != tt.want {
			t.Errorf("dsnQuote(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParsePidFile(t *testing.T) {
	t.Parallel()
	full := "5777\n/tmp/x/pgdata\n1795984925\n5432\n/tmp/x/sock\n\n  9978052         4\nready   \n"
	pf, err := parsePidFile([]byte(full))
	if err != nil || pf != (pidFile{pid: 5777, dataDir: "/tmp/x/pgdata", port: 5432, socketDir: "/tmp/x/sock", status: "ready"}) {
		t.Errorf("parsePidFile(full) = %+v, %v", pf, err)
	}
	pf, err = parsePidFile([]byte("5777\n/tmp/x/pgdata\n"))
	if err != nil || pf.pid != 5777 || pf.port != 0 || pf.socketDir != "" {
		t.Errorf("parsePidFile(partial) = %+v, %v", pf, err)
	}
	if _, err := parsePidFile(nil); err == nil {
		t.Error("parsePidFile(empty) succeeded")
	}
}
