package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP adapter tried as a new user would: `bap serve`, an MCP client pointed at /mcp, the
// tools listed, and a governed browser workflow (create a task, open a session, navigate,
// observe, act, close) — once with the official Go SDK client, once with the official
// TypeScript client, both at revision 2026-07-28. The browser part runs when `bap serve` has a
// browser; without one, create_browser_session answers 503 browser_unavailable and the test
// says so (skip) after checking everything before it.

// shop is the site the workflow works on: a form that leads to a thank-you page.
func shop(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/":
			fmt.Fprint(w, `<!doctype html><html><head><title>Shop</title></head><body><h1>Shop</h1>`+
				`<form action="/thanks" method="get"><label for="n">Your name</label> <input id="n" name="name" type="text">`+
				`<button type="submit">Order</button></form></body></html>`)
		case "/thanks":
			fmt.Fprintf(w, `<!doctype html><html><head><title>Thanks</title></head><body><h1>Thanks, %s</h1></body></html>`,
				html.EscapeString(r.URL.Query().Get("name")))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// rawBrowserIDs matches what must never reach an MCP client: CDP/BiDi identifiers (32 upper-case
// hex characters) and the protocol's field names for them.
var rawBrowserIDs = regexp.MustCompile(`\b[0-9A-F]{32}\b|"-?\d+\.\d+\.\d+"|"(targetId|frameId|loaderId|backendNodeId|browserContextId|sessionId)"`)

func TestMCPOfficialGoClientWorkflow(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	r := start(t, bin, dataDir(t))
	site := shop(t)
	ctx := context.Background()

	c := mcp.NewClient(&mcp.Implementation{Name: "bap-go-e2e", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + r.listen + "/mcp"},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the Go SDK client negotiated %q (it falls back to the legacy handshake silently)", v)
	}
	n := 0
	for _, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 21 {
		// The local agent (TCP) holds every scope but bap:approvals.resolve: resolve_approval is
		// not offered (only the operator, on the Unix socket, resolves approvals).
		t.Fatalf("%d tools, want the 19 of the catalog the local agent may call", n)
	}

	var transcript strings.Builder
	keyN := 0
	call := func(tool string, args map[string]any) (map[string]any, bool) {
		t.Helper()
		if _, ok := args["idempotency_key"]; ok {
			keyN++
			args["idempotency_key"] = fmt.Sprintf("go-e2e-%d", keyN)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		raw, _ := json.Marshal(res)
		transcript.Write(raw)
		var sc map[string]any
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &sc)
		return sc, res.IsError
	}
	defer func() {
		if m := rawBrowserIDs.FindString(transcript.String()); m != "" {
			t.Errorf("a raw browser identifier reached the MCP client: %s", m)
		}
	}()

	created, isErr := call("create_task", map[string]any{
		"goal":            "Order as Ada",
		"policy":          map[string]any{"allowed_origins": []string{site.URL}},
		"idempotency_key": "",
	})
	if isErr {
		t.Fatalf("create_task: %v", created)
	}
	taskID := created["task"].(map[string]any)["task_id"].(string)
	// The tool takes the engine as the API does (issue #19): one this node does not run is the
	// documented problem, naming it.
	if ff, isErr := call("create_browser_session", map[string]any{"task_id": taskID, "engine": "firefox", "idempotency_key": ""}); !isErr ||
		ff["code"] != "browser_unavailable" || !strings.Contains(fmt.Sprint(ff["detail"]), "firefox") {
		t.Fatalf("create_browser_session {engine: firefox} on a chromium node: %v (isError %v)", ff, isErr)
	}
	sess, isErr := call("create_browser_session", map[string]any{"task_id": taskID, "idempotency_key": ""})
	if isErr {
		if sess["code"] == "browser_unavailable" {
			t.Fatalf("bap serve has no browser (503 browser_unavailable; install chromium (scripts/install-deps.sh): a required test never skips)")
		}
		t.Fatalf("create_browser_session: %v", sess)
	}
	sessionID := sess["session"].(map[string]any)["session_id"].(string)
	if nav, isErr := call("navigate", map[string]any{"session_id": sessionID, "url": site.URL + "/", "idempotency_key": ""}); isErr {
		t.Fatalf("navigate: %v", nav)
	}
	page, isErr := call("observe", map[string]any{"session_id": sessionID})
	if isErr {
		t.Fatalf("observe: %v", page)
	}
	box := findNode(page["nodes"], "textbox", "name")
	button := findNode(page["nodes"], "button", "order")
	if box == "" || button == "" {
		t.Fatalf("observe found no textbox or button: %v", page)
	}
	if res, isErr := call("act", map[string]any{"session_id": sessionID, "action": "fill", "node_id": box, "value": "Ada", "idempotency_key": ""}); isErr {
		t.Fatalf("fill: %v", res)
	}
	click, isErr := call("act", map[string]any{"session_id": sessionID, "action": "click", "node_id": button, "idempotency_key": ""})
	if isErr || click["navigated"] != true {
		t.Fatalf("click: %v", click)
	}
	if after, _ := call("observe", map[string]any{"session_id": sessionID}); !strings.Contains(fmt.Sprint(after["url"]), "/thanks") {
		t.Fatalf("after the click: %v", after)
	}
	text, isErr := call("extract", map[string]any{"session_id": sessionID, "kind": "text"})
	if isErr || !strings.Contains(fmt.Sprint(text["data"]), "Thanks, Ada") {
		t.Fatalf("extract: %v", text)
	}
	closed, isErr := call("close_task", map[string]any{"task_id": taskID, "idempotency_key": ""})
	if isErr || closed["task"].(map[string]any)["state"] != "succeeded" {
		t.Fatalf("close_task: %v", closed)
	}
	// Finished is not checked: without a postcondition the result is unverified, and its
	// manifest re-verifies through the MCP verify_artifact tool (issue #23 item 5).
	result, _ := closed["task"].(map[string]any)["result"].(map[string]any)
	verification, _ := result["verification"].(map[string]any)
	integrity, _ := result["integrity"].(map[string]any)
	if verification["state"] != "unverified" || !strings.Contains(fmt.Sprint(verification["reason"]), "no postcondition") ||
		integrity["algorithm"] != "sha256" || len(fmt.Sprint(integrity["digest"])) != 64 {
		t.Fatalf("close_task's result through MCP: %v", result)
	}
	manifest, isErr := call("verify_artifact", map[string]any{"artifact_id": integrity["manifest_artifact_id"]})
	if isErr || manifest["valid"] != true || manifest["sha256"] != integrity["digest"] {
		t.Fatalf("verify_artifact on the result's manifest through MCP: %v", manifest)
	}
}

// findNode returns the node_id of the first node (depth first) with role whose name contains
// name (case-insensitive).
func findNode(nodes any, role, name string) string {
	list, _ := nodes.([]any)
	for _, n := range list {
		m, _ := n.(map[string]any)
		if m["role"] == role && strings.Contains(strings.ToLower(fmt.Sprint(m["name"])), name) {
			id, _ := m["node_id"].(string)
			return id
		}
		if id := findNode(m["children"], role, name); id != "" {
			return id
		}
	}
	return ""
}

func TestMCPOfficialTypeScriptClientWorkflow(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(root, "tools/node_modules/node/bin/node")
	lib := filepath.Join(root, "tools/node_modules/@modelcontextprotocol/client/dist/index.mjs")
	for _, p := range []string{node, lib} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s missing: `make test` installs tools/ (npm ci --prefix tools)", p)
		}
	}
	bin := buildBinary(t)
	r := start(t, bin, dataDir(t))
	site := shop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/mcp-workflow.mjs")
	cmd.Env = append(os.Environ(), "MCP_CLIENT="+lib, "MCP_URL=http://"+r.listen+"/mcp", "SITE_URL="+site.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the TypeScript client: %v\n%s", err, out)
	}
	if m := rawBrowserIDs.FindString(string(out)); m != "" {
		t.Errorf("a raw browser identifier reached the MCP client: %s", m)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var last struct {
		Summary struct {
			Era, Version, Outcome, State, URL, Text string
			Tools                                   int
			Navigated                               bool
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("no summary: %v\n%s", err, out)
	}
	s := last.Summary
	if s.Era != "modern" || s.Version != "2026-07-28" || s.Tools != 21 { // the local agent: all but resolve_approval
		t.Fatalf("the TypeScript client connected %+v", s)
	}
	if s.Outcome == "browser_unavailable" {
		t.Fatalf("bap serve has no browser (503 browser_unavailable; install chromium (scripts/install-deps.sh): a required test never skips)")
	}
	if s.Outcome != "ok" || !s.Navigated || !strings.Contains(s.URL, "/thanks") || !strings.Contains(s.Text, "Thanks, Ada") || s.State != "succeeded" {
		t.Fatalf("workflow: %+v\n%s", s, out)
	}
}

// TestMCPRemoteProfile: /mcp behind OAuth — 401 with the RFC 9728 challenge without a token, the
// tools a token's scopes allow, 403 insufficient_scope (with the scope to ask for) for the others.
func TestMCPRemoteProfile(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	_, base := startRemote(t, bin, dir)
	reader := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "reader", "--scopes", "bap:tasks.read")
	writer := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "writer", "--scopes", "bap:tasks.read bap:tasks.write")

	post := func(token, method string, params map[string]any) (*http.Response, map[string]any) {
		t.Helper()
		params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": map[string]any{}}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
		req, _ := http.NewRequestWithContext(context.Background(), "POST", base+"/mcp", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		if name, ok := params["name"].(string); ok {
			req.Header.Set("Mcp-Name", name)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var raw strings.Builder
		_, _ = io.Copy(&raw, resp.Body)
		text := raw.String()
		if i := strings.LastIndex(text, "data: "); strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && i >= 0 {
			text = strings.TrimSpace(text[i+len("data: "):])
		}
		var m map[string]any
		_ = json.Unmarshal([]byte(text), &m)
		return resp, m
	}
	resp, _ := post("", "tools/list", map[string]any{})
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Fatalf("no token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp, _ = post("not-a-token", "tools/list", map[string]any{})
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("bad token: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	readTok := accessToken(t, base, reader)
	resp, list := post(readTok, "tools/list", map[string]any{})
	tools, _ := list["result"].(map[string]any)["tools"].([]any)
	if resp.StatusCode != 200 || len(tools) != 4 { // get_task, get_task_audit, get_task_bundle (its call needs bap:artifacts.read too), list_task_events
		t.Fatalf("reader's tools: %d %v", resp.StatusCode, list)
	}
	resp, body := post(readTok, "tools/call", map[string]any{"name": "create_task", "arguments": map[string]any{}})
	if resp.StatusCode != 403 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `scope="bap:tasks.write"`) || body["code"] != "insufficient_scope" {
		t.Fatalf("reader calling create_task: %d %q %v", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	writeTok := accessToken(t, base, writer)
	resp, body = post(writeTok, "tools/call", map[string]any{"name": "create_task", "arguments": map[string]any{
		"goal": "remote", "policy": map[string]any{"allowed_origins": []string{"https://shop.example.com"}}, "idempotency_key": "remote-1"}})
	res, _ := body["result"].(map[string]any)
	if resp.StatusCode != 200 || res == nil || res["isError"] == true {
		t.Fatalf("writer calling create_task: %d %v", resp.StatusCode, body)
	}
	task := res["structuredContent"].(map[string]any)["task"].(map[string]any)
	if !strings.HasPrefix(task["task_id"].(string), "tsk_") {
		t.Fatalf("create_task: %v", res)
	}
}
