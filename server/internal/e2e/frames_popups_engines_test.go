package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/waitfor"
)

// wireNode is a node of an observe or query_nodes answer, as the wire spells it.
type wireNode struct {
	NodeID   string     `json:"node_id"`
	Role     string     `json:"role"`
	Name     string     `json:"name"`
	Children []wireNode `json:"children"`
}

func findWire(ns []wireNode, role, name string) (wireNode, bool) {
	for _, n := range ns {
		if n.Role == role && n.Name == name {
			return n, true
		}
		if c, ok := findWire(n.Children, role, name); ok {
			return c, true
		}
	}
	return wireNode{}, false
}

// A page with a cross-site iframe and a link that opens a tab, on each engine of a node running
// both (issue #19): observe shows the frame's nodes under its iframe node, fill and click by their
// handles land in the frame, the link's tab is in the act's new_contexts and is observed by its
// context_id and recorded as opened from the first tab, the live view sends JPEG frames of the
// tab the agent acted in — and no answer carries a raw BiDi id.
func TestFramesAndPopupsOnEachEngine(t *testing.T) {
	t.Parallel()
	s := newStack(t, bothEngines(t))
	mux := http.NewServeMux()
	html := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(body))
	}
	var site string
	mux.HandleFunc("GET /page", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<!doctype html><title>Frames and tabs</title><a href="/thanks" target="_blank">Open in new tab</a>
<iframe title="Cross site frame" src="`+site+`/child" width="400" height="200"></iframe>`)
	})
	mux.HandleFunc("GET /child", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<!doctype html><title>Child</title><label>Frame input <input id="fin"></label>
<button onclick="document.getElementById('out').textContent = 'clicked ' + document.getElementById('fin').value">Frame button</button><p id="out"></p>`)
	})
	mux.HandleFunc("GET /thanks", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<!doctype html><title>Thanks</title><h1>Thank you</h1>`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	site = strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	for _, engine := range []string{"chromium", "firefox"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			k := "fp-" + engine + "-"
			must := func(want int, method, path, key string, body any) reply {
				t.Helper()
				r := s.must(t, want, method, path, key, body)
				assertNoBiDiIDs(t, r.raw)
				return r
			}
			nodes := func(r reply) []wireNode {
				t.Helper()
				var v struct {
					Nodes []wireNode `json:"nodes"`
				}
				if err := json.Unmarshal(r.raw, &v); err != nil {
					t.Fatal(err)
				}
				return v.Nodes
			}
			taskID := must(201, "POST", "/bap/v1/tasks", k+"task", map[string]any{
				"goal": "use a frame and a tab", "policy": map[string]any{"allowed_origins": []string{srv.URL, site}},
			}).str("task", "task_id")
			sid := must(201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", k+"session",
				map[string]any{"engine": engine}).str("session", "session_id")
			base := "/bap/v1/browser-sessions/" + sid
			must(200, "POST", base+"/navigate", k+"nav", map[string]any{"url": srv.URL + "/page"})
			var in, btn wireNode
			waitfor.Until(t, 15*time.Second, "the frame's nodes in the snapshot", func() (bool, string) {
				obs := nodes(must(200, "POST", base+"/observe", "", map[string]any{}))
				f, ok := findWire(obs, "iframe", "Cross site frame")
				if !ok {
					return false, "no iframe node"
				}
				in, _ = findWire(f.Children, "textbox", "Frame input")
				btn, ok = findWire(f.Children, "button", "Frame button")
				return ok && in.NodeID != "", "no frame nodes yet"
			})
			must(200, "POST", base+"/act", k+"fill", map[string]any{"action": "fill", "node_id": in.NodeID, "value": "hi"})
			must(200, "POST", base+"/act", k+"click", map[string]any{"action": "click", "node_id": btn.NodeID})
			if q := nodes(must(200, "POST", base+"/query-nodes", "", map[string]any{"query": map[string]any{"text": "clicked hi", "exact": true}})); len(q) != 1 {
				t.Fatalf("the click in the frame did not land: %+v", q)
			}
			open := must(200, "POST", base+"/act", k+"open", map[string]any{"action": "click", "query": map[string]any{"role": "link", "name": "Open in new tab"}})
			tabs, _ := open.body["new_contexts"].([]any)
			if len(tabs) != 1 || open.body["navigated"] == true {
				t.Fatalf("target=_blank: %s", open.raw)
			}
			popup, _ := tabs[0].(string)
			waitfor.Until(t, 15*time.Second, "the tab's page", func() (bool, string) {
				obs := must(200, "POST", base+"/observe", "", map[string]any{"context_id": popup})
				_, ok := findWire(nodes(obs), "heading", "Thank you")
				return ok && obs.str("context_id") == popup, string(obs.raw)
			})
			// The console's live view (what its WebSocket sends): a JPEG of the tab the agent last
			// acted in, the frame's document included.
			enough := errors.New("one frame")
			err := s.svc.WatchSession(context.Background(), app.Actor{Tenant: "local", Subject: "operator:local"}, sid, func(f page.LiveFrame) error {
				if !bytes.HasPrefix(f.JPEG, []byte{0xFF, 0xD8, 0xFF}) || f.ContextID != open.str("context_id") {
					t.Fatalf("live frame of %s: % x", f.ContextID, f.JPEG[:min(8, len(f.JPEG))])
				}
				return enough
			})
			if !errors.Is(err, enough) {
				t.Fatalf("live view on %s: %v", engine, err)
			}
			// The session's history records the tab, opened from the first one.
			waitfor.Until(t, 15*time.Second, "browsing_context.opened of the tab", func() (bool, string) {
				hist := must(200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
				events, _ := hist.body["events"].([]any)
				for _, e := range events {
					e, _ := e.(map[string]any)
					d, _ := e["data"].(map[string]any)
					if e["type"] == "browsing_context.opened" && d["context_id"] == popup && d["opener"] == open.str("context_id") {
						return true, ""
					}
				}
				return false, string(hist.raw)
			})
		})
	}
}
