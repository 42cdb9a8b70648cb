package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	bap "github.com/originweave/bap/sdk-go"

	"github.com/originweave/bap/server/internal/waitfor"
)

// The brief's commercial proof, end to end on a real `bap serve`: client A (the Go SDK over
// HTTP) starts a governed workflow — a task whose policy allows one site and holds form
// submissions for approval, a session, a filled order form — and checkpoints it; the server is
// killed (SIGKILL) and started again on the same data dir; client B (the official Go MCP client
// over /mcp, its own connection and tool surface) resumes the task from A's checkpoint, finds
// the filled form as the checkpoint restores it, and submits. The submission is held; neither
// client can approve it; the operator does over the Unix socket and the site gets exactly one
// order. Replays of either client's keys after the restart have no second effect, both clients
// read the same task and the same receipts, and no raw browser protocol id reaches B.

// draftShop is an order form that keeps its draft in session storage (which a checkpoint keeps)
// behind a cart cookie (HttpOnly, which a checkpoint keeps too), counts the orders it receives
// and records the last one.
type draftShop struct {
	srv    *httptest.Server
	orders atomic.Int64
	mu     sync.Mutex
	last   string // "name=…; cart=…" of the last order
}

func newDraftShop(t *testing.T) *draftShop {
	t.Helper()
	s := &draftShop{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /form", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "cart", Value: "cart-7f3a", Path: "/", HttpOnly: true})
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Order</title><h1>Order</h1>`+
			`<form method="post" action="/order"><label>Name <input id="n" name="name"></label><button type="submit">Send</button></form>`+
			`<p id="draft"></p><script>
const n = document.getElementById("n"), d = document.getElementById("draft");
const show = () => { d.textContent = "draft: " + (sessionStorage.getItem("draft") || "none"); };
n.value = sessionStorage.getItem("draft") || ""; show();
n.addEventListener("input", () => { sessionStorage.setItem("draft", n.value); show(); });
</script>`)
	})
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		cart := "none"
		if c, err := r.Cookie("cart"); err == nil {
			cart = c.Value
		}
		name := r.FormValue("name")
		s.mu.Lock()
		s.last = "name=" + name + "; cart=" + cart
		s.mu.Unlock()
		s.orders.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Thanks</title><p>Order received for %s</p>`, html.EscapeString(name))
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *draftShop) lastOrder() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// nodeOf returns the first node (depth first) with role whose name contains name
// (case-insensitive).
func nodeOf(nodes any, role, name string) map[string]any {
	list, _ := nodes.([]any)
	for _, n := range list {
		m, _ := n.(map[string]any)
		if m["role"] == role && strings.Contains(strings.ToLower(fmt.Sprint(m["name"])), name) {
			return m
		}
		if found := nodeOf(m["children"], role, name); found != nil {
			return found
		}
	}
	return nil
}

// asJSON decodes raw into a generic value, failing the test when it is not JSON.
func asJSON(t *testing.T, raw []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, raw)
	}
	return v
}

func TestSecondClientResumesTheFirstClientsGovernedWorkflow(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	shop := newDraftShop(t)
	var elsewhereHits atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhereHits.Add(1) }))
	t.Cleanup(elsewhere.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	r := start(t, bin, dir)
	// Client A: the Go SDK over TCP (through the spec-checking transport), one attempt per call
	// so that every answer is the server's own.
	newA := func(listen string) *bap.Client {
		return bap.NewClient("http://"+listen, bap.WithHTTPClient(http.DefaultClient), bap.WithRetry(1), bap.WithUserAgent("client-a"))
	}
	a := newA(r.listen)
	created, err := a.CreateTask(ctx, bap.CreateTaskRequest{Goal: "order as Ada, asking first", Policy: bap.Policy{
		AllowedOrigins: []string{shop.srv.URL},
		ApprovalRules:  &[]bap.ApprovalRule{{Effect: bap.ApprovalEffectFormSubmission}},
	}}, bap.WithIdempotencyKey("a-task"))
	if err != nil {
		t.Fatalf("A create_task: %v", err)
	}
	taskID := created.Task.TaskId
	sess, err := a.CreateBrowserSession(ctx, taskID, bap.CreateBrowserSessionRequest{}, bap.WithIdempotencyKey("a-session"))
	if bap.IsProblem(err, bap.ProblemCodeBrowserUnavailable) {
		t.Fatalf("bap serve has no browser (install chromium (scripts/install-deps.sh): a required test never skips): %v", err)
	}
	if err != nil {
		t.Fatalf("A create_browser_session: %v", err)
	}
	oldSID := sess.Session.SessionId
	if _, err := a.Navigate(ctx, oldSID, bap.NavigateRequest{Url: shop.srv.URL + "/form"}, bap.WithIdempotencyKey("a-nav")); err != nil {
		t.Fatalf("A navigate: %v", err)
	}
	var fillMeta bap.ResponseMeta
	fill, err := a.Act(ctx, oldSID, bap.ActRequest{Action: bap.ActActionFill,
		Query: &bap.Query{Role: new("textbox"), Name: new("Name")}, Value: new("Ada")},
		bap.WithIdempotencyKey("a-fill"), bap.WithResponseMeta(&fillMeta))
	if err != nil || fillMeta.Status != 200 || fill.Receipt.Outcome != "applied" {
		t.Fatalf("A fill: %v %d %s", err, fillMeta.Status, fillMeta.Body)
	}
	if text, err := a.Extract(ctx, oldSID, bap.ExtractRequest{Kind: "text"}); err != nil || !strings.Contains(fmt.Sprint(text.Data), "draft: Ada") {
		t.Fatalf("A extract before the checkpoint: %v %v", err, text)
	}
	chk, err := a.CheckpointBrowserSession(ctx, oldSID, bap.CheckpointBrowserSessionRequest{}, bap.WithIdempotencyKey("a-chk"))
	if err != nil {
		t.Fatalf("A checkpoint: %v", err)
	}
	chkID := chk.Checkpoint.CheckpointId
	if shop.orders.Load() != 0 {
		t.Fatalf("an order before anyone submitted: %d", shop.orders.Load())
	}

	_ = r.stop(t, syscall.SIGKILL)
	r = start(t, bin, dir)
	a = newA(r.listen)

	// Client B: the official Go MCP client, its own session on /mcp. In the local profile every
	// TCP caller is agent:local: B's tools are the catalog without resolve_approval.
	c := mcp.NewClient(&mcp.Implementation{Name: "client-b", Version: "1"}, nil)
	connect := func() *mcp.ClientSession {
		t.Helper()
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + r.listen + "/mcp"},
			&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	cs := connect()
	var toolNames []string
	for tl, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		toolNames = append(toolNames, tl.Name)
	}
	if len(toolNames) != 21 || slices.Contains(toolNames, "resolve_approval") {
		t.Fatalf("B's tools: %v, want the 19 the local agent may call (no resolve_approval)", toolNames)
	}
	var transcript strings.Builder
	type answer struct {
		sc       map[string]any
		raw      json.RawMessage
		isError  bool
		status   any
		replayed bool
	}
	call := func(tool string, args map[string]any) answer {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("B %s: %v", tool, err)
		}
		raw, _ := json.Marshal(res)
		transcript.Write(raw)
		b, _ := json.Marshal(res.StructuredContent)
		var sc map[string]any
		_ = json.Unmarshal(b, &sc)
		replayed, _ := res.Meta["io.originweave.bap/replayed"].(bool)
		return answer{sc: sc, raw: b, isError: res.IsError, status: res.Meta["io.originweave.bap/status"], replayed: replayed}
	}
	defer func() {
		if m := rawBrowserIDs.FindString(transcript.String()); m != "" {
			t.Errorf("a raw browser identifier reached client B: %s", m)
		}
	}()

	// B sees A's task, which the restarted server's recovery moves to checkpointed (its session
	// died with the old process), and resumes it from A's checkpoint.
	waitfor.Until(t, 30*time.Second, "recovery leaves A's task checkpointed", func() (bool, string) {
		got := call("get_task", map[string]any{"task_id": taskID})
		return !got.isError && field(got.sc, "task", "state") == "checkpointed", string(got.raw)
	})
	resumed := call("resume_task", map[string]any{"task_id": taskID, "checkpoint_id": chkID, "idempotency_key": "b-resume"})
	newSID := field(resumed.sc, "session", "session_id")
	if resumed.isError || field(resumed.sc, "task", "state") != "running" || newSID == "" || newSID == oldSID ||
		field(resumed.sc, "session", "from_checkpoint") != chkID || field(resumed.sc, "receipt", "outcome") != "applied" {
		t.Fatalf("B resume_task: %s", resumed.raw)
	}
	// What the checkpoint promises: the URL, the session storage (the page refills its draft
	// from it) and the HttpOnly cookie (sent with the order below).
	page := call("observe", map[string]any{"session_id": newSID})
	box := nodeOf(page.sc["nodes"], "textbox", "name")
	button := nodeOf(page.sc["nodes"], "button", "send")
	if page.isError || !strings.HasPrefix(fmt.Sprint(page.sc["url"]), shop.srv.URL+"/form") || box == nil || button == nil || box["value"] != "Ada" {
		t.Fatalf("B observe of the restored session: %s", page.raw)
	}
	if text := call("extract", map[string]any{"session_id": newSID, "kind": "text"}); text.isError || !strings.Contains(fmt.Sprint(text.sc["data"]), "draft: Ada") {
		t.Fatalf("B extract of the restored session: %s", text.raw)
	}
	// No ambient authority: the resumed session is bound by the task's policy, not by B.
	if nav := call("navigate", map[string]any{"session_id": newSID, "url": elsewhere.URL + "/pay", "idempotency_key": "b-elsewhere"}); !nav.isError ||
		nav.sc["code"] != "origin_not_allowed" || elsewhereHits.Load() != 0 {
		t.Fatalf("B navigate outside the allowed origins: %s (hits %d)", nav.raw, elsewhereHits.Load())
	}

	// B submits: held for approval, nothing sent.
	sendArgs := func() map[string]any {
		return map[string]any{"session_id": newSID, "action": "click", "node_id": button["node_id"], "idempotency_key": "b-send"}
	}
	held := call("act", sendArgs())
	aprID := field(held.sc, "approval", "approval_id")
	if held.isError || fmt.Sprint(held.status) != "202" || field(held.sc, "approval", "state") != "pending" ||
		field(held.sc, "approval", "requested_by") != "agent:local" || aprID == "" || shop.orders.Load() != 0 {
		t.Fatalf("B submit: %s (orders %d)", held.raw, shop.orders.Load())
	}
	if st := field(call("get_task", map[string]any{"task_id": taskID}).sc, "task", "state"); st != "waiting_for_approval" {
		t.Fatalf("task while held: %s", st)
	}
	// B's retry with its key while held replays the hold: the same approval, not a second one.
	if again := call("act", sendArgs()); !again.replayed || fmt.Sprint(again.status) != "202" || field(again.sc, "approval", "approval_id") != aprID {
		t.Fatalf("B's submit again with its key while held: %s (replayed %v, status %v)", again.raw, again.replayed, again.status)
	}
	// Neither client approves its own hold: B's resolve_approval (not in its tools) and A's
	// resolve_approval are both refused for want of bap:approvals.resolve — /mcp answers HTTP 403,
	// on which the Go SDK client closes its session, so B connects again afterwards.
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "resolve_approval",
		Arguments: map[string]any{"approval_id": aprID, "decision": "approve", "idempotency_key": "b-self"}}); err == nil {
		raw, _ := json.Marshal(res)
		t.Fatalf("B resolve_approval was answered: %s", raw)
	} else if !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("B resolve_approval: %v, want HTTP 403", err)
	}
	cs = connect()
	if _, err := a.ResolveApproval(ctx, aprID, bap.ResolveApprovalRequest{Decision: "approve"}, bap.WithIdempotencyKey("a-self")); !bap.IsProblem(err, bap.ProblemCodeInsufficientScope) {
		t.Fatalf("A resolve_approval: %v, want 403 insufficient_scope", err)
	}
	if shop.orders.Load() != 0 {
		t.Fatalf("a refused resolve sent the order: %d", shop.orders.Load())
	}

	// The operator approves over the Unix socket: the held click runs once, with the state the
	// checkpoint restored.
	out, errOut, ok := approvalsCLI(t, bin, dir, "list")
	if as := approvalLines(t, out); !ok || len(as) != 1 || as[0]["approval_id"] != aprID || as[0]["state"] != "pending" {
		t.Fatalf("bap approvals list: %v %q %s", ok, out, errOut)
	}
	out, errOut, ok = approvalsCLI(t, bin, dir, "approve", aprID, "--reason", "checked the order")
	var approved map[string]any
	_ = json.Unmarshal([]byte(out), &approved)
	clickReceipt := field(approved, "action_receipt", "receipt_id")
	if !ok || field(approved, "approval", "state") != "approved" || field(approved, "approval", "resolved_by") != "operator:local" ||
		field(approved, "action_receipt", "outcome") != "applied" || clickReceipt == "" ||
		shop.orders.Load() != 1 || shop.lastOrder() != "name=Ada; cart=cart-7f3a" {
		t.Fatalf("bap approvals approve: %v %q %s (orders %d, last %q)", ok, out, errOut, shop.orders.Load(), shop.lastOrder())
	}

	// No duplicate side effects. B's submit key after the approval ran replays its first answer,
	// the hold, although the click's navigation retired the node handle it names: a key's first
	// answer comes before any check of the present (replayFirst), and nothing runs again.
	if again := call("act", sendArgs()); !again.replayed || fmt.Sprint(again.status) != "202" ||
		field(again.sc, "approval", "approval_id") != aprID || shop.orders.Load() != 1 {
		t.Fatalf("B's submit again with its key after the approval: %s (replayed %v, status %v, orders %d)", again.raw, again.replayed, again.status, shop.orders.Load())
	}
	// A's keys from before the crash replay their first answers: nothing runs again.
	var fillAgain bap.ResponseMeta
	if _, err := a.Act(ctx, oldSID, bap.ActRequest{Action: bap.ActActionFill,
		Query: &bap.Query{Role: new("textbox"), Name: new("Name")}, Value: new("Ada")},
		bap.WithIdempotencyKey("a-fill"), bap.WithResponseMeta(&fillAgain)); err != nil ||
		fillAgain.Status != 200 || fillAgain.Header.Get("Idempotent-Replayed") != "true" || string(fillAgain.Body) != string(fillMeta.Body) {
		t.Fatalf("A's fill again with its key after the restart: %v %d %s, want the first answer %s", err, fillAgain.Status, fillAgain.Body, fillMeta.Body)
	}
	if again, err := a.CheckpointBrowserSession(ctx, oldSID, bap.CheckpointBrowserSessionRequest{}, bap.WithIdempotencyKey("a-chk")); err != nil ||
		again.Checkpoint.CheckpointId != chkID {
		t.Fatalf("A's checkpoint again with its key: %v %v", err, again)
	}
	if again, err := a.CreateTask(ctx, bap.CreateTaskRequest{Goal: "order as Ada, asking first", Policy: bap.Policy{
		AllowedOrigins: []string{shop.srv.URL},
		ApprovalRules:  &[]bap.ApprovalRule{{Effect: bap.ApprovalEffectFormSubmission}},
	}}, bap.WithIdempotencyKey("a-task")); err != nil || again.Task.TaskId != taskID {
		t.Fatalf("A's create_task again with its key: %v %v", err, again)
	}
	if shop.orders.Load() != 1 {
		t.Fatalf("a replay sent another order: %d", shop.orders.Load())
	}

	// The same evidence for both: A's get_task and list_task_events over HTTP equal B's over MCP,
	// and the task's receipts hold the approved click once, applied. The approved click's
	// navigation commits after the approval was answered (a CI run read the history in between):
	// both read it once it holds that navigation.
	committed := `"type":"navigation.committed"`
	waitfor.Until(t, 30*time.Second, "the approved click's navigation is in the history", func() (bool, string) {
		var m bap.ResponseMeta
		if _, err := a.ListTaskEvents(ctx, taskID, 0, 1000, bap.WithResponseMeta(&m)); err != nil {
			return false, err.Error()
		}
		return strings.Count(string(m.Body), committed) >= 3, fmt.Sprintf("%d navigations committed", strings.Count(string(m.Body), committed))
	})
	var taskA, eventsA bap.ResponseMeta
	if _, err := a.GetTask(ctx, taskID, bap.WithResponseMeta(&taskA)); err != nil {
		t.Fatalf("A get_task: %v", err)
	}
	taskB := call("get_task", map[string]any{"task_id": taskID})
	if !reflect.DeepEqual(asJSON(t, taskA.Body), asJSON(t, taskB.raw)) || field(taskB.sc, "task", "state") != "running" {
		t.Fatalf("get_task differs:\nA %s\nB %s", taskA.Body, taskB.raw)
	}
	if _, err := a.ListTaskEvents(ctx, taskID, 0, 1000, bap.WithResponseMeta(&eventsA)); err != nil {
		t.Fatalf("A list_task_events: %v", err)
	}
	eventsB := call("list_task_events", map[string]any{"task_id": taskID, "limit": 1000})
	if !reflect.DeepEqual(asJSON(t, eventsA.Body), asJSON(t, eventsB.raw)) {
		t.Fatalf("list_task_events differs:\nA %s\nB %s", eventsA.Body, eventsB.raw)
	}
	receipts := map[string]int{}
	var clickOutcome string
	clicks := 0
	for _, e := range eventsB.sc["events"].([]any) {
		ev := e.(map[string]any)
		d, _ := ev["data"].(map[string]any)
		if ev["type"] != "receipt.issued" {
			continue
		}
		receipts[fmt.Sprint(d["operation"], " ", d["outcome"])]++
		if d["receipt_id"] == clickReceipt {
			clickOutcome = fmt.Sprint(d["outcome"])
			clicks++
		}
	}
	// Two acts applied (A's fill, B's approved click), once each; one checkpoint, one resume.
	if clicks != 1 || clickOutcome != "applied" || receipts["act applied"] != 2 ||
		receipts["resume_task applied"] != 1 || receipts["checkpoint_browser_session applied"] != 1 {
		t.Fatalf("the task's receipts: click %q (%d), by operation and outcome %v", clickOutcome, clicks, receipts)
	}
	if m := rawBrowserIDs.FindString(string(taskA.Body) + string(eventsA.Body)); m != "" {
		t.Errorf("a raw browser identifier reached client A: %s", m)
	}
}
