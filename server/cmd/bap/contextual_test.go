package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	ot "github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
)

// Issue #21 as a new user tries it (docs/orchestrator.md, "contextual-orchestrator"): the pinned
// contextual-orchestrator started with the documented agents file, its two local:// agents backed
// by scripted providers; `bap serve --orchestrator-url` at it with the documented model
// configuration. An autonomous task completes succeeded/verified and its model.called events name
// the models that served (never the virtual one). Then one agent's upstream is killed and the
// orchestrator flooded past its 60 requests per minute: the next task falls back to the other
// agent (recorded) and waits out the rate limit, retrying, instead of failing all_models_failed.
func TestServeWithContextualOrchestrator(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	for _, p := range []string{"a", "b"} {
		mux.HandleFunc("GET /"+p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><title>Page %s</title><h1>Page %s</h1>`, strings.ToUpper(p), strings.ToUpper(p))
		})
	}
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)

	var (
		mu      sync.Mutex
		planner = []string{nav(site.URL + "/a"), `{"op":"done","args":{},"reason":"page A is shown"}`,
			nav(site.URL + "/b"), `{"op":"done","args":{},"reason":"page B is shown"}`}
		killed, didFlood bool
		flooded          = make(chan int, 1)
		real             *ot.Real
	)
	answer := func(r *ot.Request) ot.Answer {
		name := r.Chat.ResponseFormat.JSONSchema.Name
		mu.Lock()
		defer mu.Unlock()
		switch name {
		case "bap_step":
			if killed && !didFlood {
				didFlood = true
				// The first planner call of the second task: flood the orchestrator past its rate
				// limit while it waits for this answer.
				n, err := real.Flood(context.Background())
				if err != nil {
					t.Errorf("flood: %v", err)
				}
				flooded <- n
			}
			next := `{"op":"done","args":{},"reason":"nothing left"}`
			if len(planner) > 0 {
				next, planner = planner[0], planner[1:]
			}
			return ot.Text(next)
		case "bap_safety":
			return ot.JSON(map[string]any{"verdict": "allow", "classification": "public", "reason": "a public page"})
		case "bap_verdict":
			return ot.JSON(map[string]any{"verdict": "yes", "reason": "the page is shown"})
		}
		return ot.JSON(map[string]any{"summary": "a page", "facts": []string{}, "controls": []any{}})
	}
	large := ot.Start(t, ot.Config{Models: []ot.Model{{ID: "acme-large"}}, Handler: answer})
	small := ot.Start(t, ot.Config{Models: []ot.Model{{ID: "beta-small"}}, Handler: answer})
	agents, err := ot.RepoFile("docs/examples/contextual-orchestrator-agents.json")
	if err != nil {
		t.Fatal(err)
	}
	real = ot.StartContextualOrchestrator(t, ot.RealConfig{AgentsFile: agents,
		Providers: map[string]*ot.Server{"agent_large": large, "agent_small": small}})
	models, err := ot.RepoFile("docs/examples/contextual-orchestrator-models.json")
	if err != nil {
		t.Fatal(err)
	}

	bin := buildBinary(t)
	node := serveWith(t, bin, dataDir(t), []string{"BAP_ORCHESTRATOR_TOKEN=" + real.Token},
		"--orchestrator-url", real.URL, "--orchestrator-config", models, "--workers", "1")
	run := func(key, page string) (map[string]any, []event) {
		t.Helper()
		created := mustAPI(t, 201, node.listen, "POST", "/bap/v1/tasks", key,
			`{"goal":"show page `+page+`","mode":"autonomous","policy":{"allowed_origins":["`+site.URL+`"]},
			  "model_policy":{"allowed_regions":["eu"]},
			  "postcondition":{"all":[{"text_present":"Page `+page+`"}]}}`)
		taskID := field(created, "task", "task_id")
		final := taskEnd(t, node.listen, taskID, 170*time.Second)
		_, _, hist := api(node.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
		if field(final, "task", "state") != "succeeded" || field(final, "task", "verification") != "verified" {
			t.Fatalf("task %s: %v\nhistory: %s\nnode:\n%s", key, final, hist, node.logs)
		}
		var body struct {
			Events []event `json:"events"`
		}
		if err := json.Unmarshal([]byte(hist), &body); err != nil {
			t.Fatal(err)
		}
		return final, body.Events
	}

	_, evs := run("ctx-serve-1", "A")
	served := map[string]string{}
	for _, e := range evs {
		if e.Type == "model.called" {
			served[fmt.Sprint(e.Data["role"])] = fmt.Sprint(e.Data["model"])
			if e.Data["model"] == ot.VirtualModel || e.Data["requested_model"] != nil {
				t.Fatalf("model.called: %v", e.Data)
			}
		}
	}
	if served["planner"] != "acme-large" || served["safety"] != "acme-large" || served["verifier"] != "beta-small" {
		t.Fatalf("serving models by role: %v", served)
	}

	// Kill the large agent's upstream; the next task's first planner call floods the orchestrator.
	large.Close()
	mu.Lock()
	killed = true
	mu.Unlock()
	start := time.Now()
	_, evs = run("ctx-serve-2", "B")
	select {
	case n := <-flooded:
		t.Logf("flooded the orchestrator with %d requests; the task finished %s later", n, time.Since(start).Round(time.Second))
	default:
		t.Fatal("the orchestrator was never flooded")
	}
	fallbacks := 0
	for _, e := range evs {
		switch e.Type {
		case "model.fallback":
			if e.Data["from_model"] != "acme-large" || e.Data["to_model"] != "beta-small" || e.Data["reason"] != "HTTP 500 internal_error" {
				t.Fatalf("model.fallback: %v", e.Data)
			}
			fallbacks++
		case "model.called":
			if e.Data["model"] != "beta-small" {
				t.Fatalf("model.called after the outage: %v", e.Data)
			}
		}
	}
	if fallbacks == 0 {
		t.Fatal("no model.fallback recorded after the outage")
	}
	limited := 0
	for _, r := range real.Requests() {
		if r.Status == http.StatusTooManyRequests {
			limited++
		}
	}
	m := scrape(t, node.listen)
	if limited == 0 || m[`bap_orchestrator_refusals_total{kind="rate_limited"}`] == 0 {
		t.Fatalf("BAP never met the rate limit (%d 429s at the tap, metrics %v)", limited, m[`bap_orchestrator_refusals_total{kind="rate_limited"}`])
	}
	if !strings.Contains(node.logs.String(), "retrying") {
		t.Errorf("the node did not log its retries:\n%s", node.logs)
	}
}

type event struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

func nav(url string) string {
	return `{"op":"navigate","args":{"url":"` + url + `"},"reason":"open it"}`
}
