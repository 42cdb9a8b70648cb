package orchestrator_test

import (
	"fmt"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/orchestrator"
	ot "github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
	"github.com/originweave/bap/server/internal/tracing"
)

// One span per model call, a client span named for the model, with the role, the model, the
// tokens and the outcome — a failed model's and a fallback's alike. The prompt, the answer, a
// failure's reason and the workload credential are in no span.
func TestModelCallSpans(t *testing.T) {
	t.Parallel()
	const promptCanary, answerCanary, token = "prompt-CANARY-91c2", "answer-CANARY-5e7d", "tok-CANARY-0b3f"
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	e := setup(t, ot.Config{Models: []ot.Model{fullModel("m1"), fullModel("m2")}, Token: token},
		orchestrator.Config{Models: roles("m1", "m2"), Token: token, Tracer: tracing.NewWithProvider(tp, nil)})
	e.srv.Script("m1", ot.JSON(map[string]string{"action": answerCanary})) // fails the schema
	good := ot.JSON(map[string]string{"action": "done"})
	good.PromptTokens, good.CompletionTokens = 120, 7
	e.srv.Script("m2", good)
	req := request(app.RolePlanner)
	req.Messages[1].Content += " " + promptCanary
	rep, err := e.c.Complete(t.Context(), req)
	if err != nil || rep.Model.ID != "m2" || len(rep.Fallbacks) != 1 {
		t.Fatalf("complete: %+v, %v", rep, err)
	}
	spans := rec.Ended()
	got := map[string]map[string]string{}
	for _, sp := range spans {
		attrs := map[string]string{}
		for _, kv := range sp.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if sp.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s: kind %v, want client", sp.Name(), sp.SpanKind())
		}
		got[sp.Name()] = attrs
		text := fmt.Sprint(sp.Name(), sp.Attributes(), sp.Status(), sp.Events())
		for _, c := range []string{promptCanary, answerCanary, token, "does not match schema"} {
			if strings.Contains(text, c) {
				t.Errorf("span %s holds %q: %s", sp.Name(), c, text)
			}
		}
	}
	if len(spans) != 2 || got["chat m1"]["bap.model.outcome"] != "failed" || got["chat m2"]["bap.model.outcome"] != "answered" ||
		got["chat m2"]["gen_ai.request.model"] != "m2" || got["chat m2"]["bap.model.role"] != app.RolePlanner ||
		got["chat m2"]["gen_ai.usage.input_tokens"] != "120" || got["chat m2"]["gen_ai.usage.output_tokens"] != "7" {
		t.Fatalf("model call spans: %v", got)
	}
}
