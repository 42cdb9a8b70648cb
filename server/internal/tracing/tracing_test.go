package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/ids"
)

func recorded(t *testing.T) (*Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	return NewWithProvider(tp, tp.Shutdown), rec
}

// A span keeps only the attributes of the list, and only values of the shape its key allows: a
// URL, a typed value or a concrete path never leaves the process, whoever sets it.
func TestSpansKeepOnlyListedAttributesOfTheirShape(t *testing.T) {
	t.Parallel()
	taskID, cmdID := ids.New(ids.Task), ids.New(ids.Command)
	for _, tc := range []struct {
		key, value string
		kept       bool
	}{
		{"bap.operation", "act", true},
		{"bap.task_id", taskID, true},
		{"bap.task_id", cmdID, false}, // an id of another kind
		{"bap.task_id", "tsk_CANARY https://x.test/?token=1", false},
		{"bap.command_id", cmdID, true},
		{"bap.browser.action", "fill", true},
		{"bap.browser.action", "fill secret-value", false},
		{"http.route", "/bap/v1/browser-sessions/{session_id}/act", true},
		{"http.route", "/bap/v1/browser-sessions/" + ids.New(ids.BrowserSession) + "/act", false}, // a path, not its template
		{"http.route", "/bap/v1/tasks?token=abc", false},
		{"http.request.method", "POST", true},
		{"gen_ai.request.model", "vendor/model-7b:q4", true},
		{"gen_ai.request.model", "model?api_key=abc", false},
		{"bap.response.replayed", "true", true},
		{"bap.response.replayed", "yes", false},
		{"url.full", "https://shop.test/checkout", false}, // not listed at all
		{"http.request.header.authorization", "Bearer abc", false},
		{"bap.fill.value", "hunter2", false},
	} {
		tr, rec := recorded(t)
		_, sp := tr.Start(context.Background(), "command act", app.SpanInternal)
		sp.SetAttr(tc.key, tc.value)
		sp.SetInt("bap.response.status", 200)
		sp.SetInt("bap.secret.length", 7) // not listed
		sp.End(nil)
		ended := rec.Ended()
		if len(ended) != 1 {
			t.Fatalf("%d spans ended", len(ended))
		}
		got := map[string]string{}
		for _, kv := range ended[0].Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		if v, ok := got[tc.key]; ok != tc.kept || (ok && v != tc.value) {
			t.Errorf("%s=%q: recorded %q (present %v), want kept=%v", tc.key, tc.value, v, ok, tc.kept)
		}
		if got["bap.response.status"] != "200" || got["bap.secret.length"] != "" {
			t.Errorf("integer attributes %v: want the listed one only", got)
		}
	}
}

// A failed span says its problem code, never the error's text (which may quote a request), and
// records no exception event.
func TestFailedSpansCarryTheProblemCodeNotTheText(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-3f9e1b"
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("act: %w", &app.Error{Code: app.CodeOriginNotAllowed, Detail: "https://" + canary + ".test is outside"}), "origin_not_allowed"},
		{errors.New("pq: value " + canary + " violates"), "error"},
		{&app.Error{Code: app.Code(canary + " spaces"), Detail: "x"}, "error"}, // not a code's shape
	} {
		tr, rec := recorded(t)
		_, sp := tr.Start(context.Background(), "sql transaction", app.SpanClient)
		sp.End(tc.err)
		s := rec.Ended()[0]
		if s.Status().Description != tc.want || len(s.Events()) != 0 {
			t.Errorf("%v: status %q with %d events, want %q and none", tc.err, s.Status().Description, len(s.Events()), tc.want)
		}
		if strings.Contains(fmt.Sprint(s.Status(), s.Events(), s.Attributes()), canary) {
			t.Errorf("the span holds the error's text: %+v", s)
		}
	}
}

// A span name is a word and a token, a model id or a route template; another is replaced.
func TestSpanNames(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"command act":         "command act",
		"browser act":         "browser act",
		"chat vendor/model:1": "chat vendor/model:1",
		"POST /bap/v1/browser-sessions/{session_id}/act": "POST /bap/v1/browser-sessions/{session_id}/act",
		"POST":                          "POST",
		"GET /bap/v1/tasks?secret=1":    "span",
		"command act with a long story": "span",
		"":                              "span",
	} {
		if got := spanName(name); got != want {
			t.Errorf("spanName(%q) = %q, want %q", name, got, want)
		}
	}
}

// Remote takes the parent a W3C traceparent names, and nothing from a malformed one.
func TestRemoteParent(t *testing.T) {
	t.Parallel()
	tr, rec := recorded(t)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		traceparent string
		child       bool
	}{
		{"00-" + traceID + "-" + parentID + "-01", true},
		{"00-" + traceID + "-" + parentID + "-00", true}, // not sampled: still the parent (its span is not exported)
		{"", false},
		{"00-" + traceID + "-" + parentID, false},
		{"00-00000000000000000000000000000000-" + parentID + "-01", false},
		{"zz-" + traceID + "-" + parentID + "-01", false},
	} {
		rec.Reset()
		ctx := tr.Remote(context.Background(), tc.traceparent, "vendor=value")
		_, sp := tr.Start(ctx, "POST", app.SpanServer)
		sp.End(nil)
		sc := trace.SpanContextFromContext(ctx)
		if got := sc.IsValid() && sc.IsRemote() && sc.TraceID().String() == traceID && sc.SpanID().String() == parentID; got != tc.child {
			t.Errorf("%q: remote parent %v, want %v", tc.traceparent, got, tc.child)
		}
		if ended := rec.Ended(); tc.child && strings.HasSuffix(tc.traceparent, "-01") &&
			(len(ended) != 1 || ended[0].Parent().SpanID().String() != parentID || ended[0].SpanKind() != trace.SpanKindServer) {
			t.Errorf("%q: the span is not the child of the remote parent: %+v", tc.traceparent, ended)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:4318":            "http://127.0.0.1:4318/v1/traces",
		"http://127.0.0.1:4318/":           "http://127.0.0.1:4318/v1/traces",
		"https://collector.test/otlp/v1/x": "https://collector.test/otlp/v1/x",
		"127.0.0.1:4318":                   "",
		"ftp://collector.test":             "",
		"http://user:pass@collector.test":  "",
		"http://collector.test/?token=1":   "",
		"":                                 "",
	} {
		got, err := ParseEndpoint(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// New exports over OTLP/HTTP: an in-process collector receives the spans (protobuf, as a real
// collector does) with the process's resource, when Shutdown flushes them.
func TestNewExportsToAnOTLPCollector(t *testing.T) {
	t.Parallel()
	got := make(chan *collectortrace.ExportTraceServiceRequest, 8)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		got <- req
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(collector.Close)
	tr, err := New(context.Background(), Options{Endpoint: collector.URL, ServiceVersion: "9.9.9", NodeID: "node_test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tr.Start(context.Background(), "command act", app.SpanInternal)
	_, child := tr.Start(ctx, "sql transaction", app.SpanClient)
	child.End(nil)
	parent.End(nil)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := <-got
	names := map[string]bool{}
	for _, rs := range req.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		if res["service.name"] != "bap" || res["service.version"] != "9.9.9" || res["service.instance.id"] != "node_test" {
			t.Errorf("resource %v", res)
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				names[s.GetName()] = true
			}
		}
	}
	if !names["command act"] || !names["sql transaction"] {
		t.Fatalf("the collector received %v", names)
	}
}

// Off, a span is an interface call; on, it is what the SDK costs to record one (no exporter).
func BenchmarkSpan(b *testing.B) {
	for _, bc := range []struct {
		name string
		tr   app.Tracer
	}{
		{"off", app.NoTracer{}},
		{"on", NewWithProvider(sdktrace.NewTracerProvider(), nil)}, // sampled spans, no exporter
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, sp := bc.tr.Start(ctx, "command act", app.SpanInternal)
				sp.SetAttr("bap.operation", "act")
				sp.SetInt("bap.response.status", 200)
				sp.End(nil)
			}
		})
	}
}
