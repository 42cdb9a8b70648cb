package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpCollector is an in-process OTLP/HTTP trace receiver (protobuf, as a real collector takes
// it): it keeps every export's raw body and decoded request.
type otlpCollector struct {
	*httptest.Server
	mu      sync.Mutex
	raw     [][]byte
	exports []*collectortrace.ExportTraceServiceRequest
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	t.Helper()
	c := &otlpCollector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if r.Method != "POST" || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.raw = append(c.raw, body)
		c.exports = append(c.exports, req)
		c.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.Close)
	return c
}

// collectedSpan is one received span with its resource's attributes.
type collectedSpan struct {
	*tracepb.Span
	resource map[string]string
}

func (c *otlpCollector) spans() (out []collectedSpan, raw [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, req := range c.exports {
		for _, rs := range req.GetResourceSpans() {
			res := map[string]string{}
			for _, kv := range rs.GetResource().GetAttributes() {
				res[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					out = append(out, collectedSpan{Span: sp, resource: res})
				}
			}
		}
	}
	return out, c.raw
}

// spanAttr is a span attribute's value as text ("" when absent).
func spanAttr(sp *tracepb.Span, key string) string {
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == key {
			v := kv.GetValue()
			if _, ok := v.GetValue().(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(v.GetIntValue(), 10)
			}
			return v.GetStringValue()
		}
	}
	return ""
}

// `bap serve --otlp-endpoint` as a process (issue #23 item 11): a request carrying a W3C
// traceparent, sent with a real bearer token to the remote profile, reaches an in-process OTLP
// collector as spans of the caller's trace — the request's server span a child of the given
// parent, the command its child — flushed when SIGTERM stops the server. Nothing protected is in
// any export: not the bearer token, not the client secret that obtained it, not a canary carried
// in the query, the Idempotency-Key or the body.
func TestServeExportsTracesToAnOTLPCollector(t *testing.T) {
	t.Parallel()
	col := newOTLPCollector(t)
	bin := buildBinary(t)
	dir := dataDir(t)
	r, ready := serveProcess(t, bin, dir, nil, "--profile", "remote", "--insecure-http", "--otlp-endpoint", col.URL)
	nodeID, _ := ready["node_id"].(string)
	base := "http://" + r.listen
	if !strings.Contains(r.logs.String(), `"msg":"traces are exported over OTLP/HTTP"`) {
		t.Fatalf("no log line names the OTLP export\n%s", r.logs)
	}
	client := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "traced", "--scopes", "bap:tasks.read bap:tasks.write")
	secret, _ := client["client_secret"].(string)
	token := accessToken(t, base, client)

	const canary = "CANARY-otlp-5e0a91"
	const traceID, parentID = "5bf92f3577b34da6a3ce929d0e0e4737", "10f067aa0ba902b8"
	req, _ := http.NewRequestWithContext(context.Background(), "POST", base+"/bap/v1/tasks?probe="+canary,
		strings.NewReader(`{"goal":"traced `+canary+`","policy":{"allowed_origins":["https://shop.example.com"]}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "otlp-"+canary)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("create_task: %d %s", resp.StatusCode, body)
	}

	// SIGTERM: the server stops and flushes its buffered spans before it exits.
	if err := r.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: exit %v\n%s", err, r.logs)
	}
	spans, raw := col.spans()
	wantTrace, _ := hex.DecodeString(traceID)
	wantParent, _ := hex.DecodeString(parentID)
	var inTrace []collectedSpan
	for _, sp := range spans {
		if bytes.Equal(sp.GetTraceId(), wantTrace) {
			inTrace = append(inTrace, sp)
		}
	}
	var server *collectedSpan
	for i, sp := range inTrace {
		if bytes.Equal(sp.GetParentSpanId(), wantParent) {
			if server != nil {
				t.Fatalf("two spans are children of the client's traceparent: %q, %q", server.GetName(), sp.GetName())
			}
			server = &inTrace[i]
		}
	}
	if server == nil {
		t.Fatalf("no span of trace %s has the client's span as parent; the collector received %d spans, %d in the trace", traceID, len(spans), len(inTrace))
	}
	if server.GetName() != "POST /bap/v1/tasks" || server.GetKind() != tracepb.Span_SPAN_KIND_SERVER ||
		spanAttr(server.Span, "bap.operation") != "create_task" || spanAttr(server.Span, "http.response.status_code") != "201" {
		t.Fatalf("the request's span: %q kind %v attributes %v", server.GetName(), server.GetKind(), server.GetAttributes())
	}
	if server.resource["service.name"] != "bap" || server.resource["service.instance.id"] != nodeID || nodeID == "" {
		t.Fatalf("the span's resource %v, want service bap on node %s", server.resource, nodeID)
	}
	var command bool
	for _, sp := range inTrace {
		if bytes.Equal(sp.GetParentSpanId(), server.GetSpanId()) && sp.GetName() == "command create_task" {
			command = true
		}
	}
	if !command {
		names := []string{}
		for _, sp := range inTrace {
			names = append(names, sp.GetName())
		}
		t.Fatalf("the request's span has no command child; spans of the trace: %v", names)
	}

	// Whatever was exported, as the collector received it: no protected value, in any span.
	sig := token[strings.LastIndex(token, ".")+1:]
	for _, export := range raw {
		for name, v := range map[string]string{"the bearer token": token, "the token's signature": sig, "the client secret": secret, "the canary": canary} {
			if v != "" && bytes.Contains(export, []byte(v)) {
				t.Fatalf("an OTLP export carries %s", name)
			}
		}
	}
}
