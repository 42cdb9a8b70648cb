package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
	"github.com/originweave/bap/server/internal/tracing"
)

// collector is an in-process span collector: the SDK's recorder, and a signal when the server
// span of a trace has ended (the response can reach the client a moment before).
type collector struct {
	*tracetest.SpanRecorder
	mu      sync.Mutex
	waiting map[trace.TraceID]chan struct{}
}

func newCollector() (*collector, *tracing.Tracer) {
	c := &collector{SpanRecorder: tracetest.NewSpanRecorder(), waiting: map[trace.TraceID]chan struct{}{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(c))
	return c, tracing.NewWithProvider(tp, tp.Shutdown)
}

func (c *collector) serverSpanEnded(id trace.TraceID) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signal(id)
}

// signal is the channel of trace id (c.mu held).
func (c *collector) signal(id trace.TraceID) chan struct{} {
	ch, ok := c.waiting[id]
	if !ok {
		ch = make(chan struct{})
		c.waiting[id] = ch
	}
	return ch
}

func (c *collector) OnEnd(s sdktrace.ReadOnlySpan) {
	c.SpanRecorder.OnEnd(s)
	if s.SpanKind() != trace.SpanKindServer {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.signal(s.SpanContext().TraceID())
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// newTracedStack is newStack with tracing on where the daemon turns it on: the transport, the
// app and the store.
func newTracedStack(t *testing.T, tr app.Tracer) *stack {
	t.Helper()
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: "node_e2e", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	svc, err := app.NewService(store.New(db, store.Options{Tracer: tr}), app.Config{NodeID: "node_e2e",
		Browser: daemon.Chromium(shared), InterruptedResponse: api.InterruptedResponse,
		SoftwareVersion: "1.2.3", ProtocolVersion: "1.0.0", Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	go svc.RunBrowserEvents(ctx)
	go svc.RunSessionCloser(ctx)
	h, err := api.New(api.Options{Service: svc, Authenticator: api.Local{}, Registry: prometheus.NewRegistry(), Tracer: tr, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &stack{srv: srv, db: db, svc: svc, opClient: serveSocket(t, h)}
}

// One act, traced: the client's traceparent is the parent of the server span of its request; the
// command is the server span's child; the command's two transactions (phase 1, phase 3) and the
// browser call are the command's children, in that order — no transaction is open while the
// browser acts. A canary typed into the page and carried in a URL's query is in no span.
func TestActSpanTree(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-7d21c9"
	rec, tr := newCollector()
	sh := newShop(t)
	s := newTracedStack(t, tr)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "trace-task", map[string]any{
		"goal": "place an order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
	})
	taskID := r.str("task", "task_id")
	sessionID := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "trace-session", map[string]any{}).str("session", "session_id")
	base := "/bap/v1/browser-sessions/" + sessionID
	s.must(t, 200, "POST", base+"/navigate", "trace-nav", map[string]any{"url": sh.srv.URL + "/checkout?coupon=" + canary})

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	tid, _ := trace.TraceIDFromHex(traceID)
	ended := rec.serverSpanEnded(tid)
	body, _ := json.Marshal(map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": canary})
	req, _ := http.NewRequest("POST", s.srv.URL+base+"/act", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "trace-act")
	req.Header.Set("Traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("act: %d", resp.StatusCode)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the server span of the act never ended")
	}

	var inTrace []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.SpanContext().TraceID() == tid {
			inTrace = append(inTrace, sp)
		}
	}
	children := func(parent trace.SpanID) (out []sdktrace.ReadOnlySpan) {
		for _, sp := range inTrace {
			if sp.Parent().SpanID() == parent {
				out = append(out, sp)
			}
		}
		return out
	}
	attr := func(sp sdktrace.ReadOnlySpan, key string) string {
		for _, kv := range sp.Attributes() {
			if string(kv.Key) == key {
				return kv.Value.String()
			}
		}
		return ""
	}
	pid, _ := trace.SpanIDFromHex(parentID)
	roots := children(pid)
	if len(roots) != 1 {
		t.Fatalf("%d spans are children of the client's traceparent, want the request's: %v", len(roots), names(inTrace))
	}
	httpSpan := roots[0]
	if httpSpan.Name() != "POST /bap/v1/browser-sessions/{session_id}/act" || httpSpan.SpanKind() != trace.SpanKindServer ||
		!httpSpan.Parent().IsRemote() || attr(httpSpan, "bap.operation") != "act" || attr(httpSpan, "http.response.status_code") != "200" {
		t.Fatalf("the request's span: %q kind %v attrs %v", httpSpan.Name(), httpSpan.SpanKind(), httpSpan.Attributes())
	}
	cmds := children(httpSpan.SpanContext().SpanID())
	if len(cmds) != 1 || cmds[0].Name() != "command act" {
		t.Fatalf("the request's children: %v, want the command", names(cmds))
	}
	cmd := cmds[0]
	if attr(cmd, "bap.task_id") != taskID || !strings.HasPrefix(attr(cmd, "bap.command_id"), "cmd_") || attr(cmd, "bap.response.status") != "200" {
		t.Fatalf("the command's attributes: %v", cmd.Attributes())
	}
	var txs []sdktrace.ReadOnlySpan
	var act sdktrace.ReadOnlySpan
	for _, sp := range children(cmd.SpanContext().SpanID()) {
		switch sp.Name() {
		case "sql transaction":
			txs = append(txs, sp)
		case "browser act":
			act = sp
		}
	}
	if len(txs) != 2 || act == nil {
		t.Fatalf("the command's children: %v, want two SQL transactions and the browser's act", names(children(cmd.SpanContext().SpanID())))
	}
	if attr(act, "bap.browser.action") != "fill" || attr(act, "bap.session_id") != sessionID || act.SpanKind() != trace.SpanKindInternal {
		t.Fatalf("the browser call's attributes: %v", act.Attributes())
	}
	first, last := txs[0], txs[1]
	if first.StartTime().After(last.StartTime()) {
		first, last = last, first
	}
	if act.StartTime().Before(first.EndTime()) || last.StartTime().Before(act.EndTime()) {
		t.Fatalf("phase 1 [%v, %v], act [%v, %v], phase 3 [%v, %v]: a transaction was open while the browser acted",
			first.StartTime(), first.EndTime(), act.StartTime(), act.EndTime(), last.StartTime(), last.EndTime())
	}
	if first.SpanKind() != trace.SpanKindClient || attr(first, "db.system.name") != "postgresql" || attr(first, "bap.tx.attempts") != "1" {
		t.Fatalf("a transaction's span: kind %v attrs %v", first.SpanKind(), first.Attributes())
	}
	assertNoCanaryInSpans(t, rec.Ended(), canary)
}

// assertNoCanaryInSpans fails when any part of any span — name, attributes, status, events,
// links, resource — holds canary.
func assertNoCanaryInSpans(t *testing.T, spans []sdktrace.ReadOnlySpan, canary string) {
	t.Helper()
	if len(spans) == 0 {
		t.Fatal("no spans were recorded: the canary check would prove nothing")
	}
	for _, sp := range spans {
		text := fmt.Sprint(sp.Name(), sp.Attributes(), sp.Status(), sp.Events(), sp.Links(), sp.Resource().Attributes(),
			sp.SpanContext().TraceState().String())
		if strings.Contains(text, canary) {
			t.Errorf("span %q holds the protected value: %s", sp.Name(), text)
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, sp := range spans {
		out[i] = sp.Name()
	}
	return out
}
