package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/mcpserver"
	"github.com/originweave/bap/server/internal/store"

	"github.com/originweave/bap/server/internal/waitfor"
)

type taskState struct {
	ResultType    string                     `json:"resultType"`
	TaskID        string                     `json:"taskId"`
	Status        string                     `json:"status"`
	StatusMessage string                     `json:"statusMessage"`
	TTLMs         *int64                     `json:"ttlMs"`
	InputRequests map[string]json.RawMessage `json:"inputRequests"`
	Result        *toolResult                `json:"result"`
	Error         *struct{ Code int64 }      `json:"error"`
}

func (b *bundle) taskGet(t *testing.T, id string, headers ...string) taskState {
	t.Helper()
	var st taskState
	b.rpc(t, "/mcp", "tasks/get", map[string]any{"taskId": id, "_meta": meta(taskCaps)}, headers...).result(t, &st)
	return st
}

// awaitTask polls tasks/get (as a client does) until the task leaves the statuses in skip.
func (b *bundle) awaitTask(t *testing.T, id string, skip ...string) taskState {
	t.Helper()
	var st taskState
	waitfor.Until(t, 20*time.Second, "task "+id+" leaves "+strings.Join(skip, ", "), func() (bool, string) {
		st = b.taskGet(t, id)
		return !slices.Contains(skip, st.Status), "still " + st.Status
	})
	return st
}

// TestTaskProjectsOneBAPCommand: close_task of a client that declared the Tasks extension becomes an
// MCP task whose result is the command's BAP answer; the command itself is BAP's (its key replays
// it), the MCP task is the caller's only.
func TestTaskProjectsOneBAPCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	taskID := field(t, b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k1")).StructuredContent, "task", "task_id")
	closeArgs := map[string]any{"task_id": taskID, "idempotency_key": "k-close"}
	var created toolResult
	b.rpc(t, "/mcp", "tools/call", map[string]any{"name": "close_task", "arguments": closeArgs, "_meta": meta(taskCaps)}).result(t, &created)
	if created.ResultType != "task" || !strings.HasPrefix(created.TaskID, "mtk_") || created.Status == "" {
		t.Fatalf("CreateTaskResult: %+v", created)
	}
	st := b.awaitTask(t, created.TaskID, "working")
	if st.Status != "completed" || st.Result == nil || st.Result.IsError || st.ResultType != "complete" || st.TTLMs == nil {
		t.Fatalf("task: %+v", st)
	}
	if field(t, st.Result.StructuredContent, "task", "state") != "succeeded" {
		t.Fatalf("close result: %s", st.Result.StructuredContent)
	}
	// The BAP command is durable: the same call without the extension replays its answer.
	replay := b.call(t, "close_task", closeArgs)
	if !jsonEqual(t, replay.StructuredContent, st.Result.StructuredContent) || replay.Meta["io.originweave.bap/replayed"] != true {
		t.Fatalf("replay: %s vs %s", replay.StructuredContent, st.Result.StructuredContent)
	}
	// Another caller cannot see it; a caller that did not declare the extension cannot ask.
	r := b.rpc(t, "/mcp", "tasks/get", map[string]any{"taskId": created.TaskID, "_meta": meta(taskCaps)}, "X-Test-Tenant", "globex")
	if r.code() != -32602 {
		t.Errorf("another tenant's tasks/get: %s", r.raw)
	}
	r = b.rpc(t, "/mcp", "tasks/get", map[string]any{"taskId": created.TaskID})
	if r.status != http.StatusBadRequest || r.code() != -32021 || !strings.Contains(string(r.msg.Error.Data), "io.modelcontextprotocol/tasks") {
		t.Errorf("tasks/get without the extension: %d %s", r.status, r.raw)
	}
	// Cancelling a finished task is acknowledged and changes nothing.
	var ack map[string]any
	b.rpc(t, "/mcp", "tasks/cancel", map[string]any{"taskId": created.TaskID, "_meta": meta(taskCaps)}).result(t, &ack)
	if ack["resultType"] != "complete" || ack["taskId"] != nil || b.taskGet(t, created.TaskID).Status != "completed" {
		t.Errorf("cancel of a completed task: %v", ack)
	}
}

// TestAbandonedTaskFails: a task another node bound and still runs is answered working from the
// database; once that node stopped (or missed its heartbeats), the task it left unended fails on
// any node that is asked, naming where the authority is (the BAP command's classified outcome),
// and that end is recorded, so every node answers alike. Never `working` until it expires.
func TestAbandonedTaskFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	taskID := field(t, b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k-ab")).StructuredContent, "task", "task_id")
	st := store.New(b.db)
	now := time.Now().UTC()
	for _, node := range []string{"node_other", "node_gone"} {
		if err := st.RegisterNode(ctx, app.NodeInfo{ID: node, SoftwareVersion: "test"}); err != nil {
			t.Fatal(err)
		}
		if err := st.BindMCPTask(ctx, app.MCPTaskRecord{Tenant: "acme", Subject: "client:acme", ID: "mtk_on_" + node, BAPTaskID: taskID,
			Status: "working", Created: now, Updated: now, Expires: now.Add(time.Hour), NodeID: node}); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.taskGet(t, "mtk_on_node_other", "X-Test-Tenant", "acme"); got.Status != "working" {
		t.Fatalf("a task a live node runs: %+v", got)
	}
	if _, err := b.db.Exec(ctx, `UPDATE runtime_node SET stopped_at = now() WHERE node_id = 'node_gone'`); err != nil {
		t.Fatal(err)
	}
	got := b.taskGet(t, "mtk_on_node_gone", "X-Test-Tenant", "acme")
	if got.Status != "failed" || got.Error == nil || got.Error.Code != -32603 || !strings.Contains(got.StatusMessage, "stopped") {
		t.Fatalf("a task whose node stopped: %+v", got)
	}
	var status string
	if err := b.db.QueryRow(ctx, `SELECT status FROM protocol_session_binding WHERE external_ref = 'mtk_on_node_gone'`).Scan(&status); err != nil || status != "failed" {
		t.Fatalf("the recorded end: %q %v", status, err)
	}
	// A node that missed its heartbeats is as gone as a stopped one.
	if _, err := b.db.Exec(ctx, `UPDATE runtime_node SET heartbeat_at = now() - interval '1 hour' WHERE node_id = 'node_other'`); err != nil {
		t.Fatal(err)
	}
	if got := b.taskGet(t, "mtk_on_node_other", "X-Test-Tenant", "acme"); got.Status != "failed" {
		t.Fatalf("a task whose node went silent: %+v", got)
	}
}

// A BAP refusal (here: no browser on this node) is a completed tool call (isError), never a
// failed task.
func TestRefusedCommandCompletesTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A session of a real task that no browser of this node holds (so the task is bound).
	taskID := field(t, b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k-refused")).StructuredContent, "task", "task_id")
	if _, err := b.db.Exec(context.Background(), `INSERT INTO browser_session (tenant_id, session_id, task_id, state, engine)
		VALUES ('acme', 'bs_nobrowser', $1, 'open', 'chromium')`, taskID); err != nil {
		t.Fatal(err)
	}
	var created toolResult
	b.rpc(t, "/mcp", "tools/call", map[string]any{"name": "navigate", "_meta": meta(taskCaps), "arguments": map[string]any{
		"session_id": "bs_nobrowser", "url": "https://shop.example.com/", "idempotency_key": "k-nav"}}).result(t, &created)
	if created.ResultType != "task" {
		t.Fatalf("navigate: %+v", created)
	}
	st := b.awaitTask(t, created.TaskID, "working")
	if st.Status != "completed" || st.Result == nil || !st.Result.IsError || field(t, st.Result.StructuredContent, "code") != "browser_unavailable" {
		t.Fatalf("refused navigate: %+v %s", st, st.Result.StructuredContent)
	}
}

func TestFastCallsStaySynchronous(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *mcpserver.Options) { o.TaskSyncWindow = 10 * time.Second })
	taskID := field(t, b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k1")).StructuredContent, "task", "task_id")
	var res toolResult
	b.rpc(t, "/mcp", "tools/call", map[string]any{"name": "close_task",
		"arguments": map[string]any{"task_id": taskID, "idempotency_key": "k2"}, "_meta": meta(taskCaps)}).result(t, &res)
	if res.ResultType != "complete" || res.TaskID != "" || field(t, res.StructuredContent, "task", "state") != "succeeded" {
		t.Fatalf("fast close_task: %+v", res)
	}
}

// fakeAPI stands in for BAP when an act is held for approval (202 with a pending approval).
type fakeAPI struct {
	mu       sync.Mutex
	channel  string   // the held approval's channel (who may answer it)
	resolved []string // "decision key", with " elicited" when the request carried the elicitation mark
	decided  string   // an approval.resolved event's state, once someone decided elsewhere
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := mcpserver.CallerFrom(r.Context()); !ok {
		http.Error(w, "no caller", http.StatusInternalServerError)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/bap/v1/browser-sessions/bs_1/act":
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"approval":{"approval_id":"apr_1","task_id":"tsk_1","state":"pending","reason":"Submit the order","channel":"`+f.channel+`"},`+
			`"receipt":{"receipt_id":"rcp_1","command_id":"cmd_1","outcome":"pending_approval"}}`)
	case r.URL.Path == "/bap/v1/approvals/apr_1/resolve":
		var body struct{ Decision string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		d := body.Decision + " " + r.Header.Get("Idempotency-Key")
		if mcpserver.Elicited(r.Context()) {
			d += " elicited"
		}
		f.resolved = append(f.resolved, d)
		state := map[string]string{"approve": "approved", "deny": "denied"}[body.Decision]
		_, _ = io.WriteString(w, `{"approval":{"approval_id":"apr_1","state":"`+state+`"},"action_receipt":{"receipt_id":"rcp_2","command_id":"cmd_1","outcome":"applied"}}`)
	case r.URL.Path == "/bap/v1/tasks/tsk_1/events":
		events := `[{"seq":1,"type":"approval.requested","data":{"approval_id":"apr_1"}}]`
		if f.decided != "" {
			events = `[{"seq":1,"type":"approval.requested","data":{"approval_id":"apr_1"}},{"seq":2,"type":"approval.resolved","data":{"approval_id":"apr_1","state":"` + f.decided + `"}}]`
		}
		_, _ = io.WriteString(w, `{"events":`+events+`,"next_after":null}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"type":"urn:bap:problem:not_found","title":"Not found","status":404,"detail":"no such route","code":"not_found"}`)
	}
}

func (f *fakeAPI) decisions() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.resolved...)
}

func setupFake(t *testing.T, channel string) (*bundle, *fakeAPI) {
	t.Helper()
	f := &fakeAPI{channel: channel}
	h, err := mcpserver.New(mcpserver.Options{API: f, Authenticator: mcpAuth{}, Logger: quiet, TaskSyncWindow: -1,
		TaskPollInterval: 50 * time.Millisecond, ApprovalPoll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{srv: httptest.NewServer(h)}
	t.Cleanup(b.srv.Close)
	return b, f
}

// setupFakeBound is setupFake with durable tasks, as the daemon wires them: the fake API answers
// the calls, and the tasks are bound in a real database where the session bs_1 the held act names
// belongs to a real task (unless seed is false: then the call names no session of the tenant).
func setupFakeBound(t *testing.T, channel string, seed bool, wrap ...func(mcpserver.TaskRecords) mcpserver.TaskRecords) (*bundle, *fakeAPI) {
	t.Helper()
	real := setup(t)
	var records mcpserver.TaskRecords = store.New(real.db)
	for _, w := range wrap {
		records = w(records)
	}
	if seed {
		taskID := field(t, real.call(t, "create_task", args(t, createArgs, "idempotency_key", "k-bound")).StructuredContent, "task", "task_id")
		if _, err := real.db.Exec(context.Background(), `INSERT INTO browser_session (tenant_id, session_id, task_id, state, engine)
			VALUES ('acme', 'bs_1', $1, 'open', 'chromium')`, taskID); err != nil {
			t.Fatal(err)
		}
	}
	f := &fakeAPI{channel: channel}
	h, err := mcpserver.New(mcpserver.Options{API: f, Authenticator: mcpAuth{}, Logger: quiet, TaskSyncWindow: -1,
		TaskPollInterval: 50 * time.Millisecond, ApprovalPoll: 20 * time.Millisecond, Tasks: records, NodeID: "node_mcp"})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{db: real.db, srv: httptest.NewServer(h)}
	t.Cleanup(b.srv.Close)
	return b, f
}

// otherNode is another node of b's cluster (its own MCP server on b's database, node_other):
// the tasks b runs are only recorded tasks to it.
func otherNode(t *testing.T, b *bundle, f *fakeAPI) *bundle {
	t.Helper()
	if err := store.New(b.db).RegisterNode(context.Background(), app.NodeInfo{ID: "node_other", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	h, err := mcpserver.New(mcpserver.Options{API: f, Authenticator: mcpAuth{}, Logger: quiet, TaskSyncWindow: -1,
		TaskPollInterval: 50 * time.Millisecond, ApprovalPoll: 20 * time.Millisecond, Tasks: store.New(b.db), NodeID: "node_other"})
	if err != nil {
		t.Fatal(err)
	}
	o := &bundle{db: b.db, srv: httptest.NewServer(h)}
	t.Cleanup(o.srv.Close)
	return o
}

// flakyRecords is the store's TaskRecords whose status writes fail while failing is set (the
// database refusing them); otherwise it is the store. Each refused write's status is kept.
type flakyRecords struct {
	mcpserver.TaskRecords
	failing atomic.Bool
	mu      sync.Mutex
	refused []string
}

func (f *flakyRecords) UpdateMCPTask(ctx context.Context, r app.MCPTaskRecord) error {
	if f.failing.Load() {
		f.mu.Lock()
		f.refused = append(f.refused, r.Status)
		f.mu.Unlock()
		return errors.New("the database refused the write (injected)")
	}
	return f.TaskRecords.UpdateMCPTask(ctx, r)
}

// refusals counts the refused writes of status.
func (f *flakyRecords) refusals(status string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.refused {
		if s == status {
			n++
		}
	}
	return n
}

// A task that waits for the client's input is answered input_required by every node, with the
// same input requests: the node that runs it records them on its binding, and another node
// answers tasks/get from it (never `working`, issue #23 item 1, ADR 0031). Answering them reaches
// only the running node (their answers go to its run): tasks/update on the other node is
// refused, and the answer given to the running node ends the task on both.
func TestInputRequiredIsAnsweredOnEveryNode(t *testing.T) {
	t.Parallel()
	a, f := setupFakeBound(t, "elicitation", true)
	other := otherNode(t, a, f)
	id := a.heldAct(t, taskElcit)
	here := a.awaitTask(t, id, "working")
	if here.Status != "input_required" || len(here.InputRequests) != 1 {
		t.Fatalf("the running node: %+v", here)
	}
	there := other.taskGet(t, id)
	if there.Status != "input_required" || !jsonEqual(t, mustJSON(t, there.InputRequests), mustJSON(t, here.InputRequests)) {
		t.Fatalf("another node: %+v, want input_required with %v", there, here.InputRequests)
	}
	var key string
	for k, v := range there.InputRequests {
		key = k
		if !strings.Contains(string(v), `"elicitation/create"`) || !strings.Contains(string(v), "apr_1") {
			t.Fatalf("the input request another node answers: %s", v)
		}
	}
	answer := map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}}
	if r := other.rpc(t, "/mcp", "tasks/update", map[string]any{"taskId": id, "_meta": meta(taskElcit), "inputResponses": answer}); r.code() != -32602 ||
		!strings.Contains(r.msg.Error.Message, "another node") {
		t.Fatalf("tasks/update on another node: %s", r.raw)
	}
	var ack map[string]any
	a.rpc(t, "/mcp", "tasks/update", map[string]any{"taskId": id, "_meta": meta(taskElcit), "inputResponses": answer}).result(t, &ack)
	for _, n := range []*bundle{a, other} {
		if st := n.awaitTask(t, id, "working", "input_required"); st.Status != "completed" || len(st.InputRequests) != 0 {
			t.Fatalf("after the answer: %+v", st)
		}
	}
}

// A status write that fails is retried until it succeeds, and meanwhile no node answers what the
// binding does not say: the running node answers tasks/get from its binding as last written, as
// every other node does, so the task never reads input_required on one node and working on
// another (issue #23 item 1, ADR 0031). Once a retry succeeds, both answer input_required.
func TestAFailedStatusWriteIsRetriedAndNeverDiverges(t *testing.T) {
	t.Parallel()
	var flaky *flakyRecords
	a, f := setupFakeBound(t, "elicitation", true, func(r mcpserver.TaskRecords) mcpserver.TaskRecords {
		flaky = &flakyRecords{TaskRecords: r}
		flaky.failing.Store(true) // the binding itself is written; its status writes are refused
		return flaky
	})
	other := otherNode(t, a, f)
	id := a.heldAct(t, taskElcit)
	waitfor.Until(t, 20*time.Second, "the input_required write is refused and retried", func() (bool, string) {
		n := flaky.refusals("input_required")
		return n >= 2, fmt.Sprintf("%d refusals", n)
	})
	here, there := a.taskGet(t, id), other.taskGet(t, id)
	if here.Status != "working" || len(here.InputRequests) != 0 || there.Status != here.Status || there.StatusMessage != here.StatusMessage {
		t.Fatalf("while the write fails: the running node %+v, another node %+v; want both the recorded working", here, there)
	}
	if got := a.bindingStatus(t, id); got != "working" {
		t.Fatalf("the binding: %q", got)
	}
	flaky.failing.Store(false)
	here = a.awaitTask(t, id, "working")
	there = other.taskGet(t, id)
	if here.Status != "input_required" || there.Status != "input_required" ||
		!jsonEqual(t, mustJSON(t, there.InputRequests), mustJSON(t, here.InputRequests)) || len(here.InputRequests) != 1 {
		t.Fatalf("once a retry succeeded: the running node %+v, another node %+v", here, there)
	}
}

// bindingStatus is the status protocol_session_binding records for MCP task id ("" when none).
func (b *bundle) bindingStatus(t *testing.T, id string) string {
	t.Helper()
	var status string
	err := b.db.QueryRow(context.Background(), `SELECT status FROM protocol_session_binding WHERE adapter_id = 'mcp' AND external_ref = $1`, id).Scan(&status)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return status
}

// A bound task that waits for the client's input says so on its binding (so every node and an
// operator see what it waits for), goes back to working when answered, and records its end.
func TestInputRequiredIsRecordedOnTheBinding(t *testing.T) {
	t.Parallel()
	b, f := setupFakeBound(t, "elicitation", true)
	f.mu.Lock() // the act waits until the binding is written as working
	id := b.heldAct(t, taskElcit)
	if got := b.bindingStatus(t, id); got != "working" {
		f.mu.Unlock()
		t.Fatalf("the binding once the client has the task id: %q, want working", got)
	}
	f.mu.Unlock()
	st := b.awaitTask(t, id, "working")
	if st.Status != "input_required" || len(st.InputRequests) != 1 {
		t.Fatalf("held act: %+v", st)
	}
	waitfor.Until(t, 20*time.Second, "the binding records input_required", func() (bool, string) {
		got := b.bindingStatus(t, id)
		return got == "input_required", got
	})
	var key string
	for k := range st.InputRequests {
		key = k
	}
	var ack map[string]any
	b.rpc(t, "/mcp", "tasks/update", map[string]any{"taskId": id, "_meta": meta(taskElcit),
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}}}).result(t, &ack)
	if st := b.awaitTask(t, id, "working", "input_required"); st.Status != "completed" {
		t.Fatalf("after the answer: %+v", st)
	}
	waitfor.Until(t, 20*time.Second, "the binding records the end", func() (bool, string) {
		got := b.bindingStatus(t, id)
		return got == "completed", got
	})
}

// A task whose binding cannot be written fails closed: the client gets an answer or a problem,
// never a task id that only this node knows (every other node would answer it unknown). A call
// that names no session of the tenant gets BAP's own refusal; one whose binding the database
// refuses, a problem (and its run is stopped).
func TestAnUnrecordedTaskIsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, code string
		seed       bool
		refuse     bool
	}{
		{"names no session of the tenant: BAP's own refusal", "not_found", false, false},
		{"the database refuses the binding", "internal_error", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, f := setupFakeBound(t, "elicitation", c.seed)
			if c.refuse {
				if _, err := b.db.Exec(context.Background(), `CREATE FUNCTION refuse_binding() RETURNS trigger LANGUAGE plpgsql AS
					$$ BEGIN RAISE EXCEPTION 'binding refused by the test'; END; $$;
					CREATE TRIGGER refuse_binding BEFORE INSERT ON protocol_session_binding FOR EACH ROW EXECUTE FUNCTION refuse_binding()`); err != nil {
					t.Fatal(err)
				}
			}
			session := "bs_1" // a held act: it would wait for the client's input
			if !c.seed {
				session = "bs_none" // BAP refuses a call on no session of the tenant (the fake: 404)
			}
			var res toolResult
			b.rpc(t, "/mcp", "tools/call", map[string]any{"name": "act", "_meta": meta(taskElcit), "arguments": map[string]any{
				"session_id": session, "action": "click", "node_id": "nd_1", "idempotency_key": "k-act"}}).result(t, &res)
			if res.ResultType != "complete" || res.TaskID != "" || !res.IsError || field(t, res.StructuredContent, "code") != c.code {
				t.Fatalf("a call whose task could not be recorded: %+v %s", res, res.StructuredContent)
			}
			var n int
			if err := b.db.QueryRow(context.Background(), `SELECT count(*) FROM protocol_session_binding`).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d bindings (%v)", n, err)
			}
			if d := f.decisions(); len(d) != 0 {
				t.Fatalf("the refused call resolved an approval: %v", d)
			}
		})
	}
}

func (b *bundle) heldAct(t *testing.T, c caps) string {
	t.Helper()
	var created toolResult
	b.rpc(t, "/mcp", "tools/call", map[string]any{"name": "act", "_meta": meta(c), "arguments": map[string]any{
		"session_id": "bs_1", "action": "click", "node_id": "nd_1", "idempotency_key": "k-act"}}).result(t, &created)
	if created.ResultType != "task" {
		t.Fatalf("act: %+v", created)
	}
	return created.TaskID
}

// A held act whose rule opted in (channel elicitation) asks the client; its answer becomes
// resolve_approval marked as an elicited answer (recorded with channel elicitation).
func TestHeldActionAsksTheClientForTheDecision(t *testing.T) {
	t.Parallel()
	b, f := setupFake(t, "elicitation")
	id := b.heldAct(t, taskElcit)
	st := b.awaitTask(t, id, "working")
	if st.Status != "input_required" || len(st.InputRequests) != 1 {
		t.Fatalf("held act: %+v", st)
	}
	var key string
	for k, v := range st.InputRequests {
		key = k
		if !strings.Contains(string(v), `"elicitation/create"`) || !strings.Contains(string(v), "apr_1") {
			t.Fatalf("input request %s", v)
		}
	}
	var ack map[string]any
	b.rpc(t, "/mcp", "tasks/update", map[string]any{"taskId": id, "_meta": meta(taskElcit),
		"inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}}}).result(t, &ack)
	if ack["resultType"] != "complete" {
		t.Fatalf("update ack %v", ack)
	}
	st = b.awaitTask(t, id, "working", "input_required")
	if st.Status != "completed" || field(t, st.Result.StructuredContent, "approval", "state") != "approved" ||
		field(t, st.Result.StructuredContent, "action_receipt", "outcome") != "applied" {
		t.Fatalf("after approval: %+v %s", st, st.Result.StructuredContent)
	}
	if d := f.decisions(); len(d) != 1 || d[0] != "approve mcp-task:"+id+" elicited" {
		t.Fatalf("resolve_approval calls: %v", d)
	}
}

// A held act whose rule did not opt in is never offered to the client, even one that declared
// elicitation: it waits for a separate approver, and cancelling the MCP task resolves nothing.
func TestHeldActionWithoutElicitationRuleWaitsForAnApprover(t *testing.T) {
	t.Parallel()
	b, f := setupFake(t, "approver")
	id := b.heldAct(t, taskElcit)
	var st taskState
	waitfor.Holds(t, 20*time.Second, func() bool {
		st = b.taskGet(t, id)
		return st.Status != "working" || st.StatusMessage != ""
	})
	if st.Status != "working" || len(st.InputRequests) != 0 || !strings.Contains(st.StatusMessage, "apr_1") {
		t.Fatalf("held act under an approver-only rule: %+v", st)
	}
	var ack map[string]any
	b.rpc(t, "/mcp", "tasks/cancel", map[string]any{"taskId": id, "_meta": meta(taskElcit)}).result(t, &ack)
	if st := b.awaitTask(t, id, "working"); st.Status != "cancelled" {
		t.Fatalf("cancelled: %+v", st)
	}
	if d := f.decisions(); len(d) != 0 {
		t.Fatalf("the adapter resolved the approval itself: %v", d)
	}
}

func TestHeldActionFollowsADecisionMadeElsewhere(t *testing.T) {
	t.Parallel()
	b, f := setupFake(t, "elicitation")
	id := b.heldAct(t, taskCaps) // no elicitation: the task waits, working
	// The act runs in the background: poll until the task reports the hold it is waiting on.
	var st taskState
	waitfor.Holds(t, 20*time.Second, func() bool {
		st = b.taskGet(t, id)
		return st.Status != "working" || st.StatusMessage != ""
	})
	if st.Status != "working" || !strings.Contains(st.StatusMessage, "apr_1") {
		t.Fatalf("held act without elicitation: %+v", st)
	}
	f.mu.Lock()
	f.decided = "denied"
	f.mu.Unlock()
	st = b.awaitTask(t, id, "working")
	if st.Status != "completed" || field(t, st.Result.StructuredContent, "approval", "state") != "denied" ||
		field(t, st.Result.StructuredContent, "receipt", "outcome") != "pending_approval" {
		t.Fatalf("decided elsewhere: %+v", st)
	}
	if d := f.decisions(); len(d) != 0 {
		t.Fatalf("the adapter resolved the approval itself: %v", d)
	}
}

func TestCancellingAHeldActionWithdrawsIt(t *testing.T) {
	t.Parallel()
	b, f := setupFake(t, "elicitation")
	id := b.heldAct(t, taskElcit)
	b.awaitTask(t, id, "working")
	var ack map[string]any
	b.rpc(t, "/mcp", "tasks/cancel", map[string]any{"taskId": id, "_meta": meta(taskElcit)}).result(t, &ack)
	st := b.awaitTask(t, id, "working", "input_required")
	if st.Status != "cancelled" {
		t.Fatalf("cancelled held act: %+v", st)
	}
	if d := f.decisions(); len(d) != 1 || d[0] != "deny mcp-task-cancel:"+id+" elicited" {
		t.Fatalf("resolve_approval calls: %v", d)
	}
}
