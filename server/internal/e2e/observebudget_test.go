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

// Observation budgets over HTTP: max_bytes parts each under the cap that together hand out every
// handle, a delta after a fill that holds the filled field, and the stable refusals (a cursor
// altered by the client, a since across epochs).
func TestObserveBudgetAndDeltaOverHTTP(t *testing.T) {
	t.Parallel()
	pg := catalogPage(t)
	s := newStack(t)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "budget-task", map[string]any{
		"goal": "read the catalog", "policy": map[string]any{"allowed_origins": []string{pg.URL}},
	})
	r = s.must(t, 201, "POST", "/bap/v1/tasks/"+r.str("task", "task_id")+"/browser-sessions", "budget-session", map[string]any{})
	sess := r.str("session", "session_id")
	base := "/bap/v1/browser-sessions/" + sess
	s.must(t, 200, "POST", base+"/navigate", "budget-nav", map[string]any{"url": pg.URL + "/"})

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
	parts := 0
	var cursor string
	for {
		r := s.must(t, 200, "POST", base+"/observe", "", req)
		parts++
		if len(r.raw) > maxBytes {
			t.Fatalf("part %d is %d bytes over max_bytes %d", parts, len(r.raw), maxBytes)
		}
		collectHandles(r.body["nodes"], got)
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
	s.must(t, 200, "POST", base+"/act", "budget-fill", map[string]any{"action": "fill", "node_id": name, "value": "Ada"})
	delta := s.must(t, 200, "POST", base+"/observe", "", map[string]any{"since": obsID})
	n, ok := findChange(delta.body["nodes"], name)
	if delta.str("since") != obsID || !ok || n["change"] != "changed" || n["value"] != "Ada" {
		t.Fatalf("delta after the fill: %s", delta.raw)
	}
	if len(delta.raw)*20 > len(whole.raw) {
		t.Fatalf("the delta (%d bytes) is more than 5%% of the whole observe (%d)", len(delta.raw), len(whole.raw))
	}

	s.must(t, 200, "POST", base+"/navigate", "budget-reload", map[string]any{"url": pg.URL + "/"})
	for _, body := range []map[string]any{{"since": obsID}, {"cursor": cursor}} {
		r := s.call(t, "POST", base+"/observe", "", body)
		if r.status != 409 || r.body["code"] != "observation_stale" {
			b, _ := json.Marshal(body)
			t.Fatalf("%s across epochs: %d %s", b, r.status, r.raw)
		}
	}
}
