package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/serverkey"
)

// syncBuffer is a log sink safe for the workers' goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A fill value in a delegated plan is sealed with the server key (ADR 0015): the site receives
// it (the worker opened it when the step ran), but no database row, log line, event or API
// response ever holds it.
func TestDelegatedFillValueNeverLeavesTheSeal(t *testing.T) {
	t.Parallel()
	const canary = "PIN-CANARY-8c41f0"
	var received atomic.Value
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pin", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>PIN</title><form method="post" action="/pin">
<label for="pin">PIN</label><input id="pin" name="pin" type="text" autocomplete="off"><button type="submit">Send</button></form>`)
	})
	mux.HandleFunc("POST /pin", func(w http.ResponseWriter, r *http.Request) {
		received.Store(r.FormValue("pin"))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Done</title><p>PIN accepted</p>`)
	})
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)

	logs := &syncBuffer{}
	spans, tr := newCollector() // the worker's commands and browser calls are traced (tracing_test.go)
	s := newStack(t, func(c *app.Config) {
		c.ServerKey = serverkey.Ephemeral()
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Tracer = tr
	})
	s.startWorkers(t)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "plan-canary", map[string]any{
		"goal": "send the PIN", "policy": map[string]any{"allowed_origins": []string{site.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "PIN accepted"}}},
		"plan": []map[string]any{
			{"op": "navigate", "args": map[string]any{"url": site.URL + "/pin"}},
			{"op": "act", "args": map[string]any{"action": "fill", "query": map[string]any{"label": "PIN"}, "value": canary}},
			{"op": "act", "args": map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Send"}}},
		},
	})
	taskID := r.str("task", "task_id")
	responses := [][]byte{r.raw}
	done := s.awaitState(t, taskID, "succeeded", "failed")
	if done.str("task", "state") != "succeeded" {
		t.Fatalf("task: %s", done.raw)
	}
	if got, _ := received.Load().(string); got != canary {
		t.Fatalf("the site received %q, want the plan's fill value", got)
	}
	responses = append(responses, done.raw,
		s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil).raw)

	for i, raw := range responses {
		if bytes.Contains(raw, []byte(canary)) {
			t.Fatalf("API response %d holds the fill value: %s", i, raw)
		}
	}
	if strings.Contains(logs.String(), canary) {
		t.Fatal("the logs hold the fill value")
	}
	assertNoCanaryInSpans(t, spans.Ended(), canary)
	// Every text, JSON and byte column of every table of the database.
	ctx := context.Background()
	rows, err := s.db.Query(ctx, `SELECT table_name, column_name, data_type FROM information_schema.columns
		WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'jsonb', 'json', 'bytea', 'ARRAY')`)
	if err != nil {
		t.Fatal(err)
	}
	type column struct{ table, name, typ string }
	var cols []column
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.table, &c.name, &c.typ); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	if len(cols) < 50 {
		t.Fatalf("only %d columns found: the scan would prove nothing", len(cols))
	}
	sealed := 0
	for _, c := range cols {
		var n int
		cond := fmt.Sprintf(`%q::text LIKE '%%' || $1 || '%%'`, c.name)
		if c.typ == "bytea" {
			cond = fmt.Sprintf(`position(convert_to($1, 'UTF8') in %q) > 0`, c.name)
		}
		if err := s.db.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q WHERE %s`, c.table, cond), canary).Scan(&n); err != nil {
			t.Fatalf("%s.%s: %v", c.table, c.name, err)
		}
		if n > 0 {
			t.Errorf("%s.%s holds the fill value in %d rows", c.table, c.name, n)
		}
	}
	if err := s.db.QueryRow(ctx, `SELECT count(*) FROM task_plan_step WHERE task_id = $1 AND sealed_values IS NOT NULL
		AND args->>'value' = '***'`, taskID).Scan(&sealed); err != nil || sealed != 1 {
		t.Fatalf("%d sealed, masked steps (%v), want the fill step", sealed, err)
	}
}
