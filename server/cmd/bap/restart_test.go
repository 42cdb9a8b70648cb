package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The restart window (issue #23 item 7): node A shares node B's database (BAP_DATABASE_URL) and
// holds a browser session; A is killed with SIGKILL and started again on the same address. The
// new process marks the old node stopped as it starts, so a client's retry through B of a command
// on the dead node's session is handled on B (409 browser_session_lost) at once — not forwarded
// to the new process, which refuses a credential meant for the old node (that answered 500
// internal_error until the old heartbeat aged, about 10 s).
func TestRestartOnTheSameAddressTakesOverAtOnce(t *testing.T) {
	t.Parallel()
	addr := portOutsideEphemeralRange(t)
	restartTakesOverAtOnce(t, []string{"--listen", addr}, []string{"--listen", addr})
}

// The restart window on the same data dir at a new address (issue #23 item 7): A is killed and
// started again on its data dir but another port, so no node is at the old address any more. The
// new process takes A's data-dir lock — which the kernel released when A died — and marks the
// node named in the data dir stopped as it starts: B's retry is answered at once (409
// browser_session_lost), not forwarded to the dead address (503 until the old heartbeat aged).
// While A lives, a second node on its data dir is refused, naming it.
func TestRestartOnTheSameDataDirTakesOverAtOnce(t *testing.T) {
	t.Parallel()
	restartTakesOverAtOnce(t, nil, nil) // serveProcess listens on 127.0.0.1:0: a new port each time
}

// restartTakesOverAtOnce runs the restart window: A (flags first) is killed with SIGKILL and
// started again on its data dir (flags again); the old node must be stopped in the database as
// soon as the new process is ready, and B's retries of commands on A's session answered 409
// browser_session_lost.
func restartTakesOverAtOnce(t *testing.T, first, again []string) {
	t.Helper()
	bin := buildBinary(t)
	dirB := dataDir(t)
	b := start(t, bin, dirB)
	dbURL := databaseURLOf(t, dirB)
	env := []string{"BAP_DATABASE_URL=" + dbURL, "BAP_MASTER_KEY_FILE=" + filepath.Join(dirB, "master.key")}
	dirA := dataDir(t)
	a, ready := serveProcess(t, bin, dirA, env, first...)
	oldID, _ := ready["node_id"].(string)

	// Two live nodes never share a data dir, whatever their database.
	second := exec.Command(bin, "serve", "--data-dir", dirA, "--listen", "127.0.0.1:0")
	second.Env = append(os.Environ(), env...)
	if out, err := second.CombinedOutput(); err == nil || !strings.Contains(string(out), "data dir "+dirA+" is in use by another bap process") {
		t.Fatalf("a second node on a live node's data dir: %v\n%s", err, out)
	}

	task := mustAPI(t, 201, b.listen, "POST", "/bap/v1/tasks", "restart-task", `{"goal":"restart window","policy":{"allowed_origins":["https://shop.example.com"]}}`)
	sess := mustAPI(t, 201, a.listen, "POST", "/bap/v1/tasks/"+field(task, "task", "task_id")+"/browser-sessions", "restart-session", `{}`)
	sp := "/bap/v1/browser-sessions/" + field(sess, "session", "session_id")
	mustAPI(t, 200, b.listen, "POST", sp+"/observe", "", `{}`) // forwarded to A

	if err := a.stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("bap exited cleanly after SIGKILL")
	}
	a2, restarted := serveProcess(t, bin, dirA, env, again...)
	if newID, _ := restarted["node_id"].(string); newID == "" || newID == oldID {
		t.Fatalf("restarted node id %q (old %q)", newID, oldID)
	}
	if (len(again) == 0) != (a2.listen != a.listen) {
		t.Fatalf("restarted on %s, first on %s: not the address the test meant", a2.listen, a.listen)
	}
	// As soon as the new process is ready, the old node is stopped: no heartbeat has to age.
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var stopped bool
	if err := pool.QueryRow(context.Background(), `SELECT stopped_at IS NOT NULL FROM runtime_node WHERE node_id = $1`, oldID).Scan(&stopped); err != nil || !stopped {
		t.Fatalf("the killed node %s is not marked stopped once a node started on its address or data dir (%v)", oldID, err)
	}
	// The client's retries through B, at once: the dead node's session is lost, never a 500.
	for _, c := range []struct{ op, key string }{{"observe", ""}, {"navigate", "restart-nav"}} {
		body := `{}`
		if c.op == "navigate" {
			body = `{"url":"https://shop.example.com/"}`
		}
		status, m, raw := api(b.listen, "POST", sp+"/"+c.op, c.key, body)
		if status != 409 || m["code"] != "browser_session_lost" {
			t.Fatalf("%s through B after the restart: %d %s, want 409 browser_session_lost", c.op, status, raw)
		}
	}
}

// fixedPorts are the ports portOutsideEphemeralRange has handed out in this test binary. Every
// test starts its search at the same port (the process id decides it), so without it two
// parallel tests got the same one: the remote profile's callback listener bound it between the
// restart test's kill and its restart ("address already in use").
var fixedPorts sync.Map

// portOutsideEphemeralRange returns a loopback address whose port is free now and below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768–60999 by default). A test that
// must bind the same port twice (a restart on the same address) cannot take one from :0: between
// the kill and the restart the kernel may hand the freed port to any of the suite's outgoing
// connections as its source port, and the restart then fails with "address already in use".
func portOutsideEphemeralRange(t *testing.T) string {
	t.Helper()
	low := 32768
	if raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(raw)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	start := 20000
	if low <= start+1000 {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for a fixed test port", low)
	}
	for i := range 500 {
		port := start + (i*7919+os.Getpid())%(low-start) // spread parallel suites apart
		if _, taken := fixedPorts.LoadOrStore(port, t.Name()); taken {
			continue // handed to another test of this binary, which may bind it later
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		_ = l.Close()
		return addr
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return ""
}
