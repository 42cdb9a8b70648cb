package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/waitfor"
)

// cancel_task against browser work in flight (CONTRACT "Task lifecycle"): it stops the browser
// I/O, each interrupted command records its outcome class, and it answers within the cancel
// deadline (3 s by default; the tests allow 2 s more for a loaded machine).

const cancelBound = 3*time.Second + 2*time.Second

// hangSite is a site whose slow pages never answer: a handler returns only when the browser
// drops its request (reported on dropped) or the test ends (release, closed before the server,
// so that httptest.Server.Close never waits on a hanging request).
type hangSite struct {
	srv     *httptest.Server
	hits    atomic.Int64 // requests to the hanging paths
	orders  atomic.Int64 // POST /order-slow
	arrived chan string  // path of each hanging request, as it arrives
	dropped chan string  // path of each hanging request whose connection the browser closed
	release chan struct{}
}

func newHangSite(t *testing.T) *hangSite {
	t.Helper()
	h := &hangSite{arrived: make(chan string, 16), dropped: make(chan string, 16), release: make(chan struct{})}
	hang := func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		h.arrived <- r.URL.Path
		select {
		case <-r.Context().Done():
			h.dropped <- r.URL.Path
		case <-h.release:
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /start", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Start</title><h1>Start</h1>`+
			`<form method="post" action="/order-slow"><button type="submit">Pay</button></form>`)
	})
	mux.HandleFunc("GET /slow", hang)
	mux.HandleFunc("GET /slow-img", hang)
	mux.HandleFunc("POST /order-slow", func(w http.ResponseWriter, r *http.Request) {
		h.orders.Add(1)
		hang(w, r)
	})
	// A document that commits at once but never reaches load: its image never comes.
	mux.HandleFunc("GET /committed", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Committed</title><h1>Committed</h1><img src="/slow-img" alt="">`)
	})
	h.srv = httptest.NewServer(mux)
	t.Cleanup(h.srv.Close)
	t.Cleanup(func() { close(h.release) }) // runs first
	return h
}

// openHang creates a task allowed on the site and a session on its start page.
func openHang(t *testing.T, s *stack, h *hangSite, name string) (taskID, sessionID string) {
	t.Helper()
	r := s.must(t, 201, "POST", "/bap/v1/tasks", name+"-task", map[string]any{
		"goal": "be cancelled", "policy": map[string]any{"allowed_origins": []string{h.srv.URL}},
	})
	taskID = r.str("task", "task_id")
	sessionID = s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", name+"-session", map[string]any{}).str("session", "session_id")
	s.closeAtEnd(t, sessionID)
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", name+"-start", map[string]any{"url": h.srv.URL + "/start"})
	return taskID, sessionID
}

// closeAtEnd closes the session when the test ends, so that the shared browser's session cap is
// not used up by repeated runs.
func (s *stack) closeAtEnd(t *testing.T, sessionID string) {
	t.Cleanup(func() {
		s.call(t, "POST", "/bap/v1/browser-sessions/"+sessionID+"/close", "close-"+sessionID, map[string]any{})
	})
}

// async sends a request from another goroutine; a transport error comes back as status 0.
func (s *stack) async(method, path, key string, body any) <-chan reply {
	out := make(chan reply, 1)
	go func() {
		b, _ := json.Marshal(body)
		client, base := s.endpoint()
		req, err := http.NewRequestWithContext(context.Background(), method, base+path, bytes.NewReader(b))
		if err != nil {
			out <- reply{raw: []byte(err.Error())}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			out <- reply{raw: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		r := reply{status: resp.StatusCode, raw: raw}
		_ = json.Unmarshal(raw, &r.body)
		out <- r
	}()
	return out
}

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30 s", what)
		panic("unreachable")
	}
}

// cancel cancels the task and checks that it answered within the bound.
func (s *stack) cancel(t *testing.T, taskID string) reply {
	t.Helper()
	begin := time.Now()
	r := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/cancel", "cancel-"+taskID, map[string]any{"reason": "the user changed their mind"})
	if took := time.Since(begin); took > cancelBound {
		t.Fatalf("cancel_task took %s, want at most %s", took, cancelBound)
	}
	if r.str("task", "state") != "cancelled" || r.str("receipt", "outcome") != "applied" {
		t.Fatalf("cancel_task: %s", r.raw)
	}
	return r
}

// events returns the task's history.
func (s *stack) events(t *testing.T, taskID string) []map[string]any {
	t.Helper()
	r := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	evs, _ := r.body["events"].([]any)
	out := make([]map[string]any, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.(map[string]any))
	}
	return out
}

// waitRecorded waits until the task's history holds n commands of the operation.
func (s *stack) waitRecorded(t *testing.T, taskID, op string, n int) {
	t.Helper()
	waitfor.Until(t, 30*time.Second, fmt.Sprintf("%d %s commands recorded", n, op), func() (bool, string) {
		got := 0
		for _, e := range s.events(t, taskID) {
			if d, _ := e["data"].(map[string]any); e["type"] == "command.recorded" && d["operation"] == op {
				got++
			}
		}
		return got >= n, fmt.Sprintf("%d recorded", got)
	})
}

// receiptsBeforeCancel checks that every receipt of the commands was issued before the task was
// cancelled: cancel_task classified them first.
func (s *stack) receiptsBeforeCancel(t *testing.T, taskID string, receipts ...string) {
	t.Helper()
	seq := map[string]float64{}
	cancelledAt := 0.0
	for _, e := range s.events(t, taskID) {
		d, _ := e["data"].(map[string]any)
		switch e["type"] {
		case "receipt.issued":
			seq[d["receipt_id"].(string)] = e["seq"].(float64)
		case "task.state_changed":
			if d["to"] == "cancelled" {
				cancelledAt = e["seq"].(float64)
			}
		}
	}
	for _, rc := range receipts {
		if at, ok := seq[rc]; !ok || cancelledAt == 0 || at > cancelledAt {
			t.Fatalf("receipt %s at seq %v, task cancelled at seq %v", rc, at, cancelledAt)
		}
	}
}

// A navigation to a page that never answers is stopped: the browser drops the request, the
// command's receipt is no_side_effect (the browser reported it aborted before commit, so the
// page is unchanged), and a navigation queued behind it never reaches the page at all.
func TestCancelStopsAHangingNavigation(t *testing.T) {
	t.Parallel()
	h := newHangSite(t)
	s := newStack(t)
	taskID, sess := openHang(t, s, h, "cancel-nav")
	base := "/bap/v1/browser-sessions/" + sess

	slow := s.async("POST", base+"/navigate", "nav-slow", map[string]any{"url": h.srv.URL + "/slow"})
	if p := await(t, h.arrived, "request for /slow"); p != "/slow" {
		t.Fatalf("first hanging request: %s", p)
	}
	queued := s.async("POST", base+"/navigate", "nav-queued", map[string]any{"url": h.srv.URL + "/slow?queued=1"})
	s.waitRecorded(t, taskID, "navigate", 3) // start, slow, queued

	s.cancel(t, taskID)
	nav := await(t, slow, "navigate response")
	if nav.status != 409 || nav.body["code"] != "invalid_transition" || nav.str("receipt", "outcome") != "no_side_effect" {
		t.Fatalf("stopped navigation: %d %s", nav.status, nav.raw)
	}
	q := await(t, queued, "queued navigate response")
	if q.status != 409 || q.str("receipt", "outcome") != "no_side_effect" {
		t.Fatalf("queued navigation: %d %s", q.status, q.raw)
	}
	// Stopped in the browser: the hanging request's connection is closed.
	if p := await(t, h.dropped, "dropped /slow request"); p != "/slow" {
		t.Fatalf("dropped: %s", p)
	}
	if n := h.hits.Load(); n != 1 {
		t.Fatalf("the hanging page was requested %d times, want 1", n)
	}
	s.receiptsBeforeCancel(t, taskID, nav.str("receipt", "receipt_id"), q.str("receipt", "receipt_id"))

	// The key replays the recorded answer; a new navigation finds the task cancelled.
	again := s.call(t, "POST", base+"/navigate", "nav-slow", map[string]any{"url": h.srv.URL + "/slow"})
	if again.status != 409 || !bytes.Equal(again.raw, nav.raw) {
		t.Fatalf("replay: %d %s", again.status, again.raw)
	}
	after := s.call(t, "POST", base+"/navigate", "nav-after", map[string]any{"url": h.srv.URL + "/start"})
	if after.status != 409 || after.body["code"] != "invalid_transition" || after.str("receipt", "outcome") != "rejected" {
		t.Fatalf("navigate after cancel: %d %s", after.status, after.raw)
	}
}

// A navigation whose document committed but is still loading is stopped too; the page changed,
// so its receipt is unknown_outcome.
func TestCancelAfterCommitIsUnknownOutcome(t *testing.T) {
	t.Parallel()
	h := newHangSite(t)
	s := newStack(t)
	taskID, sess := openHang(t, s, h, "cancel-commit")

	nav := s.async("POST", "/bap/v1/browser-sessions/"+sess+"/navigate", "nav-committed", map[string]any{"url": h.srv.URL + "/committed"})
	if p := await(t, h.arrived, "request for the image"); p != "/slow-img" {
		t.Fatalf("hanging request: %s", p)
	}
	s.cancel(t, taskID)
	r := await(t, nav, "navigate response")
	if r.status != 409 || r.str("receipt", "outcome") != "unknown_outcome" || !strings.Contains(r.str("detail"), "may have committed") {
		t.Fatalf("navigation stopped after commit: %d %s", r.status, r.raw)
	}
	if p := await(t, h.dropped, "dropped image request"); p != "/slow-img" {
		t.Fatalf("dropped: %s", p)
	}
	s.receiptsBeforeCancel(t, taskID, r.str("receipt", "receipt_id"))
}

// An action held for approval never runs once its task is cancelled: the approval is closed as
// cancelled and resolving it later answers approval_not_pending.
func TestCancelClosesAPendingApproval(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "cancel-held-task", map[string]any{
		"goal":   "order, but ask first",
		"policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "approval_rules": []any{map[string]any{"effect": "form_submission"}}},
	})
	taskID := r.str("task", "task_id")
	sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "cancel-held-session", map[string]any{}).str("session", "session_id")
	s.closeAtEnd(t, sess)
	base := "/bap/v1/browser-sessions/" + sess
	s.must(t, 200, "POST", base+"/navigate", "cancel-held-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	for _, step := range []map[string]any{
		{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Barbara"},
		{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "bl@example.com"},
		{"action": "check", "query": map[string]any{"role": "checkbox"}},
	} {
		s.must(t, 200, "POST", base+"/act", fmt.Sprint("cancel-held-", step["action"], step["value"]), step)
	}
	held := s.must(t, 202, "POST", base+"/act", "cancel-held-click", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}})
	apr := held.str("approval", "approval_id")

	s.cancel(t, taskID)
	late := s.operator().call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "cancel-held-approve", map[string]any{"decision": "approve"})
	if late.status != 409 || late.body["code"] != "approval_not_pending" {
		t.Fatalf("approve after cancel: %d %s", late.status, late.raw)
	}
	if n := sh.orders.Load(); n != 0 {
		t.Fatalf("%d orders placed by a held action of a cancelled task", n)
	}
	closed := false
	for _, e := range s.events(t, taskID) {
		if d, _ := e["data"].(map[string]any); e["type"] == "approval.resolved" && d["approval_id"] == apr && d["state"] == "cancelled" {
			closed = true
		}
	}
	if !closed {
		t.Fatal("history lacks approval.resolved with state cancelled")
	}
}

// An action whose effect already left the browser (the form was posted; the response never
// comes) keeps its applied receipt: cancel_task stops the loading, never the record of what ran.
func TestCancelKeepsAnActionThatRan(t *testing.T) {
	t.Parallel()
	h := newHangSite(t)
	s := newStack(t)
	taskID, sess := openHang(t, s, h, "cancel-act")
	base := "/bap/v1/browser-sessions/" + sess
	pay := map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Pay"}}

	act := s.async("POST", base+"/act", "pay", pay)
	if p := await(t, h.arrived, "the posted order"); p != "/order-slow" {
		t.Fatalf("hanging request: %s", p)
	}
	s.cancel(t, taskID)
	r := await(t, act, "act response")
	if r.status != 200 || r.str("receipt", "outcome") != "applied" {
		t.Fatalf("act interrupted after its effect: %d %s", r.status, r.raw)
	}
	if p := await(t, h.dropped, "dropped order response"); p != "/order-slow" {
		t.Fatalf("dropped: %s", p)
	}
	s.receiptsBeforeCancel(t, taskID, r.str("receipt", "receipt_id"))
	again := s.call(t, "POST", base+"/act", "pay", pay)
	if again.status != 200 || !bytes.Equal(again.raw, r.raw) || h.orders.Load() != 1 {
		t.Fatalf("replay: orders %d, %d %s", h.orders.Load(), again.status, again.raw)
	}
	performed := false
	for _, e := range s.events(t, taskID) {
		if e["type"] == "action.performed" {
			performed = true
		}
	}
	if !performed {
		t.Fatal("history lacks the action that ran")
	}
}

// A command never outlives its task: the task's deadline bounds a navigation that asked for a
// longer timeout, which then reports action_timeout, and the task expires.
func TestTaskDeadlineBoundsACommand(t *testing.T) {
	h := newHangSite(t)
	s := newStack(t)
	deadline := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339Nano)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "dl-task", map[string]any{
		"goal": "finish in time", "deadline": deadline, "policy": map[string]any{"allowed_origins": []string{h.srv.URL}},
	})
	taskID := r.str("task", "task_id")
	sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "dl-session", map[string]any{}).str("session", "session_id")
	s.closeAtEnd(t, sess)
	begin := time.Now()
	nav := s.call(t, "POST", "/bap/v1/browser-sessions/"+sess+"/navigate", "dl-nav", map[string]any{"url": h.srv.URL + "/slow", "timeout_ms": 60000})
	if took := time.Since(begin); took > 10*time.Second {
		t.Fatalf("the navigation ran %s past a 3 s task deadline", took)
	}
	if nav.status != 408 || nav.str("code") != "action_timeout" {
		t.Fatalf("navigation past the task deadline: %d %s", nav.status, nav.raw)
	}
	waitfor.Until(t, 10*time.Second, "the task expires", func() (bool, string) {
		st := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state")
		return st == "expired", st
	})
}
