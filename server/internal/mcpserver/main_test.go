package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/mcpserver"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m, store.MigrateURL) }

var quiet = slog.New(slog.DiscardHandler)

// headerAuth is the test authenticator: X-Test-Tenant names the tenant, X-Test-Scopes the
// capabilities (all when absent); no tenant is unauthenticated. It challenges like api.Bearer.
type headerAuth struct{}

func (headerAuth) Authenticate(r *http.Request) (api.Principal, error) {
	tenant := r.Header.Get("X-Test-Tenant")
	if tenant == "" {
		return api.Principal{}, &app.Error{Code: app.CodeUnauthenticated, Detail: "no credentials"}
	}
	scopes := map[string]bool{}
	for _, s := range strings.Fields(r.Header.Get("X-Test-Scopes")) {
		scopes[s] = true
	}
	if r.Header.Get("X-Test-Scopes") == "" {
		for _, s := range api.AllScopes {
			scopes[s] = true
		}
	}
	return api.Principal{Actor: app.Actor{Tenant: tenant, Subject: "client:" + tenant}, Scopes: scopes}, nil
}

func (headerAuth) Challenge(err error, scope string) string {
	if scope != "" {
		return `Bearer error="insufficient_scope", scope="` + scope + `", resource_metadata="http://test/.well-known/oauth-protected-resource"`
	}
	return `Bearer resource_metadata="http://test/.well-known/oauth-protected-resource"`
}

// mcpAuth adapts headerAuth to the adapter, as the daemon adapts the API's authenticator.
type mcpAuth struct{ a headerAuth }

func (m mcpAuth) Authenticate(r *http.Request) (mcpserver.Caller, error) {
	p, err := m.a.Authenticate(r)
	if err != nil {
		return mcpserver.Caller{}, err
	}
	return mcpserver.Caller{Actor: p.Actor, Scopes: p.Scopes, ClientID: p.ClientID}, nil
}

func (m mcpAuth) Challenge(err error, scope string) string { return m.a.Challenge(err, scope) }

type bundle struct {
	db       *pgxpool.Pool
	srv      *httptest.Server
	apiCalls atomic.Int64 // in-process requests the adapter sent to the API
}

type option func(*mcpserver.Options)

// setup wires what the daemon wires: the BAP API on a real PostgreSQL, /mcp in front of it
// (tool calls are in-process API requests carrying the caller), /mcp-conformance, and the API
// itself under /bap/v1 for comparisons.
func setup(t *testing.T, opts ...option) *bundle {
	t.Helper()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('acme'), ('globex')`); err != nil {
		t.Fatal(err)
	}
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: "node_mcp", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	svc, err := app.NewService(store.New(db), app.Config{NodeID: "node_mcp", InterruptedResponse: api.InterruptedResponse})
	if err != nil {
		t.Fatal(err)
	}
	apiHandler, err := api.New(api.Options{Service: svc, Authenticator: headerAuth{}, MaxBodyBytes: 64 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{db: db}
	dispatch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.apiCalls.Add(1)
		if c, ok := mcpserver.CallerFrom(r.Context()); ok {
			r = r.WithContext(api.InProcess(r.Context(), api.Principal{Actor: c.Actor, Scopes: c.Scopes, ClientID: c.ClientID}))
		} else {
			t.Errorf("in-process request %s %s carries no caller", r.Method, r.URL.Path)
		}
		apiHandler.ServeHTTP(w, r)
	})
	o := mcpserver.Options{API: dispatch, Authenticator: mcpAuth{}, Logger: quiet, MaxBodyBytes: 128 << 10, TaskSyncWindow: -1,
		TaskPollInterval: 50 * time.Millisecond, ApprovalPoll: 20 * time.Millisecond,
		Tasks: store.New(db), NodeID: "node_mcp"} // durable MCP tasks, as the daemon wires them
	for _, f := range opts {
		f(&o)
	}
	h, err := mcpserver.New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	if mcpserver.ConformanceFixturesBuilt { // the tests of them are built with them (state_test.go)
		fx, err := mcpserver.NewConformance(o)
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("/mcp-conformance", fx)
	}
	mux.Handle("/", apiHandler)
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

// reply is one HTTP answer of the MCP endpoint, its JSON-RPC message decoded (SSE or JSON).
type reply struct {
	status int
	header http.Header
	raw    []byte
	msg    struct {
		ID     json.RawMessage `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int64           `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
}

func (r reply) code() int64 {
	if r.msg.Error == nil {
		return 0
	}
	return r.msg.Error.Code
}

// result decodes the JSON-RPC result into v.
func (r reply) result(t *testing.T, v any) {
	t.Helper()
	if r.msg.Error != nil || r.msg.Result == nil {
		t.Fatalf("want a result, got HTTP %d %s", r.status, r.raw)
	}
	if err := json.Unmarshal(r.msg.Result, v); err != nil {
		t.Fatalf("decoding %s: %v", r.msg.Result, err)
	}
}

// caps is the clientCapabilities of a request.
type caps = map[string]any

var (
	noCaps    = caps{}
	taskCaps  = caps{"extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}
	taskElcit = caps{"elicitation": map[string]any{}, "extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}
)

// meta is a request's _meta for the 2026-07-28 revision.
func meta(c caps) map[string]any {
	return map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": c,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "mcpserver-test", "version": "1"},
	}
}

var rpcID atomic.Int64

// rpc sends one well-formed request (headers mirroring the body) as tenant acme; headers override
// or, with an empty value, remove standard ones.
func (b *bundle) rpc(t *testing.T, path, method string, params map[string]any, headers ...string) reply {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	if _, ok := params["_meta"]; !ok {
		params["_meta"] = meta(noCaps)
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": rpcID.Add(1), "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("MCP-Protocol-Version", "2026-07-28")
	h.Set("Mcp-Method", method)
	h.Set("X-Test-Tenant", "acme")
	switch method {
	case "tools/call", "prompts/get":
		h.Set("Mcp-Name", fmt.Sprint(params["name"]))
	case "resources/read":
		h.Set("Mcp-Name", fmt.Sprint(params["uri"]))
	case "tasks/get", "tasks/update", "tasks/cancel":
		h.Set("Mcp-Name", fmt.Sprint(params["taskId"]))
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			h.Del(headers[i])
		} else {
			h.Set(headers[i], headers[i+1])
		}
	}
	return b.post(t, path, h, body)
}

// post sends a raw body.
func (b *bundle) post(t *testing.T, path string, h http.Header, body []byte) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	return b.send(t, req)
}

func (b *bundle) send(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, raw: raw}
	data := raw
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The response is the last data line whose message has an id (notifications precede it).
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"id"`) {
				data = []byte(d)
			}
		}
	}
	_ = json.Unmarshal(data, &r.msg)
	return r
}

// toolResult is a CallToolResult as the wire carries it.
type toolResult struct {
	ResultType        string            `json:"resultType"`
	IsError           bool              `json:"isError"`
	StructuredContent json.RawMessage   `json:"structuredContent"`
	Content           []json.RawMessage `json:"content"`
	Meta              map[string]any    `json:"_meta"`
	// Task fields, when the call became a task.
	TaskID string `json:"taskId"`
	Status string `json:"status"`
}

func (b *bundle) call(t *testing.T, tool string, args map[string]any, headers ...string) toolResult {
	t.Helper()
	r := b.rpc(t, "/mcp", "tools/call", map[string]any{"name": tool, "arguments": args}, headers...)
	if r.status != http.StatusOK {
		t.Fatalf("%s: HTTP %d %s", tool, r.status, r.raw)
	}
	var res toolResult
	r.result(t, &res)
	return res
}

// field reads a string at path in a JSON document.
func field(t *testing.T, doc json.RawMessage, path ...string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("decoding %s: %v", doc, err)
	}
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

// httpDo calls the BAP HTTP API directly as tenant acme.
func (b *bundle) httpDo(t *testing.T, method, path, body string, headers ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test-Tenant", "acme")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("decoding %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
