package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tenantTransport adds the test authenticator's header to every request of a client.
type tenantTransport struct{ tenant string }

func (tt tenantTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-Tenant", tt.tenant)
	return http.DefaultTransport.RoundTrip(r)
}

// connectGo connects the official Go SDK client at 2026-07-28 and fails if it fell back to the
// legacy handshake (the SDK client does that silently).
func connectGo(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "bap-go-sdk-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: tenantTransport{"acme"}}}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the Go SDK client negotiated %q, not 2026-07-28", v)
	}
	return cs
}

func TestOfficialGoClient(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	cs := connectGo(t, b.srv.URL+"/mcp")
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	if len(names) != 22 {
		t.Fatalf("%d tools: %v", len(names), names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_task", Arguments: args(t, createArgs, "idempotency_key", "go-1")})
	if err != nil || res.IsError {
		t.Fatalf("create_task: %v %+v", err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	taskID := field(t, raw, "task", "task_id")
	got, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_task", Arguments: map[string]any{"task_id": taskID}})
	if err != nil || got.IsError {
		t.Fatalf("get_task: %v %+v", err, got)
	}
	_, viaHTTP := b.httpDo(t, "GET", "/bap/v1/tasks/"+taskID, "")
	raw, _ = json.Marshal(got.StructuredContent)
	if !jsonEqual(t, raw, viaHTTP) {
		t.Fatalf("get_task via the Go client %s, via HTTP %s", raw, viaHTTP)
	}
	// A BAP problem reaches the client as a tool error with the problem.
	bad, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_task", Arguments: map[string]any{"task_id": "tsk_nosuchtask"}})
	if err != nil || !bad.IsError {
		t.Fatalf("unknown task: %v %+v", err, bad)
	}
	raw, _ = json.Marshal(bad.StructuredContent)
	if field(t, raw, "code") != "not_found" {
		t.Fatalf("problem: %s", raw)
	}
	// An unknown tool is a protocol error, never a guess.
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_javascript", Arguments: map[string]any{}}); err == nil {
		t.Fatal("an unknown tool answered")
	}
}
