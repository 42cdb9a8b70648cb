package mcpserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestFailClosed sends every kind of request the endpoint must refuse and checks the status and
// JSON-RPC code the 2026-07-28 text prescribes, and that the refused request did not reach BAP.
func TestFailClosed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	metaOK := meta(noCaps)
	listBody := func(params map[string]any) []byte {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": params})
		return body
	}
	std := func(method string, extra ...string) http.Header {
		h := http.Header{}
		h.Set("Content-Type", "application/json")
		h.Set("Accept", "application/json, text/event-stream")
		h.Set("MCP-Protocol-Version", "2026-07-28")
		h.Set("Mcp-Method", method)
		h.Set("X-Test-Tenant", "acme")
		for i := 0; i+1 < len(extra); i += 2 {
			if extra[i+1] == "" {
				h.Del(extra[i])
			} else {
				h.Set(extra[i], extra[i+1])
			}
		}
		return h
	}
	callBody := func(name string) []byte {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "tools/call",
			"params": map[string]any{"name": name, "arguments": map[string]any{"task_id": "tsk_x"}, "_meta": metaOK}})
		return body
	}
	b64 := func(s string) string { return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?=" }
	cases := []struct {
		name   string
		header http.Header
		body   []byte
		status int
		code   int64 // 0: not a JSON-RPC error body
		id     bool  // the error echoes the request id
	}{
		{"no MCP-Protocol-Version", std("tools/list", "MCP-Protocol-Version", ""), listBody(map[string]any{"_meta": metaOK}), 400, -32020, true},
		{"legacy initialize without headers", std("initialize", "MCP-Protocol-Version", "", "Mcp-Method", ""),
			[]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`), 400, -32020, true},
		{"older version", std("tools/list", "MCP-Protocol-Version", "2025-11-25"), listBody(map[string]any{"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion": "2025-11-25", "io.modelcontextprotocol/clientCapabilities": map[string]any{}}}), 400, -32022, true},
		{"unknown version", std("tools/list", "MCP-Protocol-Version", "v999"), listBody(map[string]any{"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion": "v999", "io.modelcontextprotocol/clientCapabilities": map[string]any{}}}), 400, -32022, true},
		{"header and _meta disagree", std("tools/list"), listBody(map[string]any{"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion": "v999", "io.modelcontextprotocol/clientCapabilities": map[string]any{}}}), 400, -32020, true},
		{"no Mcp-Method", std("tools/list", "Mcp-Method", ""), listBody(map[string]any{"_meta": metaOK}), 400, -32020, true},
		{"Mcp-Method mismatch", std("prompts/list"), listBody(map[string]any{"_meta": metaOK}), 400, -32020, true},
		{"Mcp-Method case differs", std("TOOLS/LIST"), listBody(map[string]any{"_meta": metaOK}), 400, -32020, true},
		{"no Mcp-Name on tools/call", std("tools/call"), callBody("get_task"), 400, -32020, true},
		{"Mcp-Name mismatch", std("tools/call", "Mcp-Name", "create_task"), callBody("get_task"), 400, -32020, true},
		{"Mcp-Name Base64 of another name", std("tools/call", "Mcp-Name", b64("create_task")), callBody("get_task"), 400, -32020, true},
		{"Mcp-Name invalid Base64", std("tools/call", "Mcp-Name", "=?base64?Z2V0X3Rhc2s?="), callBody("get_task"), 400, -32020, true},
		{"no _meta", std("tools/list"), listBody(map[string]any{}), 400, -32602, true},
		{"_meta without clientCapabilities", std("tools/list"), listBody(map[string]any{"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}), 400, -32602, true},
		{"batch", std("tools/list"), []byte(`[{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}]`), 400, -32600, false},
		{"malformed JSON", std("tools/list"), []byte(`{"jsonrpc":"2.0","id":1,`), 400, -32700, false},
		{"a response", std("tools/list"), []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`), 400, -32600, true},
		{"not JSON-RPC 2.0", std("tools/list"), []byte(`{"jsonrpc":"1.0","id":1,"method":"tools/list"}`), 400, -32600, true},
		{"duplicate member", std("tools/call", "Mcp-Name", "get_task"),
			[]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_task","name":"create_task"}}`), 400, -32600, true},
		{"oversized body", std("tools/list"), listBody(map[string]any{"_meta": metaOK, "pad": strings.Repeat("x", 200<<10)}), 413, -32600, false},
		{"unknown tool", std("tools/call", "Mcp-Name", "shell_exec"), callBody("shell_exec"), 400, -32602, true},
		{"initialize (removed)", std("initialize"), []byte(`{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"_meta":` + string(mustJSON(t, metaOK)) + `}}`), 404, -32601, true},
		{"ping (removed)", std("ping"), []byte(`{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":` + string(mustJSON(t, metaOK)) + `}}`), 404, -32601, true},
		{"unknown method", std("browser/evaluate"), []byte(`{"jsonrpc":"2.0","id":3,"method":"browser/evaluate","params":{"_meta":` + string(mustJSON(t, metaOK)) + `}}`), 404, -32601, true},
		{"tasks/get Mcp-Name mismatch", std("tasks/get", "Mcp-Name", "mtk_other"),
			[]byte(`{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"mtk_mine","_meta":` + string(mustJSON(t, meta(taskCaps))) + `}}`), 400, -32020, true},
		{"tasks/get without Mcp-Name", std("tasks/get"),
			[]byte(`{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"mtk_mine","_meta":` + string(mustJSON(t, meta(taskCaps))) + `}}`), 400, -32020, true},
		{"wrong Content-Type", std("tools/list", "Content-Type", "text/plain"), listBody(map[string]any{"_meta": metaOK}), 415, 0, false},
		{"no Content-Type", std("tools/list", "Content-Type", ""), listBody(map[string]any{"_meta": metaOK}), 415, 0, false},
		{"form Content-Type (a cross-site simple request)", std("tools/list", "Content-Type", "application/x-www-form-urlencoded"), listBody(map[string]any{"_meta": metaOK}), 415, 0, false},
		{"cross-origin browser request", std("tools/list", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"), listBody(map[string]any{"_meta": metaOK}), 403, -32600, false},
		{"foreign Origin without fetch metadata", std("tools/list", "Origin", "http://evil.example"), listBody(map[string]any{"_meta": metaOK}), 403, -32600, false},
		{"unauthenticated", std("tools/list", "X-Test-Tenant", ""), listBody(map[string]any{"_meta": metaOK}), 401, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := b.apiCalls.Load()
			r := b.post(t, "/mcp", c.header, c.body)
			if r.status != c.status {
				t.Fatalf("HTTP %d, want %d: %s", r.status, c.status, r.raw)
			}
			if c.code != 0 && r.code() != c.code {
				t.Fatalf("code %d, want %d: %s", r.code(), c.code, r.raw)
			}
			if c.id && (len(r.msg.ID) == 0 || string(r.msg.ID) == "null") {
				t.Errorf("the error does not echo the request id: %s", r.raw)
			}
			if c.code == -32022 {
				var data struct {
					Supported []string `json:"supported"`
					Requested string   `json:"requested"`
				}
				_ = json.Unmarshal(r.msg.Error.Data, &data)
				if len(data.Supported) != 1 || data.Supported[0] != "2026-07-28" || data.Requested == "" {
					t.Errorf("-32022 data: %s", r.msg.Error.Data)
				}
			}
			if b.apiCalls.Load() != before {
				t.Errorf("a refused request reached the BAP API")
			}
		})
	}

	// Methods other than POST: 405 with Allow.
	for _, m := range []string{http.MethodGet, http.MethodDelete, http.MethodPut} {
		req, _ := http.NewRequestWithContext(context.Background(), m, b.srv.URL+"/mcp", nil)
		req.Header.Set("X-Test-Tenant", "acme")
		req.Header.Set("Accept", "text/event-stream")
		r := b.send(t, req)
		if r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "POST" {
			t.Errorf("%s: %d Allow %q", m, r.status, r.header.Get("Allow"))
		}
	}
	// Unauthenticated: the challenge points at the resource metadata (RFC 9728).
	r := b.post(t, "/mcp", std("tools/list", "X-Test-Tenant", ""), listBody(map[string]any{"_meta": metaOK}))
	if !strings.Contains(r.header.Get("WWW-Authenticate"), "resource_metadata=") || !strings.Contains(string(r.raw), `"unauthenticated"`) {
		t.Errorf("401: %q %s", r.header.Get("WWW-Authenticate"), r.raw)
	}
	// A notification: acknowledged, nothing else.
	r = b.post(t, "/mcp", std("notifications/cancelled"), []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`))
	if r.status != http.StatusAccepted || len(r.raw) != 0 {
		t.Errorf("notification: %d %s", r.status, r.raw)
	}
}

// TestHeadersThatMustBeAccepted are the header forms the text requires a server to accept.
func TestHeadersThatMustBeAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	taskID := field(t, b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k1")).StructuredContent, "task", "task_id")
	params := map[string]any{"name": "get_task", "arguments": map[string]any{"task_id": taskID}}
	for name, hdr := range map[string][]string{
		"Base64 Mcp-Name":         {"Mcp-Name", "=?base64?" + base64.StdEncoding.EncodeToString([]byte("get_task")) + "?="},
		"lowercase header names":  {"mcp-method", "tools/call", "mcp-name", "get_task"},
		"whitespace around value": {"Mcp-Name", "  get_task  "},
	} {
		r := b.rpc(t, "/mcp", "tools/call", params, hdr...)
		var res toolResult
		if r.status != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s", name, r.status, r.raw)
		}
		r.result(t, &res)
		if res.IsError {
			t.Errorf("%s: %s", name, res.StructuredContent)
		}
	}
	// A same-origin browser request and a loopback Origin are served.
	r := b.rpc(t, "/mcp", "tools/list", nil, "Origin", b.srv.URL, "Sec-Fetch-Site", "same-origin")
	if r.status != http.StatusOK {
		t.Errorf("same-origin request: %d %s", r.status, r.raw)
	}
}

func TestDiscover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var d struct {
		SupportedVersions []string `json:"supportedVersions"`
		Capabilities      struct {
			Tools      map[string]any            `json:"tools"`
			Logging    map[string]any            `json:"logging"`
			Extensions map[string]map[string]any `json:"extensions"`
		} `json:"capabilities"`
		Meta       map[string]map[string]any `json:"_meta"`
		TTLMs      *int                      `json:"ttlMs"`
		CacheScope string                    `json:"cacheScope"`
		ResultType string                    `json:"resultType"`
	}
	b.rpc(t, "/mcp", "server/discover", nil).result(t, &d)
	if len(d.SupportedVersions) != 1 || d.SupportedVersions[0] != "2026-07-28" || d.Capabilities.Tools == nil ||
		d.Capabilities.Logging != nil || d.Capabilities.Extensions["io.modelcontextprotocol/tasks"] == nil ||
		d.Meta["io.modelcontextprotocol/serverInfo"]["name"] != "bap" || d.TTLMs == nil || d.CacheScope == "" || d.ResultType != "complete" {
		t.Fatalf("discover: %+v", d)
	}
}
