package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/waitfor"
)

// Out-of-band approvers against the real binary (issue #24 item 4): in the local profile the agent
// on TCP — /mcp included — cannot resolve, the operator does with `bap approvals` over the Unix
// socket; in the remote profile the requesting client cannot, and `bap client create` grants
// bap:approvals.resolve only when asked.

// approvalsCLI runs `bap approvals ARGS… --data-dir dir` and returns its stdout, stderr and
// whether it succeeded.
func approvalsCLI(t *testing.T, bin, dir string, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	cmd := exec.Command(bin, append(append([]string{"approvals"}, args...), "--data-dir", dir)...)
	cmd.Env = append(os.Environ(), "BAP_DATABASE_URL=")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) {
			t.Fatalf("bap approvals %v: %v", args, err)
		}
	}
	return out.String(), errb.String(), err == nil
}

// approvalLines decodes the JSON lines of `bap approvals list`.
func approvalLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var as []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var a map[string]any
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("bap approvals list printed %q", line)
		}
		as = append(as, a)
	}
	return as
}

// mcpPost sends one JSON-RPC request to an /mcp endpoint at revision 2026-07-28.
func mcpPost(t *testing.T, endpoint, token, method string, params map[string]any) (*http.Response, map[string]any) {
	t.Helper()
	return mcpPostCaps(t, endpoint, token, method, params, map[string]any{})
}

// mcpTasksCaps declares the Tasks extension in a request's client capabilities.
var mcpTasksCaps = map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}

// mcpPostCaps is mcpPost with the request's client capabilities.
func mcpPostCaps(t *testing.T, endpoint, token, method string, params, caps map[string]any) (*http.Response, map[string]any) {
	t.Helper()
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequestWithContext(context.Background(), "POST", endpoint, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	if id, ok := params["taskId"].(string); ok {
		req.Header.Set("Mcp-Name", id)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	text := string(raw)
	if i := strings.LastIndex(text, "data: "); strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && i >= 0 {
		text = strings.TrimSpace(text[i+len("data: "):])
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(text), &m)
	return resp, m
}

// heldOrder fills the form of the site at siteURL on session sp (as the agent, over TCP) and
// clicks Send, which the task's form_submission rule holds; it returns the held approval.
func heldOrder(t *testing.T, listen, siteURL, sp, key string) map[string]any {
	t.Helper()
	mustAPI(t, 200, listen, "POST", sp+"/navigate", key+"-nav", `{"url":"`+siteURL+`/form"}`)
	mustAPI(t, 200, listen, "POST", sp+"/act", key+"-fill", `{"action":"fill","query":{"role":"textbox","name":"Name"},"value":"Ada"}`)
	return mustAPI(t, 202, listen, "POST", sp+"/act", key+"-send", `{"action":"click","query":{"role":"button","name":"Send"}}`)
}

func TestLocalApproversOverTheSocket(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	r := start(t, bin, dir)
	site := newMultiSite(t)
	rules := func(extra string) string {
		return `{"goal":"order, asking first","policy":{"allowed_origins":["` + site.srv.URL + `"],"approval_rules":[{"effect":"form_submission"` + extra + `}]}}`
	}
	task := mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "ap-task", rules(""))
	taskID := field(task, "task", "task_id")
	status, m, raw := api(r.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "ap-session", `{}`)
	if status == 503 {
		t.Fatalf("bap serve has no browser (install chromium (scripts/install-deps.sh): a required test never skips): %v", m)
	}
	if status != 201 {
		t.Fatalf("create_browser_session: %d %s", status, raw)
	}
	sp := "/bap/v1/browser-sessions/" + field(m, "session", "session_id")

	// 1. Held: the agent's own resolve is refused on TCP and on /mcp; nothing is sent.
	held := heldOrder(t, r.listen, site.srv.URL, sp, "ap-1")
	apr := field(held, "approval", "approval_id")
	if field(held, "approval", "requested_by") != "agent:local" || field(held, "approval", "expires_at") == "" || site.orders.Load() != 0 {
		t.Fatalf("held: %v (orders %d)", held, site.orders.Load())
	}
	if st, body, raw := api(r.listen, "POST", "/bap/v1/approvals/"+apr+"/resolve", "ap-self", `{"decision":"approve"}`); st != 403 || body["code"] != "insufficient_scope" {
		t.Fatalf("the agent's resolve over TCP: %d %s", st, raw)
	}
	resp, list := mcpPost(t, "http://"+r.listen+"/mcp", "", "tools/list", map[string]any{})
	tools, _ := list["result"].(map[string]any)["tools"].([]any)
	for _, tl := range tools {
		if tl.(map[string]any)["name"] == "resolve_approval" {
			t.Fatal("tools/list offers resolve_approval to the local agent")
		}
	}
	if resp.StatusCode != 200 || len(tools) != 21 {
		t.Fatalf("the agent's tools over /mcp: %d, %d tools", resp.StatusCode, len(tools))
	}
	resp, body := mcpPost(t, "http://"+r.listen+"/mcp", "", "tools/call", map[string]any{"name": "resolve_approval",
		"arguments": map[string]any{"approval_id": apr, "decision": "approve", "idempotency_key": "ap-mcp-self"}})
	if resp.StatusCode != 403 || body["code"] != "insufficient_scope" {
		t.Fatalf("the agent's resolve over /mcp: %d %v", resp.StatusCode, body)
	}
	if site.orders.Load() != 0 {
		t.Fatalf("a refused resolve sent the order: %d", site.orders.Load())
	}

	// 2. The operator's queue (the socket) holds it; approving runs the held click exactly once.
	out, errOut, ok := approvalsCLI(t, bin, dir, "list")
	as := approvalLines(t, out)
	if !ok || len(as) != 1 || as[0]["approval_id"] != apr || as[0]["state"] != "pending" {
		t.Fatalf("bap approvals list: %v %q %s", ok, out, errOut)
	}
	out, errOut, ok = approvalsCLI(t, bin, dir, "approve", apr, "--reason", "checked the order")
	var res map[string]any
	_ = json.Unmarshal([]byte(out), &res)
	if !ok || field(res, "approval", "state") != "approved" || field(res, "approval", "resolved_by") != "operator:local" ||
		field(res, "approval", "resolved_via") != "socket" || field(res, "approval", "resolved_workload") != "local:socket" ||
		field(res, "action_receipt", "outcome") != "applied" || site.orders.Load() != 1 {
		t.Fatalf("bap approvals approve: %v %q %s (orders %d)", ok, out, errOut, site.orders.Load())
	}
	if _, errOut, ok := approvalsCLI(t, bin, dir, "approve", apr); ok || !strings.Contains(errOut, "approval_not_pending") || site.orders.Load() != 1 {
		t.Fatalf("approving twice: %v %s (orders %d)", ok, errOut, site.orders.Load())
	}

	// 3. Deny: never sent.
	held = heldOrder(t, r.listen, site.srv.URL, sp, "ap-2")
	apr2 := field(held, "approval", "approval_id")
	out, errOut, ok = approvalsCLI(t, bin, dir, "deny", apr2, "--reason", "not this one")
	res = nil
	_ = json.Unmarshal([]byte(out), &res)
	if !ok || field(res, "approval", "state") != "denied" || res["action_receipt"] != nil || site.orders.Load() != 1 {
		t.Fatalf("bap approvals deny: %v %q %s (orders %d)", ok, out, errOut, site.orders.Load())
	}

	// 4. Expiry, with nobody calling: the server's upkeep expires it; it stays expired and never runs.
	task = mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "ap-ttl-task", rules(`,"ttl":"PT2S"`))
	ttlTask := field(task, "task", "task_id")
	s2 := mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks/"+ttlTask+"/browser-sessions", "ap-ttl-session", `{}`)
	sp2 := "/bap/v1/browser-sessions/" + field(s2, "session", "session_id")
	held = heldOrder(t, r.listen, site.srv.URL, sp2, "ap-3")
	apr3 := field(held, "approval", "approval_id")
	waitfor.True(t, 30*time.Second, "the unresolved approval expires", func() bool {
		evs := mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+ttlTask+"/events?limit=1000", "", "")
		for _, e := range evs["events"].([]any) {
			ev := e.(map[string]any)
			if d, _ := ev["data"].(map[string]any); ev["type"] == "approval.resolved" && d["approval_id"] == apr3 && d["state"] == "expired" {
				return true
			}
		}
		return false
	})
	out, _, _ = approvalsCLI(t, bin, dir, "list", "--state", "expired")
	if as := approvalLines(t, out); len(as) != 1 || as[0]["approval_id"] != apr3 {
		t.Fatalf("expired approvals: %q", out)
	}
	if _, errOut, ok := approvalsCLI(t, bin, dir, "approve", apr3); ok || !strings.Contains(errOut, "approval_not_pending") {
		t.Fatalf("approving an expired approval: %v %s", ok, errOut)
	}
	if st := field(mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+ttlTask, "", ""), "task", "state"); st != "running" || site.orders.Load() != 1 {
		t.Fatalf("after the expiry: task %s, orders %d", st, site.orders.Load())
	}
	if _, errOut, ok := approvalsCLI(t, bin, dir, "approve", "apr_nosuchapproval", "--socket", dir+"/nosuch.sock"); ok || !strings.Contains(errOut, "no BAP server answers on") {
		t.Fatalf("no server on the socket: %v %s", ok, errOut)
	}
}

// In the remote profile the client that requested an approval cannot resolve it even with
// bap:approvals.resolve (403 approver_not_permitted); a client made by `bap client create` without
// --scopes gets every capability but bap:approvals.resolve, so it cannot resolve at all (403
// insufficient_scope); a reviewer that was given the scope by name resolves.
func TestRemoteApproversAreSeparate(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	_, base := startRemote(t, bin, dir)
	agent := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "agent") // no --scopes
	both := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "agent with both", "--scopes",
		"bap:tasks.read bap:tasks.write bap:approvals.request bap:approvals.resolve")
	reviewer := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "reviewer", "--scopes", "bap:approvals.resolve")
	agentTok, bothTok, reviewTok := accessToken(t, base, agent), accessToken(t, base, both), accessToken(t, base, reviewer)

	request := func(tok string) string {
		t.Helper()
		st, task, _ := call(t, "POST", base+"/bap/v1/tasks", tok, remoteTask)
		if st != 201 {
			t.Fatalf("create_task: %d %v", st, task)
		}
		st, a, _ := call(t, "POST", base+"/bap/v1/tasks/"+field(task, "task", "task_id")+"/approvals", tok, `{"reason":"pay"}`)
		if st != 201 {
			t.Fatalf("request_approval: %d %v", st, a)
		}
		return field(a, "approval", "approval_id")
	}
	// The default client: every capability but resolving.
	apr := request(agentTok)
	if st, body, _ := call(t, "POST", base+"/bap/v1/approvals/"+apr+"/resolve", agentTok, `{"decision":"approve"}`); st != 403 || body["code"] != "insufficient_scope" {
		t.Fatalf("a client created without --scopes resolving: %d %v", st, body)
	}
	if st, body, _ := call(t, "GET", base+"/bap/v1/approvals", agentTok, ""); st != 403 || body["code"] != "insufficient_scope" {
		t.Fatalf("a client created without --scopes listing approvals: %d %v", st, body)
	}
	// A client given both: never its own.
	apr2 := request(bothTok)
	st, body, _ := call(t, "POST", base+"/bap/v1/approvals/"+apr2+"/resolve", bothTok, `{"decision":"approve"}`)
	if st != 403 || body["code"] != "approver_not_permitted" || field(body, "receipt", "outcome") != "rejected" {
		t.Fatalf("the requesting client resolving: %d %v", st, body)
	}
	resp, mb := mcpPost(t, base+"/mcp", bothTok, "tools/call", map[string]any{"name": "resolve_approval",
		"arguments": map[string]any{"approval_id": apr2, "decision": "deny", "idempotency_key": "remote-mcp-self"}})
	res, _ := mb["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if resp.StatusCode != 200 || res["isError"] != true || sc["code"] != "approver_not_permitted" {
		t.Fatalf("the requesting client resolving over /mcp: %d %v", resp.StatusCode, mb)
	}
	// The reviewer: both requests, the queue first.
	st, queue, _ := call(t, "GET", base+"/bap/v1/approvals", reviewTok, "")
	if l, _ := queue["approvals"].([]any); st != 200 || len(l) != 2 {
		t.Fatalf("the reviewer's queue: %d %v", st, queue)
	}
	for _, id := range []string{apr, apr2} {
		st, body, _ := call(t, "POST", base+"/bap/v1/approvals/"+id+"/resolve", reviewTok, `{"decision":"approve"}`)
		if st != 200 || field(body, "approval", "resolved_by") != "client:"+reviewer["client_id"].(string) || field(body, "approval", "resolved_via") != "api" ||
			field(body, "approval", "resolved_workload") != reviewer["client_id"] {
			t.Fatalf("the reviewer resolving %s: %d %v", id, st, body)
		}
	}
}

// mcpElicitCaps declares the Tasks extension and elicitation: the client can show its person a
// held act.
var mcpElicitCaps = map[string]any{"elicitation": map[string]any{}, "extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}

// mcpResult is the result of a JSON-RPC answer of mcpPostCaps, failing t on anything else.
func mcpResult(t *testing.T, method string, resp *http.Response, m map[string]any) map[string]any {
	t.Helper()
	res, ok := m["result"].(map[string]any)
	if resp.StatusCode != http.StatusOK || !ok {
		t.Fatalf("%s: %d %v", method, resp.StatusCode, m)
	}
	return res
}

// Issue #24: answering through MCP elicitation is opt-in per rule (channel "elicitation") and is
// recorded as such. Against the real `bap serve`, an MCP client on /mcp that declared elicitation
// and the Tasks extension clicks Send, which a form_submission rule holds inside Chromium. With
// channel elicitation the act's MCP task asks the client (nothing reaches the site meanwhile);
// accept with approve sends the order exactly once, decline never, and the decision is recorded
// resolved_via elicitation by the agent that requested it. Under a rule without the channel the
// client is never asked — its sync window ends with the task still working — and only the
// operator's decision on the socket (resolved_via socket) sends the order.
func TestElicitationAnswersAHeldActOverMCP(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	r := start(t, bin, dir)
	op := operatorAPI(r.socket)
	endpoint := "http://" + r.listen + "/mcp"
	aprID := regexp.MustCompile(`apr_[A-Za-z0-9_-]+`)
	for _, tt := range []struct {
		name    string
		channel string         // the rule's channel ("": the default, approver)
		answer  map[string]any // the client's answer to the elicitation; nil: it must not be asked
		state   string         // the approval's state in the end
		orders  int64          // what reached the site in the end
		via     string         // the decision's resolved_via
	}{
		{"elicitation accepted with approve", "elicitation", map[string]any{"action": "accept", "content": map[string]any{"decision": "approve"}}, "approved", 1, "elicitation"},
		{"elicitation declined", "elicitation", map[string]any{"action": "decline"}, "denied", 0, "elicitation"},
		{"a rule without the channel asks nobody", "", nil, "approved", 1, "socket"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			site := newMultiSite(t)
			key := strings.ReplaceAll(tt.name, " ", "-")
			channel := ""
			if tt.channel != "" {
				channel = `,"channel":"` + tt.channel + `"`
			}
			task := mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", key+"-task", `{"goal":"order, asking first","policy":{"allowed_origins":["`+
				site.srv.URL+`"],"approval_rules":[{"effect":"form_submission"`+channel+`}]}}`)
			sess := mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks/"+field(task, "task", "task_id")+"/browser-sessions", key+"-session", `{}`)
			sessionID := field(sess, "session", "session_id")
			mustAPI(t, 200, r.listen, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", key+"-nav", `{"url":"`+site.srv.URL+`/form"}`)

			resp, m := mcpPostCaps(t, endpoint, "", "tools/call", map[string]any{"name": "act", "arguments": map[string]any{
				"session_id": sessionID, "action": "click", "query": map[string]any{"role": "button", "name": "Send"},
				"idempotency_key": key + "-click"}}, mcpElicitCaps)
			call := mcpResult(t, "act", resp, m)
			mtID, _ := call["taskId"].(string)
			if call["resultType"] != "task" || mtID == "" {
				t.Fatalf("the held act did not become an MCP task: %v", call)
			}
			taskGet := func() map[string]any {
				t.Helper()
				resp, m := mcpPostCaps(t, endpoint, "", "tasks/get", map[string]any{"taskId": mtID}, mcpElicitCaps)
				return mcpResult(t, "tasks/get", resp, m)
			}
			var st map[string]any
			if tt.answer != nil {
				waitfor.Until(t, 30*time.Second, "the held act's MCP task asks its client", func() (bool, string) {
					st = taskGet()
					return st["status"] != "working", fmt.Sprint(st)
				})
				reqs, _ := st["inputRequests"].(map[string]any)
				if st["status"] != "input_required" || len(reqs) != 1 {
					t.Fatalf("the held act asked nothing: %v", st)
				}
				if n := site.orders.Load(); n != 0 {
					t.Fatalf("%d orders reached the site while the client was asked", n)
				}
				for k, v := range reqs {
					raw, _ := json.Marshal(v)
					if !strings.Contains(string(raw), `"elicitation/create"`) || aprID.FindString(string(raw)) == "" {
						t.Fatalf("the input request is no elicitation naming the approval: %s", raw)
					}
					resp, m := mcpPostCaps(t, endpoint, "", "tasks/update", map[string]any{"taskId": mtID,
						"inputResponses": map[string]any{k: tt.answer}}, mcpElicitCaps)
					mcpResult(t, "tasks/update", resp, m)
				}
			} else {
				// The act's call waited out the server's sync window, which an elicitation would
				// have ended at once (input required): the task was still working when it ended.
				st = taskGet()
				apr := aprID.FindString(fmt.Sprint(st["statusMessage"]))
				if call["status"] != "working" || st["status"] != "working" || st["inputRequests"] != nil || apr == "" {
					t.Fatalf("the held act under a rule without the elicitation channel: call %v, now %v", call, st)
				}
				if n := site.orders.Load(); n != 0 {
					t.Fatalf("%d orders reached the site while held", n)
				}
				if status, _, raw := op("POST", "/bap/v1/approvals/"+apr+"/resolve", key+"-operator", `{"decision":"approve"}`); status != 200 {
					t.Fatalf("the operator's approve: %d %s", status, raw)
				}
			}

			waitfor.Until(t, 30*time.Second, "the held act's MCP task ends", func() (bool, string) {
				st = taskGet()
				return st["status"] != "working" && st["status"] != "input_required", fmt.Sprint(st)
			})
			result, _ := st["result"].(map[string]any)
			sc, _ := result["structuredContent"].(map[string]any)
			apr := field(sc, "approval", "approval_id")
			if st["status"] != "completed" || field(sc, "approval", "state") != tt.state {
				t.Fatalf("the MCP task of the held act: %v, want its approval %s", st, tt.state)
			}
			if n := site.orders.Load(); n != tt.orders {
				t.Fatalf("%d orders reached the site, want %d", n, tt.orders)
			}
			// The decision as the server recorded it, read back by the operator.
			_, list, raw := op("GET", "/bap/v1/approvals?state="+tt.state, "", "")
			var rec map[string]any
			as, _ := list["approvals"].([]any)
			for _, a := range as {
				if a, _ := a.(map[string]any); a["approval_id"] == apr {
					rec = a
				}
			}
			wantBy := map[string]string{"elicitation": "agent:local", "socket": "operator:local"}[tt.via]
			wantChannel := map[string]string{"elicitation": "elicitation", "": "approver"}[tt.channel]
			if rec == nil || rec["resolved_via"] != tt.via || rec["resolved_by"] != wantBy || rec["requested_by"] != "agent:local" || rec["channel"] != wantChannel {
				t.Fatalf("the recorded decision of %s: %s; want resolved_via %s by %s, channel %s", apr, raw, tt.via, wantBy, wantChannel)
			}
		})
	}
}
