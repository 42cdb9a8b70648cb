package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/orchestrator/orchestratortest"
	"github.com/originweave/bap/server/internal/pgcluster"
)

// signInSite is a sign-in form that records every password posted to it.
type signInSite struct {
	*httptest.Server
	mu       sync.Mutex
	received []string
}

func newSignInSite(t *testing.T, extra func(*http.ServeMux)) *signInSite {
	t.Helper()
	s := &signInSite{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Sign in</title><h1>Sign in</h1><form method="post" action="/login">
<label for="u">User</label><input id="u" name="user" type="text">
<label for="pw">Password</label><input id="pw" name="pw" type="password">
<button type="submit">Sign in</button></form>`)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.received = append(s.received, r.FormValue("pw"))
		s.mu.Unlock()
		// A session cookie the checkpoint keeps (sealed): it must not be readable in the dump.
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: "cookie-CANARY-5e1b77", Path: "/"})
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Welcome</title><h1>Welcome back</h1>`)
	})
	if extra != nil {
		extra(mux)
	}
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *signInSite) passwords() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.received...)
}

// findFrameNode finds a node by role and name in an observation, inside the iframe titled frame when
// frame is set; "" when there is none.
func findFrameNode(nodes any, frame, role, name string) string {
	list, _ := nodes.([]any)
	for _, n := range list {
		m, _ := n.(map[string]any)
		if frame != "" {
			if m["role"] == "iframe" && m["name"] == frame {
				if id := findFrameNode(m["children"], "", role, name); id != "" {
					return id
				}
			}
		} else if m["role"] == role && m["name"] == name {
			return m["node_id"].(string)
		}
		if id := findFrameNode(m["children"], frame, role, name); id != "" {
			return id
		}
	}
	return ""
}

// Issue #17 as a new user tries it: `bap secret put` stores a password for the shop's origin; an
// agent signs in with act fill {secret_ref} over HTTP and over MCP, a delegated plan and a
// goal-driven task (the fake orchestrator) do too, with evidence and a checkpoint on the way; the
// same reference aimed at another origin, at a field in a cross-origin iframe, and after the
// secret's deletion is refused and types nothing. `bap keys rotate`, a restart, and the task still
// resumes. Afterwards the database dump, the server's log, /metrics, every event, every MCP answer
// and every request the orchestrator received hold neither the password nor an unkeyed digest of
// it — while the shop received it each time; the checkpoint and the signing keys are ciphertext.
func TestSecretByReferenceCanarySweep(t *testing.T) {
	t.Parallel()
	const canary = "pw-CANARY-sweep-d41c9e"
	sum := sha256.Sum256([]byte(canary))
	needles := map[string]string{"the password": canary, "its sha256 (hex)": hex.EncodeToString(sum[:]),
		"its sha256 (base64)": base64.StdEncoding.EncodeToString(sum[:]), "its sha256 (base64url)": base64.RawURLEncoding.EncodeToString(sum[:])}
	sweep := func(where, text string) {
		t.Helper()
		for what, n := range needles {
			if strings.Contains(text, n) || strings.Contains(text, strings.TrimRight(n, "=")) {
				t.Errorf("%s holds %s", where, what)
			}
		}
	}

	partner := newSignInSite(t, nil) // another origin
	shopSite := newSignInSite(t, func(mux *http.ServeMux) {
		mux.HandleFunc("GET /frame", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><title>Partner sign-in</title><iframe title="Partner" src="%s/login" width="600" height="300"></iframe>`, partner.URL)
		})
	})
	shop, other := shopSite.URL, partner.URL

	orch := orchestratortest.Start(t, orchestratortest.Config{
		Models: []orchestratortest.Model{{ID: "m-one", Provider: "acme", Region: "eu",
			RetentionDays: orchestratortest.Days(0), MaxClassification: "restricted"}},
		Token: "workload-token",
	})
	bin := buildBinary(t)
	dir := dataDir(t)
	serveArgs := []string{"--orchestrator-url", orch.URL, "--workers", "1"}
	env := []string{"BAP_ORCHESTRATOR_TOKEN=workload-token"}
	r := serveWith(t, bin, dir, env, serveArgs...)
	logs := []*syncLog{r.logs}

	// The operator stores the password (standard input, never the command line).
	sec := admin(t, bin, dir, canary+"\n", "secret", "put", "--tenant", "local", "--name", "shop-login", "--origin", shop)
	secretID := field(sec, "secret_id")
	if !strings.HasPrefix(secretID, "sec_") || strings.Contains(fmt.Sprint(sec), canary) {
		t.Fatalf("bap secret put: %v", sec)
	}
	// The agent can neither store nor list secrets.
	if st, m, raw := api(r.listen, "POST", "/bap/v1/secrets", "agent-put", `{"name":"x","origins":["`+shop+`"],"value":"agent-typed-1"}`); st != 403 || field(m, "code") != "insufficient_scope" {
		t.Fatalf("the agent's create_secret: %d %s", st, raw)
	}

	policy := `{"allowed_origins":["` + shop + `","` + other + `"]}`
	newTask := func(key string) (taskID, sessionID string) {
		taskID = field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", key, `{"goal":"sign in","policy":`+policy+`}`), "task", "task_id")
		sessionID = field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", key+"-s", `{}`), "session", "session_id")
		return taskID, sessionID
	}
	var taskIDs []string
	fillRef := func(target string) string {
		return `{"action":"fill",` + target + `,"secret_ref":"` + secretID + `"}`
	}

	// 1. Interactive, over HTTP: the agent finds the secret by name, signs in by reference.
	t1, s1 := newTask("t1")
	taskIDs = append(taskIDs, t1)
	ls := mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+t1+"/secrets", "", "")
	if list, _ := ls["secrets"].([]any); len(list) != 1 || list[0].(map[string]any)["name"] != "shop-login" {
		t.Fatalf("list_task_secrets: %v", ls)
	}
	b1 := "/bap/v1/browser-sessions/" + s1
	mustAPI(t, 200, r.listen, "POST", b1+"/navigate", "t1-nav", `{"url":"`+shop+`/login"}`)
	mustAPI(t, 200, r.listen, "POST", b1+"/act", "t1-user", `{"action":"fill","query":{"label":"User"},"value":"buyer"}`)
	mustAPI(t, 200, r.listen, "POST", b1+"/act", "t1-pw", fillRef(`"query":{"label":"Password"}`))
	ev := mustAPI(t, 200, r.listen, "POST", b1+"/evidence", "t1-ev", `{"kinds":["screenshot","dom_snapshot","ax_snapshot"]}`)
	arts, _ := ev["artifacts"].([]any)
	if len(arts) != 3 {
		t.Fatalf("capture_evidence: %v", ev)
	}
	for _, a := range arts {
		id := a.(map[string]any)["artifact_id"].(string)
		resp, err := http.Get("http://" + r.listen + "/bap/v1/artifacts/" + id)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("get_artifact %s: %d", id, resp.StatusCode)
		}
		sweep("evidence "+id, string(body))
	}
	mustAPI(t, 200, r.listen, "POST", b1+"/act", "t1-submit", `{"action":"click","query":{"role":"button","name":"Sign in"}}`)
	if got := shopSite.passwords(); len(got) != 1 || got[0] != canary {
		t.Fatalf("the shop received %q, want the stored password", got)
	}
	chk := field(mustAPI(t, 200, r.listen, "POST", b1+"/checkpoint", "t1-chk", `{}`), "checkpoint", "checkpoint_id")

	// 2. Another origin, and a field of a cross-origin iframe: refused, nothing typed.
	mustAPI(t, 200, r.listen, "POST", b1+"/navigate", "t1-other", `{"url":"`+other+`/login"}`)
	if st, m, raw := api(r.listen, "POST", b1+"/act", "t1-other-pw", fillRef(`"query":{"label":"Password"}`)); st != 403 ||
		field(m, "code") != "secret_origin_mismatch" || field(m, "receipt", "outcome") != "rejected" {
		t.Fatalf("a secret of %s on %s: %d %s", shop, other, st, raw)
	}
	mustAPI(t, 200, r.listen, "POST", b1+"/act", "t1-other-submit", `{"action":"click","query":{"role":"button","name":"Sign in"}}`)
	mustAPI(t, 200, r.listen, "POST", b1+"/navigate", "t1-frame", `{"url":"`+shop+`/frame"}`)
	obs := mustAPI(t, 200, r.listen, "POST", b1+"/observe", "", `{"mode":"full"}`)
	framePW, frameBtn := findFrameNode(obs["nodes"], "Partner", "textbox", "Password"), findFrameNode(obs["nodes"], "Partner", "button", "Sign in")
	if framePW == "" || frameBtn == "" {
		t.Fatalf("the partner's iframe form is not in the observation: %v", obs)
	}
	if st, m, raw := api(r.listen, "POST", b1+"/act", "t1-frame-pw", fillRef(`"node_id":"`+framePW+`"`)); st != 403 || field(m, "code") != "secret_origin_mismatch" {
		t.Fatalf("a secret into a cross-origin iframe's field: %d %s", st, raw)
	}
	mustAPI(t, 200, r.listen, "POST", b1+"/act", "t1-frame-submit", `{"action":"click","node_id":"`+frameBtn+`"}`)
	if got := partner.passwords(); len(got) != 2 || got[0] != "" || got[1] != "" {
		t.Fatalf("the other origin received %q, want two empty passwords (nothing typed)", got)
	}

	// 3. Over MCP.
	t2, s2 := newTask("t2")
	taskIDs = append(taskIDs, t2)
	var mcpAnswers []string
	tool := func(name string, args map[string]any) map[string]any {
		t.Helper()
		_, m := mcpPost(t, "http://"+r.listen+"/mcp", "", "tools/call", map[string]any{"name": name, "arguments": args})
		raw, _ := json.Marshal(m)
		mcpAnswers = append(mcpAnswers, string(raw))
		res, _ := m["result"].(map[string]any)
		if res == nil || res["isError"] == true {
			t.Fatalf("MCP %s: %s", name, raw)
		}
		return res
	}
	if res := tool("list_task_secrets", map[string]any{"task_id": t2}); !strings.Contains(fmt.Sprint(res["structuredContent"]), secretID) {
		t.Fatalf("MCP list_task_secrets: %v", res)
	}
	tool("navigate", map[string]any{"session_id": s2, "url": shop + "/login", "idempotency_key": "m-nav"})
	tool("act", map[string]any{"session_id": s2, "action": "fill", "query": map[string]any{"label": "Password"}, "secret_ref": secretID, "idempotency_key": "m-pw"})
	tool("act", map[string]any{"session_id": s2, "action": "click", "query": map[string]any{"role": "button", "name": "Sign in"}, "idempotency_key": "m-go"})
	if got := shopSite.passwords(); len(got) != 2 || got[1] != canary {
		t.Fatalf("after the MCP sign-in the shop received %q", got)
	}

	awaitEnd := func(taskID string) map[string]any {
		t.Helper()
		final := taskEnd(t, r.listen, taskID, 120*time.Second)
		if field(final, "task", "state") != "succeeded" {
			_, _, hist := api(r.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
			t.Fatalf("task %s: %v\n%s", taskID, final, hist)
		}
		return final
	}
	// 4. A delegated plan.
	login := `{"op":"navigate","args":{"url":"` + shop + `/login"}}`
	submit := `{"op":"act","args":{"action":"click","query":{"role":"button","name":"Sign in"}}}`
	t3 := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "t3", `{"goal":"sign in","policy":`+policy+`,
		"postcondition":{"all":[{"text_present":"Welcome back"}]},
		"plan":[`+login+`,{"op":"act","args":`+fillRef(`"query":{"label":"Password"}`)+`},`+submit+`]}`), "task", "task_id")
	taskIDs = append(taskIDs, t3)
	awaitEnd(t3)
	if got := shopSite.passwords(); len(got) != 3 || got[2] != canary {
		t.Fatalf("after the plan the shop received %q", got)
	}

	// 5. A goal-driven task: the planner is told the secret's reference and name, and fills by it.
	step := func(op string, args map[string]any) orchestratortest.Answer {
		return orchestratortest.JSON(map[string]any{"op": op, "args": args, "reason": "scripted"})
	}
	allow := orchestratortest.JSON(map[string]any{"verdict": "allow", "classification": "public", "reason": "a sign-in page"})
	orch.Script("m-one",
		step("navigate", map[string]any{"url": shop + "/login"}), allow,
		step("act", map[string]any{"action": "fill", "query": map[string]any{"label": "Password"}, "secret_ref": secretID}), allow,
		step("act", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Sign in"}}), allow,
		step("done", map[string]any{}),
		orchestratortest.JSON(map[string]any{"verdict": "yes", "reason": "signed in"}),
	)
	t4 := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "t4", `{"goal":"sign in to the shop","mode":"autonomous",
		"policy":`+policy+`,"model_policy":{"allowed_regions":["eu"]},"postcondition":{"all":[{"text_present":"Welcome back"}]}}`), "task", "task_id")
	taskIDs = append(taskIDs, t4)
	awaitEnd(t4)
	if got := shopSite.passwords(); len(got) != 4 || got[3] != canary {
		t.Fatalf("after the goal-driven task the shop received %q", got)
	}
	if !orch.Saw(secretID) || !orch.Saw("shop-login") {
		t.Fatal("the planner was not told the usable secret's reference and name")
	}

	// 6. Deleted: refused from then on, before anything runs.
	// The operator's API, on the Unix socket.
	req, _ := http.NewRequestWithContext(context.Background(), "POST", "http://localhost/bap/v1/secrets/"+secretID+"/delete", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "op-del")
	resp, err := unixClient(r.socket).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"deleted":true`) {
		t.Fatalf("the operator's delete_secret: %d %s", resp.StatusCode, raw)
	}
	mustAPI(t, 200, r.listen, "POST", "/bap/v1/browser-sessions/"+s2+"/navigate", "m-nav-2", `{"url":"`+shop+`/login"}`)
	if st, m, raw := api(r.listen, "POST", "/bap/v1/browser-sessions/"+s2+"/act", "m-pw-2", fillRef(`"query":{"label":"Password"}`)); st != 404 || field(m, "code") != "secret_not_found" {
		t.Fatalf("a deleted secret's reference: %d %s", st, raw)
	}
	metrics := func() string {
		resp, err := http.Get("http://" + r.listen + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	sweep("/metrics", metrics())

	// 7. A new master key while the server runs, a restart, and the checkpointed task resumes.
	rot := admin(t, bin, dir, "", "keys", "rotate")
	if fmt.Sprint(rot) == "" {
		t.Fatal("bap keys rotate printed nothing")
	}
	_ = r.stop(t, syscall.SIGTERM)
	r = serveWith(t, bin, dir, env, serveArgs...)
	logs = append(logs, r.logs)
	_, _, _ = api(r.listen, "POST", b1+"/act", "t1-after-restart", `{"action":"click","node_id":"`+frameBtn+`"}`) // finds the session lost
	res := mustAPI(t, 200, r.listen, "POST", "/bap/v1/tasks/"+t1+"/resume", "t1-resume", `{"checkpoint_id":"`+chk+`"}`)
	if field(res, "task", "state") != "running" || field(res, "session", "from_checkpoint") != chk {
		t.Fatalf("resume after bap keys rotate: %v", res)
	}
	sweep("/metrics", metrics())

	// The sweep: events, MCP answers, the orchestrator's requests, the logs, the database dump.
	for _, id := range taskIDs {
		_, _, hist := api(r.listen, "GET", "/bap/v1/tasks/"+id+"/events?limit=1000", "", "")
		sweep("the events of "+id, hist)
		if id == t1 && (!strings.Contains(hist, `"secret_id":"`+secretID+`"`) || !strings.Contains(hist, `"origin":"`+shop+`"`)) {
			t.Errorf("action.performed does not name the secret and the origin it was typed into:\n%s", hist)
		}
	}
	// Each task's evidence bundle (issue #20): history, artifacts, PROV, once the task has ended.
	for _, id := range taskIDs {
		if st, _, raw := api(r.listen, "POST", "/bap/v1/tasks/"+id+"/cancel", id+"-sweep-cancel", `{}`); st != 200 && st != 409 {
			t.Fatalf("cancel %s before its bundle: %d %s", id, st, raw)
		}
		st, _, bundle := api(r.listen, "GET", "/bap/v1/tasks/"+id+"/bundle", "", "")
		if st != 200 || !strings.Contains(bundle, "history.jsonl") {
			t.Fatalf("the bundle of %s: %d", id, st)
		}
		sweep("the bundle of "+id, bundle)
	}
	for _, a := range mcpAnswers {
		sweep("an MCP answer", a)
	}
	for what, n := range needles {
		if orch.Saw(n) {
			t.Errorf("the orchestrator received %s", what)
		}
	}
	for _, l := range logs {
		sweep("the server log", l.String())
	}
	dsn, err := pgcluster.ConnStringFor(dir, "bap")
	if err != nil {
		t.Fatal(err)
	}
	pgDump, err := pgcluster.ProgramPath(context.Background(), "pg_dump")
	if err != nil {
		t.Fatal(err)
	}
	dump, err := exec.Command(pgDump, "--no-owner", "-d", dsn).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if len(dump) < 10_000 || !strings.Contains(string(dump), "tenant_secret_audit") {
		t.Fatalf("pg_dump printed %d bytes", len(dump))
	}
	sweep("pg_dump", string(dump))
	if strings.Contains(string(dump), "cookie-CANARY-5e1b77") {
		t.Error("the checkpoint's cookie jar is readable in pg_dump")
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var clearKeys, sealedCheckpoints int
	if err := conn.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM token_signing_key WHERE get_byte(private_key, 0) = 48),
		(SELECT count(*) FROM artifact_reference WHERE media_type = 'application/vnd.bap.sealed')`).Scan(&clearKeys, &sealedCheckpoints); err != nil {
		t.Fatal(err)
	}
	if clearKeys != 0 || sealedCheckpoints == 0 {
		t.Errorf("%d signing keys in clear (DER), %d sealed checkpoint artifacts", clearKeys, sealedCheckpoints)
	}
}
