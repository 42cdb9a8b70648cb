package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
)

// The recovery issue's story with a real process kill: sign in on a page, checkpoint, kill -9 the
// server, start it again on the same data dir, resume_task — the new session is still signed in
// (an HttpOnly cookie and local storage), the old handles get 409, and the history says why.
func TestKilledServerResumesFromCheckpoint(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	const secret = "sess-9c2e-kill"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /signin", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: secret, Path: "/", HttpOnly: true})
		http.Redirect(w, r, "/account?first=1", http.StatusFound)
	})
	mux.HandleFunc("GET /account", func(w http.ResponseWriter, r *http.Request) {
		who := "nobody"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Account</title><p>signed in: %s</p><p id="out"></p><button>Log out</button>
<script>if (location.search.includes("first")) localStorage.setItem("plan", "gold");
document.getElementById("out").textContent = "plan=" + (localStorage.getItem("plan") || "none");</script>`, who)
	})
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)

	r := start(t, bin, dir)
	taskID := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "resume-task",
		`{"goal":"stay signed in across a crash","policy":{"allowed_origins":["`+site.URL+`"]}}`), "task", "task_id")
	oldSID := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "resume-session", `{}`), "session", "session_id")
	base := "/bap/v1/browser-sessions/" + oldSID
	mustAPI(t, 200, r.listen, "POST", base+"/navigate", "resume-signin", `{"url":"`+site.URL+`/signin"}`)
	mustAPI(t, 200, r.listen, "POST", base+"/navigate", "resume-account", `{"url":"`+site.URL+`/account"}`)
	q := mustAPI(t, 200, r.listen, "POST", base+"/query-nodes", "", `{"query":{"role":"button","name":"Log out"}}`)
	nodes, _ := q["nodes"].([]any)
	if len(nodes) == 0 {
		t.Fatalf("no Log out button: %v", q)
	}
	handle := nodes[0].(map[string]any)["node_id"].(string)
	chk := field(mustAPI(t, 200, r.listen, "POST", base+"/checkpoint", "resume-chk", `{}`), "checkpoint", "checkpoint_id")

	_ = r.stop(t, syscall.SIGKILL)
	r = start(t, bin, dir)

	// The old session died with the server: its handles get 409, and the task, left without a
	// session and with a checkpoint, waits in checkpointed.
	status, m, raw := api(r.listen, "POST", base+"/act", "resume-old-handle", `{"action":"click","node_id":"`+handle+`"}`)
	if status != 409 || m["code"] != "browser_session_lost" {
		t.Fatalf("old handle after the crash: %d %s", status, raw)
	}
	if st := field(mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+taskID, "", ""), "task", "state"); st != "checkpointed" {
		t.Fatalf("task after losing its session: %s", st)
	}
	res := mustAPI(t, 200, r.listen, "POST", "/bap/v1/tasks/"+taskID+"/resume", "resume-1", `{"checkpoint_id":"`+chk+`"}`)
	newSID := field(res, "session", "session_id")
	if field(res, "task", "state") != "running" || newSID == "" || field(res, "session", "from_checkpoint") != chk {
		t.Fatalf("resume: %v", res)
	}
	text := mustAPI(t, 200, r.listen, "POST", "/bap/v1/browser-sessions/"+newSID+"/extract", "", `{"kind":"text"}`)
	if got, _ := text["data"].(string); !strings.Contains(got, "signed in: "+secret) || !strings.Contains(got, "plan=gold") {
		t.Fatalf("the resumed session is not signed in: %q", got)
	}
	if status, _, raw := api(r.listen, "POST", "/bap/v1/browser-sessions/"+newSID+"/act", "resume-old-in-new", `{"action":"click","node_id":"`+handle+`"}`); status < 400 {
		t.Fatalf("an old handle acted in the resumed session: %d %s", status, raw)
	}
	_, _, evs := api(r.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
	if strings.Contains(evs, secret) || !strings.Contains(evs, `"to":"checkpointed"`) || !strings.Contains(evs, `"trigger":"resume"`) {
		t.Fatalf("history: %s", evs)
	}
}
