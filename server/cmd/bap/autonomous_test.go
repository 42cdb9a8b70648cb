package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
)

// A goal-driven task as a new user runs it (issue #11, docs/orchestrator.md): `bap serve
// --orchestrator-url` pointed at an OpenAI-compatible orchestrator (the fake, over HTTP, with BAP's
// workload credential); create_task in autonomous mode; the worker asks the planner for each step,
// runs it, the verifier judges, close_task decides by the postcondition. The filled password never
// reaches the orchestrator.
func TestServeWithOrchestratorRunsAGoal(t *testing.T) {
	t.Parallel()
	const canary = "pw-CANARY-serve-93b1"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Sign in</title><h1>Sign in</h1>
<label for="pw">Password</label><input id="pw" type="password">`)
	})
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)

	orch := orchestratortest.Start(t, orchestratortest.Config{
		Models: []orchestratortest.Model{{ID: "m-one", Provider: "acme", Region: "eu",
			RetentionDays: orchestratortest.Days(0), MaxClassification: "restricted"}},
		Token: "workload-token",
	})
	step := func(op string, args map[string]any) orchestratortest.Answer {
		return orchestratortest.JSON(map[string]any{"op": op, "args": args, "reason": "scripted"})
	}
	// Single-model configuration: the one model serves every role, the safety role too — it judges
	// each proposed step before it runs (the page is short: the observer is not needed).
	allow := orchestratortest.JSON(map[string]any{"verdict": "allow", "classification": "public", "reason": "a sign-in page"})
	orch.Script("m-one", // the planner's answers with the safety verdicts, then the verifier's
		step("navigate", map[string]any{"url": site.URL + "/login"}), allow,
		step("act", map[string]any{"action": "fill", "query": map[string]any{"label": "Password"}, "value": canary}), allow,
		step("done", map[string]any{}),
		orchestratortest.JSON(map[string]any{"verdict": "yes", "reason": "the sign-in page is shown"}),
	)

	bin := buildBinary(t)
	node := serveWith(t, bin, dataDir(t), []string{"BAP_ORCHESTRATOR_TOKEN=workload-token"},
		"--orchestrator-url", orch.URL, "--workers", "1")
	created := mustAPI(t, 201, node.listen, "POST", "/bap/v1/tasks", "serve-auto",
		`{"goal":"sign in","mode":"autonomous","policy":{"allowed_origins":["`+site.URL+`"]},
		  "model_policy":{"allowed_regions":["eu"]},
		  "postcondition":{"all":[{"text_present":"Sign in"}]}}`)
	taskID := field(created, "task", "task_id")

	final := taskEnd(t, node.listen, taskID, 150*time.Second)
	_, _, hist := api(node.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
	if field(final, "task", "state") != "succeeded" || field(final, "task", "verification") != "verified" {
		t.Fatalf("task: %v\nhistory: %s\nnode:\n%s", final, hist, node.logs)
	}
	var body struct {
		Events []struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(hist), &body); err != nil {
		t.Fatal(err)
	}
	calls, verdict, safety := 0, "", 0
	for _, e := range body.Events {
		switch e.Type {
		case "safety.judged":
			if e.Data["verdict"] == "allow" {
				safety++
			}
		case "model.called":
			calls++
			if e.Data["model"] != "m-one" || len(fmt.Sprint(e.Data["prompt_sha256"])) != 64 {
				t.Fatalf("model.called: %v", e.Data)
			}
		case "verifier.judged":
			verdict, _ = e.Data["verdict"].(string)
		}
	}
	if calls != 6 || verdict != "yes" || safety != 2 {
		t.Fatalf("%d model calls (want 6: 3 planner, 2 safety, 1 verifier), verdict %q, %d safety verdicts\nhistory: %s", calls, verdict, safety, hist)
	}
	chats := orch.ChatRequests()
	if len(chats) != 6 {
		t.Fatalf("%d chat completions reached the orchestrator, want 6", len(chats))
	}
	for _, r := range chats {
		if r.Header.Get("Authorization") != "Bearer workload-token" {
			t.Fatalf("a model call without BAP's workload credential: %q", r.Header.Get("Authorization"))
		}
	}
	if orch.Saw(canary) || strings.Contains(hist, canary) {
		t.Fatal("the filled password reached the orchestrator or the history")
	}
	// The node's /metrics count the same calls by role.
	m := scrape(t, node.listen)
	for role, want := range map[string]float64{"planner": 3, "safety": 2, "verifier": 1} {
		if got := m[`bap_model_calls_total{model="m-one",outcome="answered",role="`+role+`"}`]; got != want {
			t.Errorf("/metrics: %v answered %s calls, want %v", got, role, want)
		}
	}
}
