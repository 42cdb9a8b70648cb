package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Release and rollback (issue #23 item 9, docs/release-and-rollback.md), with the real binary:
// `bap migrate --check` reports pending migrations and applies nothing, and a binary given a
// database that a newer release migrated (the N−1 binary against the N schema, made here by
// recording a migration this build does not know) refuses to start, naming both versions.
func TestBinaryRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	r := start(t, bin, dir)
	dbURL := databaseURLOf(t, dir)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	var ver struct{ Schema int }
	out, err := exec.Command(bin, "version").Output()
	if err != nil || json.Unmarshal(out, &ver) != nil || ver.Schema < 2 {
		t.Fatalf("bap version: %s %v", out, err)
	}
	known := ver.Schema
	check := func() (report map[string]any, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, "migrate", "--check")
		cmd.Env = append(os.Environ(), "BAP_DATABASE_URL="+dbURL)
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		_ = cmd.Run() // the exit code is the answer
		_ = json.Unmarshal(so.Bytes(), &report)
		return report, se.String(), cmd.ProcessState.ExitCode()
	}
	if rep, se, code := check(); code != 0 || rep["schema_applied"] != float64(known) || rep["schema_known"] != float64(known) || len(rep["pending"].([]any)) != 0 {
		t.Fatalf("migrate --check on a migrated database: exit %d, %v %s", code, rep, se)
	}

	// The last migration unrecorded: --check names it and fails, and applies nothing.
	var last string
	if err := pool.QueryRow(ctx, `DELETE FROM schema_migration WHERE version = $1 RETURNING name`, known).Scan(&last); err != nil {
		t.Fatal(err)
	}
	rep, se, code := check()
	if p, _ := rep["pending"].([]any); code != 1 || len(p) != 1 || p[0] != last || rep["schema_applied"] != float64(known-1) || !strings.Contains(se, "migrations pending") {
		t.Fatalf("migrate --check with %s pending: exit %d, %v %s", last, code, rep, se)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM schema_migration WHERE version = $1`, known).Scan(&n); err != nil || n != 0 {
		t.Fatalf("migrate --check applied %s: %d rows (%v)", last, n, err)
	}

	// A newer release migrated the database.
	newer := fmt.Sprintf("%04d_from_a_newer_release", known+1)
	if _, err := pool.Exec(ctx, `INSERT INTO schema_migration (version, name) VALUES ($1, $2), ($3, $4)`, known, last, known+1, newer); err != nil {
		t.Fatal(err)
	}
	names := []string{fmt.Sprintf("schema is at version %d (%s)", known+1, newer), fmt.Sprintf("newer than version %d, the newest this build", known)}
	if _, se, code := check(); code != 1 || !strings.Contains(se, names[0]) || !strings.Contains(se, names[1]) {
		t.Fatalf("migrate --check on a newer schema: exit %d %s", code, se)
	}
	pool.Close()
	if err := r.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("bap serve did not stop cleanly: %v", err)
	}

	// bap serve refuses to start on it, before it serves anything.
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(sctx, bin, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "BAP_DATABASE_URL=")
	logs, err := cmd.CombinedOutput()
	if err == nil || cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(logs), names[0]) || !strings.Contains(string(logs), names[1]) ||
		strings.Contains(string(logs), `"msg":"ready"`) {
		t.Fatalf("bap serve on a newer schema: %v\n%s", err, logs)
	}
}
