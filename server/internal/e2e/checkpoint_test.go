package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// signedInAs is the session cookie the fixture shop sets at /signin; it must never leave the
// browser through the API (events, responses, artifacts).
const signedInAs = "alice-sess-7f3k"

// pageText is the visible text of a session's page.
func (s *stack) pageText(t *testing.T, sessionID string) string {
	t.Helper()
	r := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/extract", "", map[string]any{"kind": "text"})
	text, _ := r.body["data"].(string)
	return text
}

// loseSession makes the browser forget a session, as a crash of the node that held it would;
// the next request for it finds it gone. The session is on either engine.
func loseSession(t *testing.T, sessionID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if sess, ok := shared.Session(sessionID); ok {
		err = sess.Close(ctx)
	} else if ff, ok := openFirefoxSession(sessionID); ok {
		err = ff.Close(ctx)
	} else {
		t.Fatalf("session %s is not open in either browser", sessionID)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// signIn opens a task and a session signed in on the shop's account page.
func signIn(t *testing.T, s *stack, sh *shop, name string) (taskID, sessionID string) {
	t.Helper()
	return signInOn(t, s, sh, name, "")
}

// signInOn is signIn on engine ("": the node's default).
func signInOn(t *testing.T, s *stack, sh *shop, name, engine string) (taskID, sessionID string) {
	t.Helper()
	r := s.must(t, 201, "POST", "/bap/v1/tasks", name+"-task", map[string]any{
		"goal": "keep a signed-in session", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
	})
	taskID = r.str("task", "task_id")
	body := map[string]any{}
	if engine != "" {
		body["engine"] = engine
	}
	r = s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", name+"-session", body)
	sessionID = r.str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", name+"-signin", map[string]any{"url": sh.srv.URL + "/signin"})
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", name+"-account", map[string]any{"url": sh.srv.URL + "/account"})
	if got := s.pageText(t, sessionID); !strings.Contains(got, "signed in: "+signedInAs) || !strings.Contains(got, "local=3 items session=payment") {
		t.Fatalf("not signed in before the checkpoint: %q", got)
	}
	return taskID, sessionID
}

// The story: sign in, checkpoint, lose the browser, resume — the new session is still
// signed in (HttpOnly cookie, local and session storage), on the same page with a new epoch, and
// the old handles get 409. On each engine of a node running both (issue #19 item 4).
func TestCheckpointResumeKeepsTheSignedInSession(t *testing.T) {
	for _, engine := range []string{"chromium", "firefox"} {
		t.Run(engine, func(t *testing.T) { checkpointResumeKeepsTheSignedInSession(t, engine) })
	}
}

func checkpointResumeKeepsTheSignedInSession(t *testing.T, engine string) {
	s, sh := newStack(t, bothEngines(t)), newShop(t)
	taskID, oldSID := signInOn(t, s, sh, "resume", engine)
	oldObs := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+oldSID+"/observe", "", map[string]any{})
	oldEpoch := oldObs.str("epoch_id")
	logout := s.query(t, oldSID, map[string]any{"role": "button", "name": "Log out"})

	cp := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+oldSID+"/checkpoint", "resume-chk", map[string]any{})
	chk := cp.str("checkpoint", "checkpoint_id")
	if !strings.HasPrefix(chk, "chk_") || cp.str("checkpoint", "task_id") != taskID || cp.str("checkpoint", "session_id") != oldSID ||
		!strings.HasSuffix(cp.str("checkpoint", "url"), "/account") || cp.str("checkpoint", "epoch_id") != oldEpoch ||
		cp.str("checkpoint", "server_version") != "1.2.3" || len(cp.str("checkpoint", "policy_sha256")) != 64 ||
		cp.str("receipt", "outcome") != "applied" || cp.str("checkpoint", "engine") != engine {
		t.Fatalf("checkpoint response: %s", cp.raw)
	}
	if strings.Contains(string(cp.raw), signedInAs) {
		t.Fatalf("the checkpoint response carries the session cookie: %s", cp.raw)
	}
	// The state artifact holds the cookie: it exists, verifies, and is never served.
	var artifactID string
	if err := s.db.QueryRow(context.Background(), `SELECT artifact_id FROM task_checkpoint WHERE checkpoint_id = $1`, chk).Scan(&artifactID); err != nil {
		t.Fatal(err)
	}
	if r := s.call(t, "GET", "/bap/v1/artifacts/"+artifactID, "", nil); r.status != 404 || strings.Contains(string(r.raw), signedInAs) {
		t.Fatalf("get_artifact of checkpoint state: %d %s", r.status, r.raw)
	}
	if r := s.must(t, 200, "POST", "/bap/v1/artifacts/"+artifactID+"/verify", "", map[string]any{}); r.body["valid"] != true {
		t.Fatalf("checkpoint state does not verify: %s", r.raw)
	}

	// The node dies: its browser sessions are gone. The first request that finds the session
	// gone marks it lost; the task, left without sessions and with a checkpoint, is checkpointed.
	loseSession(t, oldSID)
	if r := s.call(t, "POST", "/bap/v1/browser-sessions/"+oldSID+"/act", "resume-old-click", map[string]any{"action": "click", "node_id": logout}); r.status != 409 || r.str("code") != "browser_session_lost" {
		t.Fatalf("old handle on the lost session: %d %s, want 409 browser_session_lost", r.status, r.raw)
	}
	if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "checkpointed" {
		t.Fatalf("task state after losing its only session = %s, want checkpointed", st)
	}
	// A checkpointed task takes no new plain session: it resumes.
	if r := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "resume-plain", map[string]any{}); r.status != 409 || r.str("code") != "invalid_transition" {
		t.Fatalf("plain session on a checkpointed task: %d %s", r.status, r.raw)
	}

	res := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/resume", "resume-1", map[string]any{"checkpoint_id": chk})
	newSID := res.str("session", "session_id")
	if res.str("task", "state") != "running" || newSID == "" || newSID == oldSID || res.str("session", "from_checkpoint") != chk ||
		res.str("receipt", "outcome") != "applied" || res.str("session", "engine") != engine {
		t.Fatalf("resume response: %s", res.raw)
	}
	again := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/resume", "resume-1", map[string]any{"checkpoint_id": chk})
	if again.status != 200 || string(again.raw) != string(res.raw) {
		t.Fatalf("replayed resume: %d %s", again.status, again.raw)
	}
	if r := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/resume", "resume-2", map[string]any{"checkpoint_id": chk}); r.status != 409 || r.str("code") != "invalid_transition" {
		t.Fatalf("resuming a running task: %d %s", r.status, r.raw)
	}

	if got := s.pageText(t, newSID); !strings.Contains(got, "signed in: "+signedInAs) || !strings.Contains(got, "local=3 items session=payment") {
		t.Fatalf("the resumed session is not signed in: %q", got)
	}
	obs := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+newSID+"/observe", "", map[string]any{})
	if obs.str("epoch_id") == oldEpoch || !strings.HasSuffix(obs.str("url"), "/account") {
		t.Fatalf("resumed page: epoch %s (old %s), url %s", obs.str("epoch_id"), oldEpoch, obs.str("url"))
	}
	// Handles of the lost session mean nothing in the new one.
	if r := s.call(t, "POST", "/bap/v1/browser-sessions/"+newSID+"/act", "resume-new-click", map[string]any{"action": "click", "node_id": logout}); r.status < 400 {
		t.Fatalf("an old handle acted in the resumed session: %d %s", r.status, r.raw)
	}

	ev := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	for _, want := range []string{`"checkpoint.created"`, `"browser_session.lost"`, `"to":"checkpointed"`, `"trigger":"resume"`} {
		if !strings.Contains(string(ev.raw), want) {
			t.Errorf("history lacks %s", want)
		}
	}
	if strings.Contains(string(ev.raw), signedInAs) || strings.Contains(string(ev.raw), "3 items") {
		t.Fatalf("the history carries checkpointed state: %s", ev.raw)
	}
}

// A checkpoint keeps every tab: a restored session reopens the popup beside its primary context,
// signed in and with the popup's own session storage, recorded as opened from the primary one.
// On Firefox a restore reopens the primary tab alone and counts the others out (docs/engines.md):
// the restored session has its primary context only, signed in.
func TestCheckpointReopensEveryTab(t *testing.T) {
	for _, engine := range []string{"chromium", "firefox"} {
		t.Run(engine, func(t *testing.T) { checkpointReopensEveryTab(t, engine) })
	}
}

func checkpointReopensEveryTab(t *testing.T, engine string) {
	s, sh := newStack(t, bothEngines(t)), newShop(t)
	taskID, sid := signInOn(t, s, sh, "tabs", engine)
	acted := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/act", "tabs-open", map[string]any{
		"action": "click", "query": map[string]any{"role": "button", "name": "Open statement"}})
	popups, _ := acted.body["new_contexts"].([]any)
	if len(popups) != 1 {
		t.Fatalf("the click opened no popup: %s", acted.raw)
	}
	chk := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/checkpoint", "tabs-chk", map[string]any{}).str("checkpoint", "checkpoint_id")

	r := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "tabs-restore", map[string]any{"from_checkpoint": chk})
	restored, primary := r.str("session", "session_id"), r.str("session", "context_id")
	// The reopened popup's browsing_context row is written in the answer's own transaction (the
	// restore returns the tabs it reopened, and create_browser_session records them before it
	// commits): it is there when the answer is, no polling.
	ctxs, openers, err := sessionContexts(s, restored)
	if err != nil {
		t.Fatal(err)
	}
	if engine == "firefox" {
		if len(ctxs) != 1 || ctxs[0] != primary || openers[0] != "" {
			t.Fatalf("contexts of the restored Firefox session: %v (openers %v), want its primary %s alone", ctxs, openers, primary)
		}
		if got := s.pageText(t, restored); !strings.Contains(got, "signed in: "+signedInAs) {
			t.Fatalf("primary context of the restored session: %q", got)
		}
		return
	}
	if len(ctxs) != 2 || ctxs[0] != primary || openers[0] != "" || openers[1] != primary || ctxs[1] == popups[0] {
		t.Fatalf("contexts of the restored session: %v (openers %v), primary %s, old popup %v", ctxs, openers, primary, popups[0])
	}
	if got := s.pageText(t, restored); !strings.Contains(got, "signed in: "+signedInAs) {
		t.Fatalf("primary context of the restored session: %q", got)
	}
	x := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+restored+"/extract", "", map[string]any{"kind": "text", "context_id": ctxs[1]})
	if got, _ := x.body["data"].(string); !strings.Contains(got, "statement for: "+signedInAs) || !strings.Contains(got, "session=payment") {
		t.Fatalf("reopened popup: %q", got)
	}
	// The history tells it: the reopened context, opened from the primary one, and a committed
	// navigation in each (held back by the browser until the session was recorded).
	hist := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	events, _ := hist.body["events"].([]any)
	committed := map[string]bool{}
	opened := false
	for _, e := range events {
		e := e.(map[string]any)
		d, _ := e["data"].(map[string]any)
		if d["session_id"] != restored {
			continue
		}
		switch e["type"] {
		case "navigation.committed":
			committed[d["context_id"].(string)] = true
		case "browsing_context.opened":
			opened = opened || (d["context_id"] == ctxs[1] && d["opener"] == primary)
		}
	}
	if !opened || !committed[primary] || !committed[ctxs[1]] {
		t.Fatalf("history of the restored session: opened %v, committed %v\n%s", opened, committed, hist.raw)
	}
}

// A running task may open an extra session restored from its own checkpoint; every refusal has
// its own code and is recorded like any command.
func TestCheckpointRestoreChecks(t *testing.T) {
	s, sh := newStack(t), newShop(t)
	taskID, sid := signIn(t, s, sh, "checks")
	chk := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/checkpoint", "checks-chk", nil).str("checkpoint", "checkpoint_id")

	extra := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "checks-extra", map[string]any{"from_checkpoint": chk})
	if extra.str("session", "from_checkpoint") != chk {
		t.Fatalf("restored session: %s", extra.raw)
	}
	if got := s.pageText(t, extra.str("session", "session_id")); !strings.Contains(got, "signed in: "+signedInAs) {
		t.Fatalf("the restored session is not signed in: %q", got)
	}

	other := s.must(t, 201, "POST", "/bap/v1/tasks", "checks-other", map[string]any{
		"goal": "another task", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
	}).str("task", "task_id")
	exec := func(sql string) {
		t.Helper()
		if _, err := s.db.Exec(context.Background(), sql, chk); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, task, breakIt, fix, status, code string
	}{
		{name: "foreign", task: other, status: "409", code: "checkpoint_foreign"},
		{name: "software", task: taskID, breakIt: `UPDATE task_checkpoint SET software_version = '1.1.9' WHERE checkpoint_id = $1`,
			fix: `UPDATE task_checkpoint SET software_version = '1.2.3' WHERE checkpoint_id = $1`, status: "409", code: "checkpoint_incompatible"},
		{name: "protocol", task: taskID, breakIt: `UPDATE task_checkpoint SET protocol_version = '2.0.0' WHERE checkpoint_id = $1`,
			fix: `UPDATE task_checkpoint SET protocol_version = '1.0.0' WHERE checkpoint_id = $1`, status: "409", code: "checkpoint_incompatible"},
		{name: "policy", task: taskID, breakIt: `UPDATE task_checkpoint SET policy_digest = repeat('0', 64) WHERE checkpoint_id = $1`,
			status: "409", code: "checkpoint_incompatible"},
	}
	var policyDigest string
	if err := s.db.QueryRow(context.Background(), `SELECT policy_digest FROM task_checkpoint WHERE checkpoint_id = $1`, chk).Scan(&policyDigest); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		if tc.breakIt != "" {
			exec(tc.breakIt)
		}
		r := s.call(t, "POST", "/bap/v1/tasks/"+tc.task+"/browser-sessions", "checks-"+tc.name, map[string]any{"from_checkpoint": chk})
		if r.status != 409 || r.str("code") != tc.code {
			t.Errorf("%s: %d %s, want 409 %s", tc.name, r.status, r.raw, tc.code)
		}
		if replay := s.call(t, "POST", "/bap/v1/tasks/"+tc.task+"/browser-sessions", "checks-"+tc.name, map[string]any{"from_checkpoint": chk}); replay.status != r.status || string(replay.raw) != string(r.raw) {
			t.Errorf("%s: a refusal is recorded and replays: %d %s", tc.name, replay.status, replay.raw)
		}
		if tc.fix != "" {
			exec(tc.fix)
		}
	}
	if _, err := s.db.Exec(context.Background(), `UPDATE task_checkpoint SET policy_digest = $2, created_at = now() - interval '25 hours'
		WHERE checkpoint_id = $1`, chk, policyDigest); err != nil {
		t.Fatal(err)
	}
	if r := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "checks-stale", map[string]any{"from_checkpoint": chk}); r.status != 409 || r.str("code") != "checkpoint_stale" {
		t.Errorf("stale: %d %s", r.status, r.raw)
	}
	if r := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "checks-unknown", map[string]any{"from_checkpoint": "chk_nosuchcheckpoint"}); r.status != 404 {
		t.Errorf("unknown checkpoint: %d %s", r.status, r.raw)
	}
	if r := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/resume", "checks-resume-running", map[string]any{"checkpoint_id": chk}); r.status != 409 || r.str("code") != "invalid_transition" {
		t.Errorf("resume of a running task: %d %s", r.status, r.raw)
	}
}

// When the node holding a task's sessions stops, recovery marks them lost and the task, which has
// a checkpoint, waits in checkpointed for resume_task; a task without one stays running.
func TestSessionsOfAStoppedNodeAreLost(t *testing.T) {
	s, sh := newStack(t), newShop(t)
	withChk, sid := signIn(t, s, sh, "stopped-a")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/checkpoint", "stopped-chk", nil)
	without, _ := signIn(t, s, sh, "stopped-b")

	ctx := context.Background()
	if _, err := s.db.Exec(ctx, `UPDATE runtime_node SET stopped_at = now() WHERE node_id = 'node_e2e'`); err != nil {
		t.Fatal(err)
	}
	n, err := s.svc.RecoverLostSessions(ctx, time.Now().Add(-time.Minute))
	if err != nil || n != 2 {
		t.Fatalf("RecoverLostSessions = %d, %v; want 2 sessions", n, err)
	}
	for task, want := range map[string]string{withChk: "checkpointed", without: "running"} {
		if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+task, "", nil).str("task", "state"); st != want {
			t.Errorf("task %s: %s, want %s", task, st, want)
		}
	}
	if r := s.call(t, "POST", "/bap/v1/browser-sessions/"+sid+"/observe", "", map[string]any{}); r.status != 409 || r.str("code") != "browser_session_lost" {
		t.Errorf("observe on a recovered session: %d %s", r.status, r.raw)
	}
	if n, err := s.svc.RecoverLostSessions(ctx, time.Now().Add(-time.Minute)); err != nil || n != 0 {
		t.Errorf("second recovery = %d, %v; want nothing left", n, err)
	}
}

// An ended task's sessions are closed, in the history and in the browser: they no longer count
// against the node's cap.
func TestEndedTaskClosesItsSessions(t *testing.T) {
	s, sh := newStack(t), newShop(t)
	taskID, sid := signIn(t, s, sh, "ended")
	s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/cancel", "ended-cancel", map[string]any{})
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, open := shared.Session(sid)
		var state string
		if err := s.db.QueryRow(context.Background(), `SELECT state FROM browser_session WHERE session_id = $1`, sid).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if !open && state == "closed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session of a cancelled task: in browser %v, state %s", open, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ev := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	if !strings.Contains(string(ev.raw), `"browser_session.closed"`) {
		t.Fatalf("history lacks the closing: %s", ev.raw)
	}
}

// sessionContexts lists a session's browsing contexts and their openers, the primary one first.
func sessionContexts(s *stack, sessionID string) (ctxs, openers []string, err error) {
	rows, err := s.db.Query(context.Background(), `SELECT context_id, coalesce(opener_context_id, '') FROM browsing_context
		WHERE session_id = $1 ORDER BY opener_context_id NULLS FIRST`, sessionID)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var c, o string
		if err := rows.Scan(&c, &o); err != nil {
			return nil, nil, err
		}
		ctxs, openers = append(ctxs, c), append(openers, o)
	}
	return ctxs, openers, rows.Err()
}
