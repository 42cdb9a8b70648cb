package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/waitfor"
)

// Crash recovery with real process kills (CONTRACT "Mutating requests"): `bap serve` is killed
// with SIGKILL while a navigation and a form submission are in flight in its browser, then started
// again on the same data dir. The interrupted commands are classified — the navigation
// unknown_outcome, the submission reconciliation_required with its task waiting for an operator —
// their keys replay 200 with those receipts, nothing is run again, and the browser sessions are
// reported lost. A task's deadline expires through the server's own upkeep.

// hangFixture is a site whose slow pages never answer; it counts what reaches it. Its handlers
// return when the browser drops the connection (it dies with the killed server) or the test ends.
type hangFixture struct {
	srv     *httptest.Server
	slow    atomic.Int64 // GET /slow
	orders  atomic.Int64 // POST /order-slow
	arrived chan string
	release chan struct{}
}

func newHangFixture(t *testing.T) *hangFixture {
	t.Helper()
	h := &hangFixture{arrived: make(chan string, 16), release: make(chan struct{})}
	hang := func(w http.ResponseWriter, r *http.Request) {
		h.arrived <- r.URL.Path
		select {
		case <-r.Context().Done():
		case <-h.release:
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /start", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Start</title><h1>Start</h1>`+
			`<form method="post" action="/order-slow"><button type="submit">Pay</button></form>`)
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		h.slow.Add(1)
		hang(w, r)
	})
	mux.HandleFunc("POST /order-slow", func(w http.ResponseWriter, r *http.Request) {
		h.orders.Add(1)
		hang(w, r)
	})
	h.srv = httptest.NewServer(mux)
	t.Cleanup(h.srv.Close)
	t.Cleanup(func() { close(h.release) }) // before Close, which waits for hanging handlers
	return h
}

func (h *hangFixture) await(t *testing.T, path string) {
	t.Helper()
	select {
	case p := <-h.arrived:
		if p != path {
			t.Fatalf("request for %s, want %s", p, path)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no request for %s within 60 s", path)
	}
}

// api sends one request to the server at listen; a transport error is status 0.
func api(listen, method, path, key, body string) (int, map[string]any, string) {
	return send(method, "http://"+listen+path, key, body)
}

// send sends one request with an optional JSON body, Idempotency-Key and extra header pairs; a
// transport error is status 0 with the error as the raw answer.
func send(method, urlStr, key, body string, hdr ...string) (int, map[string]any, string) {
	return sendWith(http.DefaultClient, method, urlStr, key, body, hdr...)
}

// operatorAPI is api as the operator: over the node's Unix socket.
func operatorAPI(socket string) func(method, path, key, body string) (int, map[string]any, string) {
	return func(method, path, key, body string) (int, map[string]any, string) {
		return sendWith(unixClient(socket), method, "http://localhost"+path, key, body)
	}
}

// sendWith is send through the client c.
func sendWith(c *http.Client, method, urlStr, key, body string, hdr ...string) (int, map[string]any, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, urlStr, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m, string(raw)
}

func mustAPI(t *testing.T, want int, listen, method, path, key, body string) map[string]any {
	t.Helper()
	status, m, raw := api(listen, method, path, key, body)
	if status != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, status, raw, want)
	}
	return m
}

func field(m map[string]any, path ...string) string {
	var v any = m
	for _, p := range path {
		mm, _ := v.(map[string]any)
		v = mm[p]
	}
	s, _ := v.(string)
	return s
}

// taskEnd waits up to within for the task to end (succeeded or failed) and returns its last
// get_task answer either way: the caller fails with the history and the node's logs.
func taskEnd(t *testing.T, listen, taskID string, within time.Duration) map[string]any {
	t.Helper()
	var final map[string]any
	waitfor.Holds(t, within, func() bool {
		final = mustAPI(t, 200, listen, "GET", "/bap/v1/tasks/"+taskID, "", "")
		st := field(final, "task", "state")
		return st == "succeeded" || st == "failed"
	})
	return final
}

// replayUntilClassified sends the key of an interrupted command again until recovery classified
// it: 409 idempotency_in_flight until the dead node is stale (10 s without heartbeat), then 200
// with the receipt.
func replayUntilClassified(t *testing.T, listen, path, key, body string) map[string]any {
	t.Helper()
	return replayUntilClassifiedVia(t, func(method, path, key, body string) (int, map[string]any, string) {
		return api(listen, method, path, key, body)
	}, path, key, body)
}

// replayUntilClassifiedVia is replayUntilClassified sending through call (operatorAPI: the
// operator's replay over the socket).
func replayUntilClassifiedVia(t *testing.T, call func(method, path, key, body string) (int, map[string]any, string), path, key, body string) map[string]any {
	t.Helper()
	var answer map[string]any
	waitfor.Until(t, 90*time.Second, "recovery classifies "+key, func() (bool, string) {
		status, m, raw := call("POST", path, key, body)
		switch {
		case status == 200:
			answer = m
			return true, ""
		case status == 409 && m["code"] == "idempotency_in_flight":
			return false, raw // the server's upkeep classifies it; its Retry-After is 1 s
		default:
			t.Fatalf("replay of %s: %d %s", key, status, raw)
			return false, ""
		}
	})
	return answer
}

func TestKilledServerClassifiesInterruptedBrowserCommands(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	site := newHangFixture(t)
	// A temporary directory of this test's own, to find the browser's tree in (tmptree).
	tmp := dataDir(t)
	r := start(t, bin, dir, "TMPDIR="+tmp)

	task := mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "crash-task",
		`{"goal":"survive a crash","policy":{"allowed_origins":["`+site.srv.URL+`"]}}`)
	taskID := field(task, "task", "task_id")
	open := func(name string) string {
		s := mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", name, `{}`)
		id := field(s, "session", "session_id")
		mustAPI(t, 200, r.listen, "POST", "/bap/v1/browser-sessions/"+id+"/navigate", name+"-start", `{"url":"`+site.srv.URL+`/start"}`)
		return id
	}
	if status, m, _ := api(r.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "probe", `{}`); status == 503 {
		t.Fatalf("bap serve has no browser (install chromium (scripts/install-deps.sh): a required test never skips): %v", m)
	}
	navSession, actSession := open("nav-session"), open("act-session")

	// In flight when the server dies: a navigation to a page that never answers, and a form
	// submission whose response never comes (the order reached the site).
	navPath, navBody := "/bap/v1/browser-sessions/"+navSession+"/navigate", `{"url":"`+site.srv.URL+`/slow"}`
	actPath, actBody := "/bap/v1/browser-sessions/"+actSession+"/act", `{"action":"click","query":{"role":"button","name":"Pay"}}`
	go api(r.listen, "POST", navPath, "crash-nav", navBody)
	site.await(t, "/slow")
	go api(r.listen, "POST", actPath, "crash-act", actBody)
	site.await(t, "/order-slow")
	_ = r.stop(t, syscall.SIGKILL)

	// The killed server could not remove its browser's tree, with the sessions' profile (cookies,
	// storage) in it; the next server removes it as its browser starts.
	left, err := filepath.Glob(filepath.Join(tmp, "bap-chromium-*"))
	if err != nil || len(left) != 1 {
		t.Fatalf("the killed server's browser trees: %v (%v), want one", left, err)
	}
	r = start(t, bin, dir, "TMPDIR="+tmp)
	waitfor.Until(t, 30*time.Second, "the restarted server removes the killed server's browser tree", func() (bool, string) {
		_, err := os.Lstat(left[0])
		return errors.Is(err, fs.ErrNotExist), fmt.Sprint(err)
	})
	nav := replayUntilClassified(t, r.listen, navPath, "crash-nav", navBody)
	if field(nav, "receipt", "outcome") != "unknown_outcome" {
		t.Fatalf("interrupted navigation: %v", nav)
	}
	act := replayUntilClassified(t, r.listen, actPath, "crash-act", actBody)
	if field(act, "receipt", "outcome") != "reconciliation_required" {
		t.Fatalf("interrupted submission: %v", act)
	}
	// Replayed again: the same answer, and nothing ran twice.
	if again := replayUntilClassified(t, r.listen, navPath, "crash-nav", navBody); field(again, "receipt", "receipt_id") != field(nav, "receipt", "receipt_id") {
		t.Fatalf("second replay: %v, first %v", again, nav)
	}
	if n, o := site.slow.Load(), site.orders.Load(); n != 1 || o != 1 {
		t.Fatalf("the hanging page was requested %d times and the order posted %d times; want 1 and 1", n, o)
	}
	got := mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+taskID, "", "")
	if field(got, "task", "state") != "waiting_for_external_input" {
		t.Fatalf("task after the interrupted submission: %v", got)
	}
	// The sessions died with the server: reported lost, never silently reopened.
	for _, id := range []string{navSession, actSession} {
		status, m, raw := api(r.listen, "POST", "/bap/v1/browser-sessions/"+id+"/observe", "", `{}`)
		if status != 409 || m["code"] != "browser_session_lost" {
			t.Fatalf("observe on a session of the killed server: %d %s", status, raw)
		}
	}
	status, m, raw := api(r.listen, "POST", navPath, "crash-nav-again", navBody)
	if status != 409 || m["code"] != "browser_session_lost" {
		t.Fatalf("navigate on a lost session: %d %s", status, raw)
	}
	evs := mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
	types := map[string]int{}
	for _, e := range evs["events"].([]any) {
		types[e.(map[string]any)["type"].(string)]++
	}
	if types["reconciliation.opened"] != 1 || types["browser_session.lost"] < 2 {
		t.Fatalf("history after recovery: %v", types)
	}

	// A deadline passes with nobody reading the task: the upkeep expires it.
	deadline := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
	short := mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "crash-deadline",
		`{"goal":"run out of time","policy":{"allowed_origins":["`+site.srv.URL+`"]},"deadline":"`+deadline+`"}`)
	shortID := field(short, "task", "task_id")
	waitfor.Until(t, 30*time.Second, "the upkeep expires the task after its deadline", func() (bool, string) {
		evs := mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+shortID+"/events", "", "")
		for _, e := range evs["events"].([]any) {
			d, _ := e.(map[string]any)["data"].(map[string]any)
			if e.(map[string]any)["type"] == "task.state_changed" && d["to"] == "expired" {
				return true, ""
			}
		}
		return false, fmt.Sprint(evs)
	})
	if st := field(mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+shortID, "", ""), "task", "state"); st != "expired" {
		t.Fatalf("get_task after the deadline: %s", st)
	}
	status, m, raw = api(r.listen, "POST", "/bap/v1/tasks/"+shortID+"/cancel", "cancel-expired", `{}`)
	if status != 409 || m["code"] != "invalid_transition" {
		t.Fatalf("cancel_task of an expired task: %d %s", status, raw)
	}
}
