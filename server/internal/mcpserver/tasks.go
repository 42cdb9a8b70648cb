package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/originweave/bap/server/internal/app"
)

// The Tasks extension (io.modelcontextprotocol/tasks, SEP-2663). When a tools/call declares the
// extension in its per-request capabilities, a task-eligible tool may answer a CreateTaskResult
// (resultType "task") instead of its result; the client then polls tasks/get, answers input
// requests with tasks/update and may ask tasks/cancel.
//
// An MCP task here is a transport-level projection of one tool call. For BAP tools that call is
// one BAP command: its durable record (task_command, receipt, the stored response under the
// idempotency key) is the authority, and the MCP task only remembers how to present it. The
// node that runs a task keeps it in memory (input requests, cancellation); once a task outlives
// the immediate-result window, the adapter also binds it to its BAP task in the database
// (TaskRecords: protocol_session_binding) and records its status, input requests and end
// there, so that tasks/get on any node of the cluster answers it alike (this one answers from the
// record too), also after the node that ran it is gone (ADR 0019, ADR 0031).

const (
	tasksExtension    = "io.modelcontextprotocol/tasks"
	methodTasksGet    = "tasks/get"
	methodTasksUpdate = "tasks/update"
	methodTasksCancel = "tasks/cancel"
)

// Task statuses.
const (
	statusWorking       = "working"
	statusInputRequired = "input_required"
	statusCompleted     = "completed"
	statusFailed        = "failed"
	statusCancelled     = "cancelled"
)

func terminal(status string) bool {
	return status == statusCompleted || status == statusFailed || status == statusCancelled
}

// errTaskCancelled is returned by a task's run function that stopped because of tasks/cancel.
var errTaskCancelled = errors.New("task cancelled")

// taskFunc runs a task to its end. It returns the tool result (completed, isError included), a
// *jsonrpc.Error (failed), or errTaskCancelled / the context's error after tasks/cancel
// (cancelled).
type taskFunc func(ctx context.Context, run *taskRun) (*mcp.CallToolResult, error)

// taskTool is the task behaviour of one tool.
type taskTool struct {
	// required tools cannot run without the extension: such calls get -32021.
	required bool
	// syncWindow is how long the call may take before it becomes a task: a call that ends within
	// it is answered with its plain result (the immediate-result shortcut). 0: always a task.
	syncWindow time.Duration
	// plan decides for one call: a run function to execute as a task, or nil to answer it
	// synchronously through the tool's handler (e.g. an MRTR round, or arguments the handler
	// refuses).
	plan func(ctx context.Context, req *mcp.CallToolRequest) (taskFunc, error)
	// names, when set, returns the BAP task and session a call names (its durable binding);
	// nil: the tool's tasks stay in this node's memory.
	names func(req *mcp.CallToolRequest) (taskID, sessionID string)
}

// task is one MCP task.
type task struct {
	id, owner        string
	status           string
	message          string
	created, updated time.Time
	ttl              time.Duration
	result           *mcp.CallToolResult
	rpcErr           *jsonrpc.Error
	pending          map[string]json.RawMessage // outstanding input requests, wire form
	issued           map[string]bool            // every key ever issued (keys are never reused)
	answers          map[string]json.RawMessage // answers not yet taken by the run function
	wake             chan struct{}              // signalled on answers and cancellation
	changed          chan struct{}              // closed and replaced on every status change
	cancel           context.CancelFunc
	cancelRequested  bool
	onCancel         func() // optional: withdraws the underlying work (e.g. denies a held approval)
	// bapTask and session are the BAP task and session the call names (for its binding);
	// bound is closed once the binding is written or has failed (nil: the task is not bound);
	// unbound says it failed (the call was refused, and nothing more is recorded).
	bapTask, session string
	bound            chan struct{}
	unbound          bool
	// binder is the caller the binding is recorded for. shown is the binding as last written
	// (what every node answers, this one included); recDirty says the task changed since the
	// snapshot being written, recWriting that its writer runs (recordLoop). All under s.mu.
	binder     Caller
	shown      *app.MCPTaskRecord
	recDirty   bool
	recWriting bool
}

// TaskRecords keeps the MCP tasks that outlive the immediate-result window in the database,
// bound to the BAP task their call drives, so that every node answers tasks/get (the store
// implements it). Reads are by the caller's tenant and subject: another caller's task id is
// unknown.
type TaskRecords interface {
	// BindMCPTask records a task; an error when the call names no task or session of the tenant.
	BindMCPTask(ctx context.Context, r app.MCPTaskRecord) error
	// UpdateMCPTask records a bound task's status (working, input_required) or its end; a task
	// already ended keeps its first end.
	UpdateMCPTask(ctx context.Context, r app.MCPTaskRecord) error
	// MCPTask reads a task of tenant's subject; app.ErrNotFound when unknown, expired or not theirs.
	// Its RunnerGone says the node that runs it stopped or has not beaten since staleBefore.
	MCPTask(ctx context.Context, tenant, subject, id string, staleBefore time.Time) (*app.MCPTaskRecord, error)
}

// taskStore holds the tasks of this node.
type taskStore struct {
	mu       sync.Mutex
	tasks    map[string]*task
	now      func() time.Time
	ttl      time.Duration
	poll     time.Duration
	maxOwner int
	// statusChanged, when set, is called (s.mu not held) after a task moves between working and
	// input_required; its end is recorded by the run itself (taskEngine.recordEnd).
	statusChanged func(*task)
}

// changedStatus reports t's non-terminal status change (s.mu not held).
func (s *taskStore) changedStatus(t *task) {
	if s.statusChanged != nil {
		s.statusChanged(t)
	}
}

func newTaskStore(now func() time.Time, ttl, poll time.Duration) *taskStore {
	return &taskStore{tasks: map[string]*task{}, now: now, ttl: ttl, poll: poll, maxOwner: 1000}
}

func newTaskID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "mtk_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// create registers a working task of owner.
func (s *taskStore) create(owner string) (*task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	n := 0
	for id, t := range s.tasks {
		if now.Sub(t.created) > t.ttl {
			delete(s.tasks, id)
			continue
		}
		if t.owner == owner && !terminal(t.status) {
			n++
		}
	}
	if n >= s.maxOwner {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "too many unfinished tasks for this caller"}
	}
	t := &task{
		id: newTaskID(), owner: owner, status: statusWorking, created: now, updated: now, ttl: s.ttl,
		pending: map[string]json.RawMessage{}, issued: map[string]bool{}, answers: map[string]json.RawMessage{},
		wake: make(chan struct{}, 1), changed: make(chan struct{}),
	}
	s.tasks[t.id] = t
	return t, nil
}

// lookup returns owner's task id (expired tasks and other owners' tasks are unknown).
func (s *taskStore) lookup(owner, id string) (*task, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok || t.owner != owner {
		return nil, false
	}
	if s.now().Sub(t.created) > t.ttl {
		delete(s.tasks, id)
		return nil, false
	}
	return t, true
}

func (s *taskStore) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tasks, id)
}

// setStatus changes t's status (s.mu held).
func (s *taskStore) setStatusLocked(t *task, status, message string) {
	t.status, t.message, t.updated = status, message, s.now()
	close(t.changed)
	t.changed = make(chan struct{})
}

// finish records the end of t's run.
func (s *taskStore) finish(t *task, res *mcp.CallToolResult, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if terminal(t.status) {
		return
	}
	var rpcErr *jsonrpc.Error
	switch {
	case t.cancelRequested && (err != nil || res == nil):
		s.setStatusLocked(t, statusCancelled, "cancelled by the client")
	case errors.Is(err, errTaskCancelled):
		s.setStatusLocked(t, statusCancelled, "cancelled")
	case errors.As(err, &rpcErr):
		t.rpcErr = rpcErr
		s.setStatusLocked(t, statusFailed, rpcErr.Message)
	case err != nil:
		t.rpcErr = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the tool failed: " + err.Error()}
		s.setStatusLocked(t, statusFailed, t.rpcErr.Message)
	default:
		if res.Content == nil {
			res.Content = []mcp.Content{}
		}
		t.result = res
		s.setStatusLocked(t, statusCompleted, "")
	}
	t.pending = map[string]json.RawMessage{}
}

// taskRun is what a run function sees of its task.
type taskRun struct {
	s *taskStore
	t *task
}

// ID is the MCP task id.
func (r *taskRun) ID() string { return r.t.id }

// SetMessage updates the task's statusMessage (and its binding, so every node shows it).
func (r *taskRun) SetMessage(msg string) {
	r.s.mu.Lock()
	r.t.message, r.t.updated = msg, r.s.now()
	r.s.mu.Unlock()
	r.s.changedStatus(r.t)
}

// Ask parks the task in input_required with reqs (keys unique over the task's lifetime) and
// returns the answers to every one of them, delivered by tasks/update (a partial update keeps the
// task waiting for the rest). It returns ctx's error when the task is cancelled.
func (r *taskRun) Ask(ctx context.Context, reqs map[string]mcp.InputRequest) (map[string]json.RawMessage, error) {
	r.s.mu.Lock()
	for k, req := range reqs {
		if r.t.issued[k] {
			r.s.mu.Unlock()
			return nil, fmt.Errorf("input request key %q reused", k)
		}
		wire, err := inputRequestWire(req)
		if err != nil {
			r.s.mu.Unlock()
			return nil, err
		}
		r.t.issued[k] = true
		r.t.pending[k] = wire
	}
	r.s.setStatusLocked(r.t, statusInputRequired, "waiting for the client's input")
	r.s.mu.Unlock()
	r.s.changedStatus(r.t)
	got := map[string]json.RawMessage{}
	for {
		r.s.mu.Lock()
		for k := range reqs {
			if a, ok := r.t.answers[k]; ok {
				got[k] = a
				delete(r.t.answers, k)
			}
		}
		if len(got) == len(reqs) {
			resumed := !terminal(r.t.status) && len(r.t.pending) == 0 && r.t.status != statusWorking
			if resumed {
				r.s.setStatusLocked(r.t, statusWorking, "")
			}
			r.s.mu.Unlock()
			if resumed {
				r.s.changedStatus(r.t)
			}
			return got, nil
		}
		r.s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.t.wake:
		}
	}
}

// Withdraw withdraws pending input requests (the question was settled another way).
func (r *taskRun) Withdraw(keys ...string) {
	r.s.mu.Lock()
	for _, k := range keys {
		delete(r.t.pending, k)
	}
	resumed := r.t.status == statusInputRequired && len(r.t.pending) == 0
	if resumed {
		r.s.setStatusLocked(r.t, statusWorking, "")
	}
	r.s.mu.Unlock()
	if resumed {
		r.s.changedStatus(r.t)
	}
}

// OnCancel registers how tasks/cancel withdraws the underlying work (besides cancelling ctx).
func (r *taskRun) OnCancel(f func()) {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	r.t.onCancel = f
}

func inputRequestWire(req mcp.InputRequest) (json.RawMessage, error) {
	var method string
	switch req.(type) {
	case *mcp.ElicitParams:
		method = "elicitation/create"
	case *mcp.CreateMessageParams:
		method = "sampling/createMessage"
	case *mcp.ListRootsParams:
		method = "roots/list"
	default:
		return nil, fmt.Errorf("unknown input request %T", req)
	}
	if e, ok := req.(*mcp.ElicitParams); ok && e.Mode == "" {
		c := *e
		c.Mode = "form"
		req = &c
	}
	return json.Marshal(struct {
		Method string           `json:"method"`
		Params mcp.InputRequest `json:"params"`
	}{method, req})
}

// update delivers answers to t's outstanding input requests; unknown or already answered keys
// are ignored.
func (s *taskStore) update(t *task, answers map[string]json.RawMessage) {
	if s.updateLocked(t, answers) {
		s.changedStatus(t)
	}
}

// updateLocked is update under s.mu; it reports whether t went back to working.
func (s *taskStore) updateLocked(t *task, answers map[string]json.RawMessage) (resumed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delivered := false
	for k, a := range answers {
		if _, ok := t.pending[k]; !ok {
			continue
		}
		delete(t.pending, k)
		t.answers[k] = a
		delivered = true
	}
	if !delivered {
		return false
	}
	if t.status == statusInputRequired && len(t.pending) == 0 {
		s.setStatusLocked(t, statusWorking, "")
		resumed = true
	} else {
		t.updated = s.now()
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return resumed
}

// requestCancel asks t's run to stop.
func (s *taskStore) requestCancel(t *task) {
	s.mu.Lock()
	if terminal(t.status) || t.cancelRequested {
		s.mu.Unlock()
		return
	}
	t.cancelRequested = true
	cancel, onCancel := t.cancel, t.onCancel
	s.mu.Unlock()
	if onCancel != nil {
		onCancel()
	}
	if cancel != nil {
		cancel()
	}
}

// Wire shapes of the extension.

type taskWire struct {
	TaskID         string `json:"taskId"`
	Status         string `json:"status"`
	StatusMessage  string `json:"statusMessage,omitempty"`
	CreatedAt      string `json:"createdAt"`
	LastUpdatedAt  string `json:"lastUpdatedAt"`
	TTLMs          *int64 `json:"ttlMs"`
	PollIntervalMs int64  `json:"pollIntervalMs,omitempty"`
}

// createTaskResult is the flat CreateTaskResult (Result & Task) of a tools/call.
type createTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	taskWire
}

// getTaskResult is the DetailedTask answer of tasks/get.
type getTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	taskWire
	InputRequests map[string]json.RawMessage `json:"inputRequests,omitempty"`
	Result        *mcp.CallToolResult        `json:"result,omitempty"`
	Error         *jsonrpc.Error             `json:"error,omitempty"`
}

// syncToolResult is a CallToolResult answered from the Tasks middleware (the immediate-result
// shortcut), which bypasses the SDK's tool dispatch and so must carry resultType itself.
type syncToolResult struct {
	mcp.ResultBase
	ResultType        string        `json:"resultType"`
	Content           []mcp.Content `json:"content"`
	StructuredContent any           `json:"structuredContent,omitempty"`
	IsError           bool          `json:"isError,omitempty"`
}

func completeResult(res *mcp.CallToolResult) *syncToolResult {
	out := &syncToolResult{ResultType: "complete", Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError}
	if out.Content == nil {
		out.Content = []mcp.Content{}
	}
	out.Meta = res.Meta
	return out
}

// ackResult is the empty acknowledgement of tasks/update and tasks/cancel.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

type taskIDParams struct {
	mcp.ParamsBase
	TaskID *string `json:"taskId"`
}

type taskUpdateParams struct {
	mcp.ParamsBase
	TaskID         *string                    `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses"`
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func (s *taskStore) wireLocked(t *task) taskWire {
	ttl := t.ttl.Milliseconds()
	return taskWire{
		TaskID: t.id, Status: t.status, StatusMessage: t.message,
		CreatedAt: t.created.UTC().Format(timeFormat), LastUpdatedAt: t.updated.UTC().Format(timeFormat),
		TTLMs: &ttl, PollIntervalMs: s.poll.Milliseconds(),
	}
}

// taskEngine serves the extension on one MCP server.
type taskEngine struct {
	store *taskStore
	tools map[string]*taskTool
	// records, when set, makes the tasks that outlive the window durable (TaskRecords).
	records TaskRecords
	// nodeID is recorded as the runner of the tasks this node binds; a recorded task whose runner
	// has not beaten for staleAfter is taken for abandoned (fromRecord).
	nodeID     string
	staleAfter time.Duration
	now        func() time.Time
	log        *slog.Logger
}

// declaresTasks reports whether the request's capabilities declare the extension.
func declaresTasks(caps *mcp.ClientCapabilities) bool {
	if caps == nil {
		return false
	}
	_, ok := caps.Extensions[tasksExtension]
	return ok
}

// metaDeclaresTasks reads the extension from a request's raw _meta.
func metaDeclaresTasks(meta map[string]any) bool {
	raw, ok := meta[mcp.MetaKeyClientCapabilities]
	if !ok {
		return false
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return false
	}
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(b, &caps) != nil {
		return false
	}
	_, ok = caps.Extensions[tasksExtension]
	return ok
}

func missingTasksCapability() error {
	data, _ := json.Marshal(mcp.MissingRequiredClientCapabilityData{RequiredCapabilities: &mcp.ClientCapabilities{
		Extensions: map[string]any{tasksExtension: map[string]any{}},
	}})
	return &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities,
		Message: "this request needs the " + tasksExtension + " extension in the request's client capabilities", Data: data}
}

// middleware routes task-eligible tools/call requests.
func (e *taskEngine) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		call, ok := req.(*mcp.CallToolRequest)
		if !ok || call.Params == nil {
			return next(ctx, method, req)
		}
		tt, ok := e.tools[call.Params.Name]
		if !ok {
			return next(ctx, method, req)
		}
		if !declaresTasks(call.ClientCapabilities()) {
			if tt.required {
				return nil, missingTasksCapability()
			}
			return next(ctx, method, req)
		}
		run, err := tt.plan(ctx, call)
		if err != nil {
			return nil, err
		}
		if run == nil {
			return next(ctx, method, req)
		}
		caller, _ := CallerFrom(ctx)
		t, err := e.store.create(caller.owner())
		if err != nil {
			return nil, err
		}
		if tt.names != nil && e.records != nil {
			t.bapTask, t.session = tt.names(call)
		}
		return e.start(ctx, caller, t, run, tt.syncWindow)
	}
}

// start runs fn as a task. The task exists (tasks/get resolves it) before its CreateTaskResult
// is returned. If fn ends within window, the call is answered with its plain result instead.
func (e *taskEngine) start(ctx context.Context, caller Caller, t *task, fn taskFunc, window time.Duration) (mcp.Result, error) {
	// The run outlives the HTTP request that started it; tasks/cancel (or the TTL) ends it.
	runCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.ttl)
	e.store.mu.Lock()
	t.cancel = cancel
	changed := t.changed
	e.store.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		res, err := fn(runCtx, &taskRun{s: e.store, t: t})
		e.store.finish(t, res, err)
		e.recordStatus(ctx, t) // its end, once its binding is written
	}()
	if window > 0 {
		timer := time.NewTimer(window)
		defer timer.Stop()
		select {
		case <-done:
		case <-changed: // finished, or waiting for input: either way the client gets an answer now
		case <-timer.C:
		}
		e.store.mu.Lock()
		status, res, rpcErr := t.status, t.result, t.rpcErr
		e.store.mu.Unlock()
		switch status {
		case statusCompleted:
			e.store.remove(t.id)
			return completeResult(res), nil
		case statusFailed:
			e.store.remove(t.id)
			return nil, rpcErr
		}
	}
	e.store.mu.Lock()
	out := &createTaskResult{ResultType: "task", taskWire: e.store.wireLocked(t)}
	rec, bind := e.bindLocked(caller, t)
	e.store.mu.Unlock()
	if bind {
		// Written before the client learns the task id, so that any node it asks knows it. A
		// binding that cannot be written fails closed: a task only this node knew would be
		// answered "unknown" by every other node of the cluster (and lost with this one), so the
		// client gets an answer or a problem instead of a task id (unbind).
		if err := e.records.BindMCPTask(context.WithoutCancel(ctx), rec); err != nil {
			e.log.Warn("mcp: the task could not be recorded for the cluster; it is not answered as a task", "task", t.id, "err", err)
			return e.unbind(t, err, done)
		}
		e.store.mu.Lock()
		t.shown = &rec
		e.store.mu.Unlock()
		close(t.bound)
	}
	return out, nil
}

// unboundWait bounds how long a call that names nothing of its caller's is awaited for BAP's own
// refusal (which comes at once: no task or session to run on).
const unboundWait = 30 * time.Second

// unbind answers the call whose binding could not be written, and forgets its task. A call that
// names no task or session of the caller's is refused by BAP itself, so the client gets BAP's own
// answer once its run ends. Any other failure (the database refused the write) stops the run —
// without withdrawing what it began: an approval it waits on stays for an approver — and the
// client gets a problem; the BAP command it began is BAP's and durable, and the same call with
// the same idempotency_key answers it.
func (e *taskEngine) unbind(t *task, err error, done <-chan struct{}) (mcp.Result, error) {
	e.store.mu.Lock()
	t.unbound = true
	cancel := t.cancel
	e.store.mu.Unlock()
	close(t.bound)
	defer e.store.remove(t.id)
	if errors.Is(err, app.ErrNotFound) {
		timer := time.NewTimer(unboundWait)
		defer timer.Stop()
		select {
		case <-done:
			e.store.mu.Lock()
			status, res, rpcErr := t.status, t.result, t.rpcErr
			e.store.mu.Unlock()
			switch status {
			case statusCompleted:
				return completeResult(res), nil
			case statusFailed:
				return nil, rpcErr
			}
		case <-timer.C:
		}
	}
	cancel()
	return completeResult(problemResult(&app.Error{Code: app.CodeInternal, Detail: "the server could not record this call's MCP task " +
		"for its cluster, so it is not answered as a task; the BAP command it began may still run: call the tool again with the same " +
		"idempotency_key for its outcome"})), nil
}

// bindLocked decides whether t becomes durable and snapshots its record (s.mu held): t.bound is
// set under the lock, so the run's end either sees it (and records the end after the binding) or
// happened before (and the snapshot carries it).
func (e *taskEngine) bindLocked(caller Caller, t *task) (app.MCPTaskRecord, bool) {
	if e.records == nil || (t.bapTask == "" && t.session == "") {
		return app.MCPTaskRecord{}, false
	}
	t.bound, t.binder = make(chan struct{}), caller
	r := recordOf(caller, t)
	r.NodeID = e.nodeID
	return r, true
}

// recordOf is t's durable record (s.mu held).
func recordOf(caller Caller, t *task) app.MCPTaskRecord {
	r := app.MCPTaskRecord{Tenant: caller.Actor.Tenant, Subject: caller.Actor.Subject, ID: t.id,
		BAPTaskID: t.bapTask, SessionID: t.session, Status: t.status, Message: t.message,
		Created: t.created, Updated: t.updated, Expires: t.created.Add(t.ttl)}
	r.Outcome = outcomeOf(t)
	if t.status == statusInputRequired {
		// The pending requests in their wire form (each marshalled by Ask), so any node answers them.
		if b, err := json.Marshal(t.pending); err == nil {
			r.InputRequests = b
		}
	}
	return r
}

// outcomeOf is the terminal answer tasks/get carries ({"result"} or {"error"}), nil for cancelled.
func outcomeOf(t *task) []byte {
	var v any
	switch t.status {
	case statusCompleted:
		v = struct {
			Result *mcp.CallToolResult `json:"result"`
		}{t.result}
	case statusFailed:
		v = struct {
			Error *jsonrpc.Error `json:"error"`
		}{t.rpcErr}
	default:
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// syncStatus records a bound task's move between working and input_required, or its status
// message, so that the binding says what the task waits for (store.statusChanged).
func (e *taskEngine) syncStatus(t *task) {
	e.recordStatus(context.Background(), t)
}

// Retries of a binding's write that failed: from recordRetry, doubling up to recordRetryMax,
// until it is written or the task expires.
const (
	recordRetry    = 100 * time.Millisecond
	recordRetryMax = 5 * time.Second
)

// recordStatus has t's current state written to its binding, once the binding is written
// (nothing for a task that is not bound, or whose binding failed). It does not wait: one writer
// per task (recordLoop) writes the latest state, so writes are ordered and the last one written
// carries the last status; UpdateMCPTask never overwrites a first end.
func (e *taskEngine) recordStatus(ctx context.Context, t *task) {
	e.store.mu.Lock()
	if t.bound == nil || t.unbound {
		e.store.mu.Unlock()
		return
	}
	t.recDirty = true
	start := !t.recWriting
	t.recWriting = true
	e.store.mu.Unlock()
	if start {
		go e.recordLoop(context.WithoutCancel(ctx), t)
	}
}

// recordLoop writes t's binding until it carries t's latest state. A write that fails is retried
// with backoff until it succeeds or the task expires (then its binding has expired too, and every
// node answers the task unknown). Meanwhile no node answers what the binding does not say: this
// node answers tasks/get from the binding as last written (t.shown), as the others do, so a task
// never reads one way here and another on the rest of the cluster (ADR 0031). A task that moved
// on while its write failed is shown as it last was, then as it is once the write succeeds.
func (e *taskEngine) recordLoop(ctx context.Context, t *task) {
	<-t.bound
	ctx, cancel := context.WithTimeout(ctx, t.created.Add(t.ttl).Sub(e.now()))
	defer cancel()
	retry := recordRetry
	failures := 0
	for {
		e.store.mu.Lock()
		if t.unbound || !t.recDirty {
			t.recWriting = false
			e.store.mu.Unlock()
			return
		}
		t.recDirty = false
		rec := recordOf(t.binder, t)
		e.store.mu.Unlock()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		err := e.records.UpdateMCPTask(wctx, rec)
		wcancel()
		if err == nil {
			e.store.mu.Lock()
			t.shown = &rec
			e.store.mu.Unlock()
			if failures > 0 {
				e.log.Info("mcp: a task's status is recorded again", "task", t.id, "status", rec.Status, "failed_writes", failures)
			}
			retry, failures = recordRetry, 0
			continue
		}
		failures++
		e.store.mu.Lock()
		t.recDirty = true // written again, with the state of then
		e.store.mu.Unlock()
		e.log.Warn("mcp: recording a task's status failed; every node answers its last recorded status until a retry succeeds",
			"task", t.id, "status", rec.Status, "retry_in", retry, "err", err)
		timer := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			timer.Stop()
			e.store.mu.Lock()
			t.recWriting = false
			e.store.mu.Unlock()
			e.log.Error("mcp: a task expired before its status could be recorded", "task", t.id, "status", rec.Status, "failed_writes", failures)
			return
		case <-timer.C:
		}
		retry = min(2*retry, recordRetryMax)
	}
}

// register adds tasks/get, tasks/update and tasks/cancel to srv.
func (e *taskEngine) register(srv *mcp.Server) error {
	if err := mcp.AddReceivingCustomMethod(srv, methodTasksGet, e.get); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(srv, methodTasksUpdate, e.update); err != nil {
		return err
	}
	return mcp.AddReceivingCustomMethod(srv, methodTasksCancel, e.cancel)
}

func unknownTask() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "unknown taskId (expired, never issued, or not yours)"}
}

// resolve checks the extension and finds the caller's task.
func (e *taskEngine) resolve(ctx context.Context, meta map[string]any, id *string) (*task, error) {
	if !metaDeclaresTasks(meta) {
		return nil, missingTasksCapability()
	}
	if id == nil || *id == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params.taskId is required"}
	}
	caller, _ := CallerFrom(ctx)
	t, ok := e.store.lookup(caller.owner(), *id)
	if !ok {
		return nil, unknownTask()
	}
	return t, nil
}

func (e *taskEngine) get(ctx context.Context, _ *mcp.ServerSession, p *taskIDParams) (*getTaskResult, error) {
	t, err := e.resolve(ctx, p.GetMeta(), p.TaskID)
	if err != nil {
		if rec, ok := e.recorded(ctx, err, p.TaskID); ok {
			return e.fromRecord(e.abandoned(ctx, rec))
		}
		return nil, err
	}
	e.store.mu.Lock()
	if shown := t.shown; shown != nil && !t.unbound {
		// A bound task: what its binding says, as every other node answers it (recordLoop).
		e.store.mu.Unlock()
		return e.fromRecord(shown)
	}
	defer e.store.mu.Unlock()
	res := &getTaskResult{ResultType: "complete", taskWire: e.store.wireLocked(t)}
	switch t.status {
	case statusInputRequired:
		res.InputRequests = make(map[string]json.RawMessage, len(t.pending))
		for k, v := range t.pending {
			res.InputRequests[k] = v
		}
	case statusCompleted:
		res.Result = t.result
	case statusFailed:
		res.Error = t.rpcErr
	}
	return res, nil
}

func (e *taskEngine) update(ctx context.Context, _ *mcp.ServerSession, p *taskUpdateParams) (*ackResult, error) {
	t, err := e.resolve(ctx, p.GetMeta(), p.TaskID)
	if err != nil {
		if _, ok := e.recorded(ctx, err, p.TaskID); ok {
			return nil, elsewhere()
		}
		return nil, err
	}
	if p.InputResponses == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "params.inputResponses must be an object"}
	}
	e.store.update(t, p.InputResponses)
	return &ackResult{ResultType: "complete"}, nil
}

func (e *taskEngine) cancel(ctx context.Context, _ *mcp.ServerSession, p *taskIDParams) (*ackResult, error) {
	t, err := e.resolve(ctx, p.GetMeta(), p.TaskID)
	if err != nil {
		if rec, ok := e.recorded(ctx, err, p.TaskID); ok {
			if terminal(rec.Status) {
				return &ackResult{ResultType: "complete"}, nil // cooperative: it already ended
			}
			return nil, elsewhere()
		}
		return nil, err
	}
	e.store.requestCancel(t)
	return &ackResult{ResultType: "complete"}, nil
}

// recorded looks a task this node does not hold up in the database, for the caller only. It
// answers only when resolve refused for an unknown task id; a failing read is logged and the
// task stays unknown (fail closed: never another caller's).
func (e *taskEngine) recorded(ctx context.Context, resolveErr error, id *string) (*app.MCPTaskRecord, bool) {
	var rpcErr *jsonrpc.Error
	if e.records == nil || id == nil || *id == "" || !errors.As(resolveErr, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidParams {
		return nil, false
	}
	caller, ok := CallerFrom(ctx)
	if !ok || caller.Actor.Tenant == "" {
		return nil, false
	}
	rec, err := e.records.MCPTask(ctx, caller.Actor.Tenant, caller.Actor.Subject, *id, e.now().Add(-e.staleAfter))
	if err != nil {
		if !errors.Is(err, app.ErrNotFound) {
			e.log.Warn("mcp: reading a recorded task", "err", err)
		}
		return nil, false
	}
	return rec, true
}

// abandoned ends a recorded task whose runner is gone (stopped, or its heartbeats missed for
// staleAfter) while it was still working: that node will never record its end, and answering
// `working` until the task expires would leave the client polling a dead run. It fails, and the
// failure says where the authority is: the BAP command the call ran, classified by recovery
// (unknown_outcome, reconciliation_required…), which the same call with the same idempotency_key
// replays, and the task's history. Recorded (the first end is kept), so every node answers alike.
func (e *taskEngine) abandoned(ctx context.Context, r *app.MCPTaskRecord) *app.MCPTaskRecord {
	if terminal(r.Status) || !r.RunnerGone {
		return r
	}
	end := *r
	end.Status, end.Updated = statusFailed, e.now()
	end.Message = "the node that ran this task stopped before it ended"
	outcome, err := json.Marshal(struct {
		Error *jsonrpc.Error `json:"error"`
	}{&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the node that ran this task stopped before it ended; " +
		"the BAP command it ran is classified by recovery: call the tool again with the same idempotency_key for its receipt, " +
		"or read the task's events (list_task_events)"}})
	if err != nil {
		return r
	}
	end.Outcome = outcome
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := e.records.UpdateMCPTask(fctx, end); err != nil {
		e.log.Warn("mcp: recording the end of an abandoned task", "task", r.ID, "err", err)
		return &end
	}
	// The first recorded end is kept: the runner may have recorded its own just before dying.
	if stored, err := e.records.MCPTask(fctx, r.Tenant, r.Subject, r.ID, e.now().Add(-e.staleAfter)); err == nil && terminal(stored.Status) {
		return stored
	}
	return &end
}

// fromRecord is tasks/get's answer from a recorded task (one another node runs or ran).
func (e *taskEngine) fromRecord(r *app.MCPTaskRecord) (*getTaskResult, error) {
	ttl := r.Expires.Sub(r.Created).Milliseconds()
	res := &getTaskResult{ResultType: "complete", taskWire: taskWire{
		TaskID: r.ID, Status: r.Status, StatusMessage: r.Message,
		CreatedAt: r.Created.UTC().Format(timeFormat), LastUpdatedAt: r.Updated.UTC().Format(timeFormat),
		TTLMs: &ttl, PollIntervalMs: e.store.poll.Milliseconds(),
	}}
	if r.Status == statusInputRequired {
		if err := json.Unmarshal(r.InputRequests, &res.InputRequests); err != nil || len(res.InputRequests) == 0 {
			// Recorded before its input requests were (migrations/0022): only the running node
			// knows them, so this one can only say that it waits.
			res.Status, res.InputRequests = statusWorking, nil
			res.StatusMessage = "waiting for the client's input, which the node that runs this task asks (tasks/get and tasks/update reach it there)"
		}
	}
	if len(r.Outcome) > 0 {
		var out struct {
			Result *mcp.CallToolResult `json:"result"`
			Error  *jsonrpc.Error      `json:"error"`
		}
		if err := json.Unmarshal(r.Outcome, &out); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task's recorded outcome is unreadable"}
		}
		res.Result, res.Error = out.Result, out.Error
	}
	return res, nil
}

// elsewhere refuses tasks/update and tasks/cancel of a task another node runs: its input
// requests and cancellation live with its run.
func elsewhere() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
		Message: "this task runs on another node of the cluster: tasks/update and tasks/cancel reach it only there (cancel_task stops its BAP task from any node)"}
}
