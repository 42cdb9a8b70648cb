package mcpserver_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/mcpcatalog"
	"github.com/originweave/bap/server/internal/mcpserver"
)

type listResult struct {
	Tools []struct {
		Name        string          `json:"name"`
		Title       string          `json:"title"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
		Annotations struct {
			ReadOnlyHint bool `json:"readOnlyHint"`
		} `json:"annotations"`
	} `json:"tools"`
	NextCursor string `json:"nextCursor"`
	TTLMs      *int   `json:"ttlMs"`
	CacheScope string `json:"cacheScope"`
	ResultType string `json:"resultType"`
}

func (b *bundle) listAll(t *testing.T, headers ...string) ([]string, []listResult) {
	t.Helper()
	var names []string
	var pages []listResult
	cursor := ""
	for {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		var page listResult
		b.rpc(t, "/mcp", "tools/list", params, headers...).result(t, &page)
		pages = append(pages, page)
		for _, tool := range page.Tools {
			names = append(names, tool.Name)
		}
		if page.NextCursor == "" {
			return names, pages
		}
		cursor = page.NextCursor
	}
}

func TestToolsListIsExactlyTheReviewedCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	catalog, err := mcpcatalog.Tools()
	if err != nil {
		t.Fatal(err)
	}
	var page listResult
	b.rpc(t, "/mcp", "tools/list", nil).result(t, &page)
	if len(page.Tools) != 22 || len(page.Tools) != len(catalog) || page.NextCursor != "" {
		t.Fatalf("%d tools (next %q), want the 22 of the catalog on one page", len(page.Tools), page.NextCursor)
	}
	for i, tool := range page.Tools {
		want := catalog[i]
		if tool.Name != want.Name || tool.Description != want.Description || !jsonEqual(t, tool.InputSchema, want.InputSchema) {
			t.Errorf("tool %d: %s differs from the catalog's %s", i, tool.Name, want.Name)
		}
		if tool.Annotations.ReadOnlyHint == want.Mutating {
			t.Errorf("%s: readOnlyHint %v for mutating %v", tool.Name, tool.Annotations.ReadOnlyHint, want.Mutating)
		}
	}
	if page.ResultType != "complete" || page.CacheScope != "private" || page.TTLMs == nil || *page.TTLMs <= 0 {
		t.Errorf("caching fields: resultType %q cacheScope %q ttlMs %v", page.ResultType, page.CacheScope, page.TTLMs)
	}
	// Deterministic: the same list every time.
	var again listResult
	b.rpc(t, "/mcp", "tools/list", nil).result(t, &again)
	if !jsonEqual(t, mustJSON(t, page.Tools), mustJSON(t, again.Tools)) {
		t.Error("tools/list changed between two calls")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestToolsListPagesWithSealedCursors(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *mcpserver.Options) { o.PageSize = 4 })
	names, pages := b.listAll(t)
	if len(names) != 22 || len(pages) != 6 || !slices.IsSorted(names) {
		t.Fatalf("%d tools over %d pages (sorted %v), want 22 over 6", len(names), len(pages), slices.IsSorted(names))
	}
	next := pages[0].NextCursor
	for name, cursor := range map[string]string{
		"tampered":   next[:len(next)-2] + strings.Repeat("A", 2),
		"unissued":   "AAAABAAAAAAAAAAAAAAAAAAAAAAA",
		"not base64": "!!",
	} {
		r := b.rpc(t, "/mcp", "tools/list", map[string]any{"cursor": cursor})
		if r.status != http.StatusBadRequest || r.code() != -32602 {
			t.Errorf("%s cursor: HTTP %d code %d, want 400 -32602", name, r.status, r.code())
		}
	}
	// A cursor is bound to the caller it was issued to.
	r := b.rpc(t, "/mcp", "tools/list", map[string]any{"cursor": next}, "X-Test-Tenant", "globex")
	if r.code() != -32602 {
		t.Errorf("another caller's cursor: code %d, want -32602", r.code())
	}
}

func TestToolsListShowsOnlyToolsTheCallerMayCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	names, _ := b.listAll(t, "X-Test-Scopes", "bap:tasks.read bap:artifacts.read")
	want := []string{"get_artifact", "get_task", "get_task_audit", "get_task_bundle", "list_task_events", "verify_artifact"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	// A tool outside the caller's scopes: 403 with the challenge naming the scope (step-up).
	r := b.rpc(t, "/mcp", "tools/call", map[string]any{"name": "create_task", "arguments": map[string]any{}},
		"X-Test-Scopes", "bap:tasks.read")
	if r.status != http.StatusForbidden || !strings.Contains(r.header.Get("WWW-Authenticate"), `scope="bap:tasks.write"`) ||
		!strings.Contains(string(r.raw), `"insufficient_scope"`) {
		t.Fatalf("create_task without tasks.write: %d %q %s", r.status, r.header.Get("WWW-Authenticate"), r.raw)
	}
}

const createArgs = `{"goal":"order the cart","policy":{"allowed_origins":["https://shop.example.com"]}}`

func args(t *testing.T, doc string, extra ...any) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i].(string)] = extra[i+1]
	}
	return m
}

func TestToolResultsAreTheBAPJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k-create"))
	if created.IsError || created.ResultType != "complete" || created.Meta["io.originweave.bap/status"] != float64(201) {
		t.Fatalf("create_task: %+v", created)
	}
	taskID := field(t, created.StructuredContent, "task", "task_id")
	if !strings.HasPrefix(taskID, "tsk_") {
		t.Fatalf("no task id in %s", created.StructuredContent)
	}
	// content carries the same JSON as text, for clients that only read content.
	var text struct{ Text string }
	_ = json.Unmarshal(created.Content[0], &text)
	if !jsonEqual(t, []byte(text.Text), created.StructuredContent) {
		t.Errorf("text content %s differs from structuredContent", text.Text)
	}

	// The same key and arguments: the stored first response again, marked replayed; the HTTP
	// API replays the very same bytes for that key.
	replay := b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k-create"))
	if !jsonEqual(t, replay.StructuredContent, created.StructuredContent) || replay.Meta["io.originweave.bap/replayed"] != true {
		t.Fatalf("replay: %+v", replay)
	}
	status, httpReplay := b.httpDo(t, "POST", "/bap/v1/tasks", createArgs, "Idempotency-Key", "k-create")
	if status != 201 || !jsonEqual(t, httpReplay, created.StructuredContent) {
		t.Fatalf("HTTP replay of the MCP call: %d %s", status, httpReplay)
	}

	// Reads equal the HTTP API's JSON.
	got := b.call(t, "get_task", map[string]any{"task_id": taskID})
	_, viaHTTP := b.httpDo(t, "GET", "/bap/v1/tasks/"+taskID, "")
	if got.IsError || !jsonEqual(t, got.StructuredContent, viaHTTP) {
		t.Fatalf("get_task: %s, HTTP %s", got.StructuredContent, viaHTTP)
	}
	evs := b.call(t, "list_task_events", map[string]any{"task_id": taskID, "after": 0, "limit": 1})
	_, evsHTTP := b.httpDo(t, "GET", "/bap/v1/tasks/"+taskID+"/events?after=0&limit=1", "")
	if evs.IsError || !jsonEqual(t, evs.StructuredContent, evsHTTP) || !strings.Contains(string(evs.StructuredContent), `"next_after":1`) {
		t.Fatalf("list_task_events: %s, HTTP %s", evs.StructuredContent, evsHTTP)
	}

	cancelled := b.call(t, "cancel_task", map[string]any{"task_id": taskID, "reason": "done", "idempotency_key": "k-cancel"})
	if cancelled.IsError || field(t, cancelled.StructuredContent, "task", "state") != "cancelled" {
		t.Fatalf("cancel_task: %s", cancelled.StructuredContent)
	}
	// The history chain's check is a read an agent may run: the same answer as HTTP's.
	audit := b.call(t, "get_task_audit", map[string]any{"task_id": taskID})
	_, auditHTTP := b.httpDo(t, "GET", "/bap/v1/tasks/"+taskID+"/audit", "")
	if audit.IsError || !jsonEqual(t, audit.StructuredContent, auditHTTP) || field(t, audit.StructuredContent, "status") != "valid" {
		t.Fatalf("get_task_audit: %s, HTTP %s", audit.StructuredContent, auditHTTP)
	}
}

func TestProblemsAreErrorResultsWithTheProblemJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	taskID := field(t, b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k1")).StructuredContent, "task", "task_id")
	cases := []struct {
		name, tool string
		args       map[string]any
		status     float64
		code       string
	}{
		{"no idempotency key", "create_task", args(t, createArgs), 400, "idempotency_key_required"},
		{"key reused with another body", "create_task", args(t, `{"goal":"other","policy":{"allowed_origins":["https://a.example"]}}`, "idempotency_key", "k1"), 422, "idempotency_key_reused"},
		{"schema violation", "create_task", args(t, `{"goal":"","policy":{"allowed_origins":[]}}`, "idempotency_key", "k2"), 400, "invalid_request"},
		{"unknown body field", "create_task", args(t, createArgs, "idempotency_key", "k3", "extra", true), 400, "invalid_request"},
		{"unknown argument of a read", "get_task", map[string]any{"task_id": taskID, "extra": 1}, 400, "invalid_request"},
		{"path argument missing", "get_task", map[string]any{}, 400, "invalid_request"},
		{"path argument not a string", "get_task", map[string]any{"task_id": 7}, 400, "invalid_request"},
		{"path argument smuggling a route", "get_task", map[string]any{"task_id": taskID + "/events"}, 400, "invalid_request"},
		{"query argument not an integer", "list_task_events", map[string]any{"task_id": taskID, "limit": "ten"}, 400, "invalid_request"},
		{"limit out of range", "list_task_events", map[string]any{"task_id": taskID, "limit": 100000}, 400, "invalid_request"},
		{"unknown task", "get_task", map[string]any{"task_id": "tsk_nosuchtask"}, 404, "not_found"},
		{"no browser on this node", "create_browser_session", map[string]any{"task_id": taskID, "idempotency_key": "k4"}, 503, "browser_unavailable"},
		{"unknown task to close", "close_task", map[string]any{"task_id": "tsk_nosuchtask", "idempotency_key": "k5"}, 404, "not_found"},
		{"document larger than BAP accepts", "create_task", args(t, createArgs, "idempotency_key", "k6", "goal", strings.Repeat("g", 80<<10)), 413, "payload_too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := b.call(t, c.tool, c.args)
			if !res.IsError || res.Meta["io.originweave.bap/status"] != c.status || field(t, res.StructuredContent, "code") != c.code {
				t.Fatalf("%s: isError %v status %v %s, want %v %s", c.tool, res.IsError, res.Meta["io.originweave.bap/status"], res.StructuredContent, c.status, c.code)
			}
			for _, k := range []string{"type", "title", "detail"} {
				if field(t, res.StructuredContent, k) == "" {
					t.Errorf("problem lacks %s: %s", k, res.StructuredContent)
				}
			}
		})
	}
	// Arguments that are not an object.
	r := b.rpc(t, "/mcp", "tools/call", map[string]any{"name": "get_task", "arguments": []int{1}})
	var res toolResult
	if r.msg.Error == nil {
		r.result(t, &res)
		if !res.IsError || field(t, res.StructuredContent, "code") != "invalid_request" {
			t.Errorf("array arguments: %s", r.raw)
		}
	}
}

func TestCallersSeeOnlyTheirTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	taskID := field(t, b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k1")).StructuredContent, "task", "task_id")
	other := b.call(t, "get_task", map[string]any{"task_id": taskID}, "X-Test-Tenant", "globex")
	if !other.IsError || field(t, other.StructuredContent, "code") != "not_found" {
		t.Fatalf("another tenant's task: %s", other.StructuredContent)
	}
	// The key space is the tenant's: globex's k1 is a new command, not acme's replay.
	mine := b.call(t, "create_task", args(t, createArgs, "idempotency_key", "k1"), "X-Test-Tenant", "globex")
	if mine.IsError || mine.Meta["io.originweave.bap/replayed"] == true {
		t.Fatalf("globex create_task with acme's key: %+v", mine)
	}
}

func TestResourcesAndPrompts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var read struct {
		Contents []struct {
			URI, MIMEType, Text string
		} `json:"contents"`
		CacheScope string `json:"cacheScope"`
	}
	b.rpc(t, "/mcp", "resources/read", map[string]any{"uri": "bap://spec/openapi.json"}).result(t, &read)
	if len(read.Contents) != 1 || !strings.Contains(read.Contents[0].Text, `"create_task"`) || read.CacheScope != "public" {
		t.Fatalf("reading the OpenAPI resource: %d contents, scope %q", len(read.Contents), read.CacheScope)
	}
	r := b.rpc(t, "/mcp", "resources/read", map[string]any{"uri": "bap://artifacts/art_nosuchartifact"})
	if r.status != http.StatusBadRequest || r.code() != -32602 {
		t.Errorf("unknown artifact: %d %s", r.status, r.raw)
	}
	var prompt struct {
		Messages []struct {
			Content struct{ Text string } `json:"content"`
		} `json:"messages"`
	}
	b.rpc(t, "/mcp", "prompts/get", map[string]any{"name": "browser_task",
		"arguments": map[string]any{"goal": "buy socks", "origin": "https://shop.example.com"}}).result(t, &prompt)
	if len(prompt.Messages) != 1 || !strings.Contains(prompt.Messages[0].Content.Text, `"https://shop.example.com"`) {
		t.Fatalf("prompt: %+v", prompt)
	}
}
