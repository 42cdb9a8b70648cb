package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/waitfor"
)

// Delegated tasks across a node's death (ADR 0011), with real processes on one PostgreSQL: a plan
// submitted to node A runs on A's worker until A is killed (SIGKILL) while a safe step hangs;
// A's lease expires, node B's worker takes the task over, restores the session from the
// checkpoint taken after the plan's side effect, runs the interrupted safe step again, never
// repeats the side effect, and closes the task succeeded. A subscriber on a third node (which
// holds the database and runs no workers) gets every event of the task exactly once.
func TestKilledWorkerNodeIsTakenOverFromItsLastCheckpoint(t *testing.T) {
	t.Parallel()
	const secret = "sess-kill-42"
	var signins, reports atomic.Int64
	firstReport := make(chan struct{})
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /signin-form", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Sign in</title><form method="post" action="/signin"><button type="submit">Sign in</button></form>`)
	})
	mux.HandleFunc("POST /signin", func(w http.ResponseWriter, r *http.Request) {
		signins.Add(1)
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: secret, Path: "/", HttpOnly: true})
		http.Redirect(w, r, "/account", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /account", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Account</title><p>signed in</p>`)
	})
	mux.HandleFunc("GET /report", func(w http.ResponseWriter, r *http.Request) {
		if reports.Add(1) == 1 {
			close(firstReport)
			select { // the first one never answers: its browser dies with node A
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		who := "nobody"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Report</title><p>Report ready for %s</p>`, who)
	})
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)
	t.Cleanup(func() { close(release) })

	bin := buildBinary(t)
	dbDir := dataDir(t)
	holder := serveWith(t, bin, dbDir, nil, "--workers", "0")
	dbEnv := []string{"BAP_DATABASE_URL=" + databaseURLOf(t, dbDir), "BAP_MASTER_KEY_FILE=" + filepath.Join(dbDir, "master.key")} // one key per database (ADR 0015)
	a := serveWith(t, bin, dataDir(t), dbEnv, "--workers", "1")

	plan := `[
		{"op": "navigate", "args": {"url": "` + site.URL + `/signin-form"}},
		{"op": "act", "args": {"action": "click", "query": {"role": "button", "name": "Sign in"}}},
		{"op": "navigate", "args": {"url": "` + site.URL + `/report", "timeout_ms": 120000}},
		{"op": "extract", "args": {"kind": "text"}}
	]`
	created := mustAPI(t, 201, a.listen, "POST", "/bap/v1/tasks", "delegated-kill",
		`{"goal":"fetch my report in the background","policy":{"allowed_origins":["`+site.URL+`"]},
		  "postcondition":{"all":[{"text_present":"Report ready for `+secret+`"}]},"plan":`+plan+`}`)
	taskID := field(created, "task", "task_id")

	// Follow the task's stream on the holder, which lives through the whole story.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := &taskStream{}
	go sub.follow(ctx, holder.listen, taskID)

	select {
	case <-firstReport:
	case <-time.After(90 * time.Second):
		t.Fatalf("node A never reached the report step\n%s", a.logs)
	}
	_ = a.stop(t, syscall.SIGKILL)
	b := serveWith(t, bin, dataDir(t), dbEnv, "--workers", "1")

	final := taskEnd(t, b.listen, taskID, 150*time.Second)
	_, _, hist := api(b.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
	if field(final, "task", "state") != "succeeded" || field(final, "task", "verification") != "verified" {
		t.Fatalf("task after the takeover: %v\nhistory: %s\nnode B:\n%s", final, hist, b.logs)
	}
	if n := signins.Load(); n != 1 {
		t.Fatalf("the sign-in (a side effect) ran %d times", n)
	}
	if n := reports.Load(); n != 2 {
		t.Fatalf("the report page was requested %d times, want 2 (interrupted on A, run again on B)", n)
	}

	var body struct {
		Events []struct {
			ID    string         `json:"event_id"`
			Seq   int            `json:"seq"`
			Type  string         `json:"type"`
			Actor map[string]any `json:"actor"`
			Data  map[string]any `json:"data"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(hist), &body); err != nil {
		t.Fatal(err)
	}
	started := map[float64]int{}
	finished := map[float64]int{}
	workers := map[string]bool{}
	resumed := false
	for i, e := range body.Events {
		if e.Seq != i+1 {
			t.Fatalf("history has seq %d at position %d", e.Seq, i)
		}
		switch e.Type {
		case "plan.step_started":
			started[e.Data["index"].(float64)]++
			workers[fmt.Sprint(e.Actor["id"])] = true
		case "plan.step_finished":
			finished[e.Data["index"].(float64)]++
		case "task.state_changed":
			resumed = resumed || e.Data["trigger"] == "resume"
		case "browser_session.opened":
			resumed = resumed || e.Data["from_checkpoint"] != nil
		}
	}
	// Steps 0 and 1 ran once (on A); the interrupted step 2 started on A and again on B, after B
	// restored the checkpoint taken after step 1; every step finished once.
	if started[0] != 1 || started[1] != 1 || started[2] != 2 || started[3] != 1 {
		t.Fatalf("steps started: %v\nhistory: %s", started, hist)
	}
	if finished[0] != 1 || finished[1] != 1 || finished[2] != 1 || finished[3] != 1 {
		t.Fatalf("steps finished: %v", finished)
	}
	if len(workers) != 2 || !resumed {
		t.Fatalf("workers %v, restored from a checkpoint %v", workers, resumed)
	}

	// The subscriber on the third node got every event of the history exactly once, in order. The
	// history may still grow after the task ended (its session is closed then): compare the stream
	// with the history as it stands once the stream has caught up with it.
	var ids, got []string
	caughtUp := func() bool {
		_, _, raw := api(b.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
		var page struct {
			Events []struct {
				ID string `json:"event_id"`
			} `json:"events"`
		}
		if json.Unmarshal([]byte(raw), &page) != nil {
			return false
		}
		ids = ids[:0]
		for _, e := range page.Events {
			ids = append(ids, e.ID)
		}
		got = sub.snapshot()
		return len(got) == len(ids)
	}
	waitfor.Holds(t, 30*time.Second, caughtUp)
	if len(got) != len(ids) {
		t.Fatalf("the stream delivered %d events, the history holds %d", len(got), len(ids))
	}
	for i := range got {
		if got[i] != ids[i] {
			t.Fatalf("stream event %d is %s, history has %s", i, got[i], ids[i])
		}
	}
	// B took over an expired lease.
	_, _, metrics := api(b.listen, "GET", "/metrics", "", "")
	if !strings.Contains(metrics, "bap_plan_takeovers_total 1") || !strings.Contains(metrics, "bap_plans_closed_total 1") {
		t.Fatalf("node B's metrics: %s", grepLines(metrics, "bap_plan"))
	}
}

// taskStream follows one task's SSE stream, resuming from the last id it saw.
type taskStream struct {
	mu  sync.Mutex
	ids []string
	seq int
}

func (s *taskStream) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

func (s *taskStream) follow(ctx context.Context, listen, taskID string) {
	for ctx.Err() == nil {
		s.mu.Lock()
		after := s.seq
		s.mu.Unlock()
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s/bap/v1/tasks/%s/events/stream?after=%d", listen, taskID, after), nil)
		req.Header.Set("Accept", "text/event-stream")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok {
					continue
				}
				var e struct {
					ID  string `json:"event_id"`
					Seq int    `json:"seq"`
				}
				if json.Unmarshal([]byte(data), &e) == nil && e.ID != "" {
					s.mu.Lock()
					s.ids = append(s.ids, e.ID)
					s.seq = e.Seq
					s.mu.Unlock()
				}
			}
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metric reads one unlabelled counter or gauge from a node's /metrics.
func metric(t *testing.T, listen, name string) float64 {
	t.Helper()
	_, _, text := api(listen, "GET", "/metrics", "", "")
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %q", name, l)
			}
			return f
		}
	}
	t.Fatalf("no metric %s on %s", name, listen)
	return 0
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// serveWith runs `bap serve` with extra flags and environment.
func serveWith(t *testing.T, bin, dir string, env []string, args ...string) *running {
	t.Helper()
	r, _ := serveProcess(t, bin, dir, env, args...)
	return r
}

// An act in flight when its worker's node dies is never run again: recovery classifies it
// reconciliation_required and the task waits in waiting_for_external_input; once an operator
// settles it as applied (`bap reconcile resolve`), another node's worker counts the step done and
// finishes the plan. The payment reached the site once.
func TestKilledWorkerNodeLeavesItsActToReconciliation(t *testing.T) {
	t.Parallel()
	var payments atomic.Int64
	firstPayment := make(chan struct{})
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pay-form", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Pay</title><form method="post" action="/pay"><button type="submit">Pay</button></form>`)
	})
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		if payments.Add(1) == 1 {
			close(firstPayment)
		}
		select { // the payment is taken, but no answer comes before node A dies
		case <-r.Context().Done():
		case <-release:
		}
	})
	mux.HandleFunc("GET /receipt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Receipt</title><p>Payments received: %d</p>`, payments.Load())
	})
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)
	t.Cleanup(func() { close(release) })

	bin := buildBinary(t)
	dbDir := dataDir(t)
	holder := serveWith(t, bin, dbDir, nil, "--workers", "0")
	dbURL := databaseURLOf(t, dbDir)
	dbEnv := []string{"BAP_DATABASE_URL=" + dbURL, "BAP_MASTER_KEY_FILE=" + filepath.Join(dbDir, "master.key")}
	a := serveWith(t, bin, dataDir(t), dbEnv, "--workers", "1")
	plan := `[
		{"op": "navigate", "args": {"url": "` + site.URL + `/pay-form"}},
		{"op": "act", "args": {"action": "click", "query": {"role": "button", "name": "Pay"}, "timeout_ms": 120000}},
		{"op": "navigate", "args": {"url": "` + site.URL + `/receipt"}}
	]`
	taskID := field(mustAPI(t, 201, a.listen, "POST", "/bap/v1/tasks", "delegated-pay",
		`{"goal":"pay once","policy":{"allowed_origins":["`+site.URL+`"]},
		  "postcondition":{"all":[{"text_present":"Payments received: 1"}]},"plan":`+plan+`}`), "task", "task_id")
	select {
	case <-firstPayment:
	case <-time.After(90 * time.Second):
		t.Fatalf("node A never paid\n%s", a.logs)
	}
	_ = a.stop(t, syscall.SIGKILL)
	b := serveWith(t, bin, dataDir(t), dbEnv, "--workers", "1")

	// Recovery (on B or the holder) classifies the click once A is stale; the task waits.
	var recID string
	waitfor.True(t, 90*time.Second, "recovery classifies the click and the task waits", func() bool {
		if field(mustAPI(t, 200, holder.listen, "GET", "/bap/v1/tasks/"+taskID, "", ""), "task", "state") != "waiting_for_external_input" {
			return false
		}
		_, m, _ := api(holder.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
		evs, _ := m["events"].([]any)
		for _, e := range evs {
			if em := e.(map[string]any); em["type"] == "reconciliation.opened" {
				recID, _ = em["data"].(map[string]any)["reconciliation_id"].(string)
			}
		}
		return recID != ""
	})
	// Nothing runs while it waits: B's worker looks for work twice more (its pulse, not a pause)
	// and claims nothing; the payment is not repeated.
	scans, claims := metric(t, b.listen, "bap_plan_claim_scans_total"), metric(t, b.listen, "bap_plan_claims_total")
	waitfor.True(t, 60*time.Second, "node B's worker looks for work twice more", func() bool {
		return metric(t, b.listen, "bap_plan_claim_scans_total") >= scans+2
	})
	if n := metric(t, b.listen, "bap_plan_claims_total"); n != claims || payments.Load() != 1 {
		t.Fatalf("while the task waited for reconciliation node B claimed %v more and the site got %d payments", n-claims, payments.Load())
	}
	resolve := exec.Command(bin, "reconcile", "resolve", "--data-dir", dataDir(t), "--outcome", "applied",
		"--note", "the bank shows one payment", recID)
	resolve.Env = append(os.Environ(), "BAP_DATABASE_URL="+dbURL)
	if out, err := resolve.CombinedOutput(); err != nil {
		t.Fatalf("bap reconcile resolve: %v\n%s", err, out)
	}

	st := field(taskEnd(t, b.listen, taskID, 120*time.Second), "task", "state")
	_, _, hist := api(b.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
	if st != "succeeded" {
		t.Fatalf("task %s 120 s after the reconciliation\nhistory: %s\nnode B:\n%s", st, hist, b.logs)
	}
	// Steps 0, 1, 2 finished once each, and the safe step 0 once more on B's fresh session
	// (no act had completed with a checkpoint); the click is settled, never re-run.
	if strings.Count(hist, `"type":"plan.step_finished"`) != 4 || strings.Count(hist, `"rerun":true`) != 2 ||
		!strings.Contains(hist, `"outcome":"reconciliation_required"`) || !strings.Contains(hist, `"reconciliation.resolved"`) {
		t.Fatalf("history: %s", hist)
	}
	if n := payments.Load(); n != 1 {
		t.Fatalf("%d payments, want 1", n)
	}
}
