package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// catalogPage is a page of 200 products, each a link, a quantity field and a button: its
// observation takes several max_bytes parts.
func catalogPage(t *testing.T) *httptest.Server {
	t.Helper()
	var b strings.Builder
	b.WriteString(`<!doctype html><title>Catalog</title><h1>Catalog</h1><main><label>Full name <input name="n"></label><ul>`)
	for i := range 200 {
		fmt.Fprintf(&b, `<li><a href="/p/%d">Product %d</a> <label>Quantity %d <input type="number" value="1"></label> <button type="button">Add %d</button></li>`, i, i, i, i)
	}
	b.WriteString(`</ul></main>`)
	page := b.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// collectHandles gathers the node handles of an observe body's nodes.
func collectHandles(v any, into map[string]bool) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			collectHandles(e, into)
		}
	case map[string]any:
		if id, ok := x["node_id"].(string); ok {
			into[id] = true
		}
		collectHandles(x["children"], into)
	}
}

// findChange returns the node with handle id in a delta's nodes and its change.
func findChange(v any, id string) (map[string]any, bool) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if n, ok := findChange(e, id); ok {
				return n, true
			}
		}
	case map[string]any:
		if x["node_id"] == id {
			return x, true
		}
		return findChange(x["children"], id)
	}
	return nil, false
}

// mergePart appends an observe part's nodes to the nodes of the parts before it, as a client
// does: a node marked repeated stands for the last node already at its place.
func mergePart(t *testing.T, into, part []any) []any {
	t.Helper()
	for i, e := range part {
		n := e.(map[string]any)
		if n["repeated"] != true {
			return append(into, part[i:]...)
		}
		if i != 0 || len(into) == 0 {
			t.Fatalf("a repeated node that stands for nothing: %v", n)
		}
		last := into[len(into)-1].(map[string]any)
		kids, _ := last["children"].([]any)
		partKids, _ := n["children"].([]any)
		last["children"] = mergePart(t, kids, partKids)
	}
	return into
}

// Observation budgets over HTTP: max_bytes parts each under the cap that merge back into the
// whole observation, a delta after a fill that holds the filled field and one after a click that
// is at most 5% of the whole, and the stable refusals (a cursor altered by the client, a since
// and a cursor across epochs).
// Both engines answer alike, through the keeper the engine registry puts in front of their
// sessions (ADR 0028): Chromium over CDP, Firefox over WebDriver BiDi.
func TestObserveBudgetAndDeltaOverHTTP(t *testing.T) {
	t.Parallel()
	pg := catalogPage(t)
	s := newStack(t, bothEngines(t))
	for _, engine := range []string{"chromium", "firefox"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			observeBudgetAndDelta(t, s, pg.URL, engine)
		})
	}
}

func observeBudgetAndDelta(t *testing.T, s *stack, pageURL, engine string) {
	k := "budget-" + engine + "-"
	r := s.must(t, 201, "POST", "/bap/v1/tasks", k+"task", map[string]any{
		"goal": "read the catalog", "policy": map[string]any{"allowed_origins": []string{pageURL}},
	})
	r = s.must(t, 201, "POST", "/bap/v1/tasks/"+r.str("task", "task_id")+"/browser-sessions", k+"session", map[string]any{"engine": engine})
	sess := r.str("session", "session_id")
	base := "/bap/v1/browser-sessions/" + sess
	s.must(t, 200, "POST", base+"/navigate", k+"nav", map[string]any{"url": pageURL + "/"})

	whole := s.must(t, 200, "POST", base+"/observe", "", map[string]any{})
	obsID := whole.str("observation_id")
	if obsID == "" || whole.body["approx_tokens"].(float64) < 1 || whole.body["continuation"] != nil {
		t.Fatalf("whole observe: %s", whole.raw)
	}
	want := map[string]bool{}
	collectHandles(whole.body["nodes"], want)

	const maxBytes = 4096
	got := map[string]bool{}
	req := map[string]any{"max_bytes": maxBytes}
	parts, largest := 0, 0
	var cursor string
	var merged []any
	for {
		r := s.must(t, 200, "POST", base+"/observe", "", req)
		parts++
		if len(r.raw) > maxBytes {
			t.Fatalf("part %d is %d bytes over max_bytes %d", parts, len(r.raw), maxBytes)
		}
		largest = max(largest, len(r.raw))
		collectHandles(r.body["nodes"], got)
		merged = mergePart(t, merged, r.body["nodes"].([]any))
		c, _ := r.body["continuation"].(map[string]any)
		if c == nil {
			break
		}
		cursor = c["cursor"].(string)
		req = map[string]any{"cursor": cursor}
	}
	if parts < 2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("%d parts handed out %d handles, the whole observe %d", parts, len(got), len(want))
	}
	if !reflect.DeepEqual(merged, whole.body["nodes"]) {
		m, _ := json.Marshal(merged)
		t.Fatalf("the %d parts merge into %d bytes of nodes, not the whole observation's", parts, len(m))
	}

	// A cursor altered by the client is refused, never read.
	forged := []byte(cursor)
	forged[5] ^= 'A' ^ 'B'
	if forged[5] != 'A' && forged[5] != 'B' {
		forged[5] = 'A'
	}
	r = s.call(t, "POST", base+"/observe", "", map[string]any{"cursor": string(forged)})
	if r.status != 400 || r.body["code"] != "invalid_request" {
		t.Fatalf("forged cursor: %d %s", r.status, r.raw)
	}

	name := s.query(t, sess, map[string]any{"label": "Full name"})
	s.must(t, 200, "POST", base+"/act", k+"fill", map[string]any{"action": "fill", "node_id": name, "value": "Ada"})
	delta := s.must(t, 200, "POST", base+"/observe", "", map[string]any{"since": obsID})
	n, ok := findChange(delta.body["nodes"], name)
	if delta.str("since") != obsID || !ok || n["change"] != "changed" || n["value"] != "Ada" {
		t.Fatalf("delta after the fill: %s", delta.raw)
	}
	if len(delta.raw)*20 > len(whole.raw) {
		t.Fatalf("the delta (%d bytes) is more than 5%% of the whole observe (%d)", len(delta.raw), len(whole.raw))
	}

	// One click: the delta since the observation before it is the clicked button (now focused)
	// and the field that lost focus, under their ancestors.
	add := s.query(t, sess, map[string]any{"role": "button", "name": "Add 150", "exact": true})
	s.must(t, 200, "POST", base+"/act", k+"click", map[string]any{"action": "click", "node_id": add})
	click := s.must(t, 200, "POST", base+"/observe", "", map[string]any{"since": delta.str("observation_id")})
	if n, ok := findChange(click.body["nodes"], add); !ok || n["change"] != "changed" || n["focused"] != true {
		t.Fatalf("delta after the click: %s", click.raw)
	}
	if len(click.raw)*20 > len(whole.raw) {
		t.Fatalf("the delta after a click (%d bytes) is more than 5%% of the whole observe (%d)", len(click.raw), len(whole.raw))
	}
	t.Logf("%s catalog: whole observe %d bytes (%v tokens); %d parts under max_bytes %d, the largest %d bytes; delta after a fill %d bytes, after a click %d bytes",
		engine, len(whole.raw), whole.body["approx_tokens"], parts, maxBytes, largest, len(delta.raw), len(click.raw))

	s.must(t, 200, "POST", base+"/navigate", k+"reload", map[string]any{"url": pageURL + "/"})
	for _, body := range []map[string]any{{"since": obsID}, {"cursor": cursor}} {
		r := s.call(t, "POST", base+"/observe", "", body)
		if r.status != 409 || r.body["code"] != "observation_stale" {
			b, _ := json.Marshal(body)
			t.Fatalf("%s across epochs: %d %s", b, r.status, r.raw)
		}
	}
}
