package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/daemon"
)

// These tests run the real binary the way `make run` does: embedded PostgreSQL under a fresh
// data dir, the local profile on a Unix socket and loopback.

func buildBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bap")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("building bap: %v", err)
	}
	return bin
}

// dataDir makes a data dir the cluster's user can reach when the test runs as root.
func dataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bap-serve-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

type running struct {
	cmd    *exec.Cmd
	listen string
	socket string
	done   chan error // the process's exit, after logs holds all its output
	logs   *syncLog
}

// syncLog is a process's stderr as it arrives, safe to read while it grows.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line + "\n")
}

// String returns what was logged so far.
func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serveProcess runs `bap serve` on dir (listening on a free loopback port) with extra environment
// entries and flags, waits for its ready line and returns it; the process gets SIGTERM (then
// SIGKILL after 20 s) when the test ends, and a failed test logs its output.
func serveProcess(t *testing.T, bin, dir string, env []string, args ...string) (*running, map[string]any) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "BAP_DATABASE_URL="), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &running{cmd: cmd, done: make(chan error, 1), logs: &syncLog{}}
	ready := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			r.logs.add(line)
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "ready" {
				ready <- m
			}
		}
		r.done <- cmd.Wait()
	}()
	var m map[string]any
	select {
	case m = <-ready:
		r.listen, _ = m["listen"].(string)
		r.socket, _ = m["socket"].(string)
		if r.listen == "" {
			t.Fatalf("ready line lacks listen: %v", m)
		}
	case err := <-r.done:
		t.Fatalf("bap exited before ready: %v\n%s", err, r.logs)
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("bap not ready in 90 s\n%s", r.logs)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done: //nolint:errcheck // the exit status after SIGTERM is not what these tests check
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("output of bap serve on %s:\n%s", dir, r.logs)
		}
	})
	return r, m
}

// start runs `bap serve` in the local profile. env adds environment entries (e.g. a
// BAP_DATABASE_URL to share another node's database).
func start(t *testing.T, bin, dir string, env ...string) *running {
	t.Helper()
	r, m := serveProcess(t, bin, dir, env)
	if m["profile"] != "local" || r.socket == "" {
		t.Fatalf("ready line lacks fields: %v", m)
	}
	return r
}

func (r *running) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		r.done <- err // let Cleanup see it too
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("bap did not stop within 20 s after %v\n%s", sig, r.logs)
		return nil
	}
}

func unixClient(socket string) *http.Client {
	return &http.Client{Transport: specTransport(&http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}})}
}

func createTask(t *testing.T, c *http.Client, base, key string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "POST", base+"/bap/v1/tasks",
		strings.NewReader(`{"goal":"survive restarts","policy":{"allowed_origins":["https://shop.example.com"]}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, body
}

// TestServeTunesTheCollector: bap serve runs Go's collector at GOGC=200 unless the environment
// sets GOGC, which still decides (the Go collector's own gauge on /metrics says which ran).
func TestServeTunesTheCollector(t *testing.T) {
	bin := buildBinary(t)
	for _, c := range []struct {
		env  string
		want float64
	}{{"GOGC=", 200}, {"GOGC=150", 150}} {
		r, _ := serveProcess(t, bin, dataDir(t), []string{c.env})
		if got := metric(t, r.listen, "go_gc_gogc_percent"); got != c.want {
			t.Errorf("with %s the collector runs at GOGC=%v, want %v", c.env, got, c.want)
		}
	}
}

func TestServeEmbeddedDatabaseSurvivesRestartAndKill(t *testing.T) {
	bin := buildBinary(t)
	dir := dataDir(t)

	r := start(t, bin, dir)
	fi, err := os.Stat(r.socket)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %s: %v, mode %v; want a 0600 socket", r.socket, err, fi.Mode())
	}
	status, body := createTask(t, unixClient(r.socket), "http://bap", "restart-key")
	if status != 201 {
		t.Fatalf("create_task over the socket: %d %v", status, body)
	}
	taskID := body["task"].(map[string]any)["task_id"].(string)
	assertRecordedAdapters(t, r.listen)

	// While it runs, neither `bap migrate` nor a second server may take its database over.
	for _, args := range [][]string{{"migrate", "--data-dir", dir}, {"serve", "--data-dir", dir, "--listen", "127.0.0.1:0"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "in use by another bap process") {
			t.Fatalf("bap %s next to a running server: %v\n%s", args[0], err, out)
		}
	}
	// A page that rebinds its name to 127.0.0.1 carries its own Host: refused.
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://"+r.listen+"/bap/v1/tasks/"+taskID, nil)
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Fatalf("foreign Host header: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if status, _ := createTask(t, unixClient(r.socket), "http://bap", "restart-key"); status != 201 {
		t.Fatalf("server disturbed by the refused commands: %d", status)
	}

	if err := r.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: exit %v\n%s", err, r.logs)
	}
	if !strings.Contains(r.logs.String(), `"msg":"stopped"`) {
		t.Fatalf("no clean stop logged\n%s", r.logs)
	}

	// Restart on the same dir: the task is there and its key still replays.
	r = start(t, bin, dir)
	status, body = createTask(t, http.DefaultClient, "http://"+r.listen, "restart-key")
	if status != 201 || body["task"].(map[string]any)["task_id"] != taskID {
		t.Fatalf("replay after restart: %d %v, want task %s", status, body, taskID)
	}

	// A killed bap leaves its PostgreSQL running; the next start adopts it.
	_ = r.stop(t, syscall.SIGKILL)
	r = start(t, bin, dir)
	resp, err := http.Get("http://" + r.listen + "/bap/v1/tasks/" + taskID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("get_task after kill and restart: %d", resp.StatusCode)
	}
	if err := r.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM after adoption: %v\n%s", err, r.logs)
	}
}

func TestServeRefusesNonLoopbackInLocalProfile(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	code := run([]string{"serve", "--listen", "0.0.0.0:7777", "--data-dir", t.TempDir()}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "loopback") {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
}

// bap serve refuses, before anything starts, an engine list it cannot serve, from the flag or
// from its environment twin (issue #19 item 3): a name that is no engine of BAP, an engine twice.
func TestServeRefusesAnEngineListItCannotServe(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     string
		refusal string
	}{
		{name: "flag", args: []string{"--engines", "chromium,webkit"}, refusal: "webkit\\\" is not a browser engine of BAP"}, // the log line is JSON
		{name: "env", env: "firefox,firefox", refusal: "names firefox twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("BAP_ENGINES", tc.env)
			var stderr strings.Builder
			code := run(append([]string{"serve", "--data-dir", t.TempDir()}, tc.args...), io.Discard, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), tc.refusal) {
				t.Fatalf("exit %d, stderr %s", code, stderr.String())
			}
		})
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if code := run([]string{"version"}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out.String()), &v); err != nil || v["bap"] != "1.0.0" || v["mcp"] != "2026-07-28" || v["schema"] != float64(daemon.SchemaVersion()) {
		t.Fatalf("version output %q (%v)", out.String(), err)
	}
}
