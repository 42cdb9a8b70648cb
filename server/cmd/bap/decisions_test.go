package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/waitfor"
)

// `bap decisions list` shows an operator what each decision is bound to (issue #23 item 6): run
// as a process next to a running node, it lists the origin-policy decision that refused a
// navigation with its session, task, operation and the origin it reached for, and the request
// authorization on a /browser-sessions/{id} route with that session and its task.
func TestDecisionsListShowsWhatEachDecisionIsBoundTo(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	r := start(t, bin, dir)

	taskID := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "dec-task",
		`{"goal":"decisions an operator can read","policy":{"allowed_origins":["https://shop.example.com"]}}`), "task", "task_id")
	status, m, raw := api(r.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "dec-session", `{}`)
	if status == 503 {
		t.Fatalf("bap serve has no browser (install chromium (scripts/install-deps.sh): a required test never skips): %s", raw)
	}
	if status != 201 {
		t.Fatalf("create_browser_session: %d %s", status, raw)
	}
	sessionID := field(m, "session", "session_id")
	const elsewhere = "https://elsewhere.example"
	if status, m, raw := api(r.listen, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", "dec-nav",
		`{"url":"`+elsewhere+`/pay"}`); status != 403 || field(m, "code") != "origin_not_allowed" {
		t.Fatalf("navigate outside the allowed origins: %d %s, want 403 origin_not_allowed", status, raw)
	}
	mustAPI(t, 200, r.listen, "POST", "/bap/v1/browser-sessions/"+sessionID+"/close", "dec-close", `{}`)

	type decision struct {
		Point         string   `json:"decision_point"`
		Outcome       string   `json:"outcome"`
		Reason        string   `json:"reason"`
		Operation     string   `json:"operation"`
		Actor         string   `json:"actor"`
		Workload      string   `json:"workload"`
		Tenant        string   `json:"tenant"`
		Session       string   `json:"session_id"`
		Task          string   `json:"task_id"`
		TargetOrigin  string   `json:"target_origin"`
		OriginScope   []string `json:"origin_scope"`
		Purpose       string   `json:"purpose"`
		ApprovalState string   `json:"approval_state"`
	}
	list := func() (policy, request *decision, out string) {
		cmd := exec.Command(bin, "decisions", "list", "--data-dir", dir, "--task", taskID)
		cmd.Env = append(os.Environ(), "BAP_DATABASE_URL=")
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		if err := cmd.Run(); err != nil {
			t.Fatalf("bap decisions list: %v\n%s", err, se.String())
		}
		sc := bufio.NewScanner(&so)
		for sc.Scan() {
			var d decision
			if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
				t.Fatalf("bap decisions list printed %q: %v", sc.Text(), err)
			}
			switch {
			case d.Point == "origin_policy" && d.Outcome == "refused":
				policy = &d
			case d.Point == "request" && d.Operation == "close_browser_session":
				request = &d
			}
		}
		return policy, request, so.String()
	}
	// The policy's decision commits with the command; the request's is written by a batched writer.
	var policy, request *decision
	var out string
	waitfor.Until(t, 30*time.Second, "bap decisions list shows both decisions", func() (bool, string) {
		policy, request, out = list()
		return policy != nil && request != nil, out
	})
	if policy.Session != sessionID || policy.Task != taskID || policy.Operation != "navigate" || policy.TargetOrigin != elsewhere ||
		policy.Reason != "origin_not_allowed" || policy.Tenant != "local" || policy.Actor != "agent:local" || policy.Workload == "" ||
		policy.Purpose != "decisions an operator can read" || len(policy.OriginScope) != 1 || policy.OriginScope[0] != "https://shop.example.com" ||
		policy.ApprovalState != "none" {
		t.Errorf("the refused navigation's decision: %+v; want session %s, task %s, target origin %s\n%s", policy, sessionID, taskID, elsewhere, out)
	}
	if request.Session != sessionID || request.Task != taskID || request.Outcome != "allowed" || request.Actor != "agent:local" {
		t.Errorf("close_browser_session's request decision: %+v; want session %s, task %s\n%s", request, sessionID, taskID, out)
	}
}
