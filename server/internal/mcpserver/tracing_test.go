package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/mcpserver"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
	"github.com/originweave/bap/server/internal/tracing"
)

// A tool call's _meta traceparent is the parent of the in-process API request it becomes, and the
// command that request runs is that request's child: a trace crosses the MCP adapter as it
// crosses HTTP.
func TestToolCallTraceparentFromMeta(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := tracing.NewWithProvider(tp, nil)
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('acme')`); err != nil {
		t.Fatal(err)
	}
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: "node_mcp", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	svc, err := app.NewService(store.New(db, store.Options{Tracer: tr}), app.Config{NodeID: "node_mcp", InterruptedResponse: api.InterruptedResponse, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	apiHandler, err := api.New(api.Options{Service: svc, Authenticator: headerAuth{}, Logger: quiet, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	dispatch := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := mcpserver.CallerFrom(r.Context()); ok {
			r = r.WithContext(api.InProcess(r.Context(), api.Principal{Actor: c.Actor, Scopes: c.Scopes, ClientID: c.ClientID}))
		}
		apiHandler.ServeHTTP(w, r)
	})
	h, err := mcpserver.New(mcpserver.Options{API: dispatch, Authenticator: mcpAuth{}, Logger: quiet, TaskSyncWindow: -1,
		TaskPollInterval: 50 * time.Millisecond, ApprovalPoll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{srv: httptest.NewServer(h)}
	t.Cleanup(b.srv.Close)

	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	m := meta(noCaps)
	m["traceparent"] = "00-" + traceID + "-" + parentID + "-01"
	r := b.rpc(t, "/mcp", "tools/call", map[string]any{"name": "create_task",
		"arguments": args(t, createArgs, "idempotency_key", "trace-1"), "_meta": m})
	if r.status != http.StatusOK {
		t.Fatalf("create_task: %d %s", r.status, r.raw)
	}
	var server, command sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.SpanContext().TraceID().String() != traceID {
			continue
		}
		switch sp.Name() {
		case "POST /bap/v1/tasks":
			server = sp
		case "command create_task":
			command = sp
		}
	}
	// The API request's span ended before the tool result was written (in-process, synchronous).
	if server == nil || command == nil {
		t.Fatalf("spans of the tool call's trace: server %v, command %v", server != nil, command != nil)
	}
	if server.Parent().SpanID().String() != parentID || !server.Parent().IsRemote() || server.SpanKind() != trace.SpanKindServer {
		t.Fatalf("the API request's parent is %v, want the _meta traceparent's %s", server.Parent(), parentID)
	}
	if command.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Fatalf("the command's parent is %v, want the API request's span", command.Parent())
	}
}
