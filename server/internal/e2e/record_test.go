package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/waitfor"
	"github.com/originweave/bap/server/internal/warcrecord"
)

// A task with policy.record: true archives its session's exchanges; a secret filled by reference
// and a plain fill value reach the site over a plain-HTTP form POST, and are in no form in the
// archive, where their masks and the rest of the form are (issue #20 item 2). A task without the
// flag archives nothing.
func TestRecordedTaskArchivesTheFormPostWithItsSecretMasked(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	dir := t.TempDir()
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(dir, 0, 0, nil) })
	const pin = "canary.pin+4242@example.com" // the email field's constraint wants an address
	sec := s.operator().must(t, 201, "POST", "/bap/v1/secrets", "rec-secret", map[string]any{
		"name": "shop_login", "origins": []string{sh.srv.URL}, "value": pin})
	secretID := sec.str("secret", "secret_id")

	r := s.must(t, 201, "POST", "/bap/v1/tasks", "rec-task", map[string]any{
		"goal": "place an order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "record": true}})
	taskID := r.str("task", "task_id")
	if rec, _ := r.body["task"].(map[string]any)["policy"].(map[string]any)["record"].(bool); !rec {
		t.Fatalf("the task's policy reads back without record: %s", r.raw)
	}
	sessionID := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "rec-session", map[string]any{}).str("session", "session_id")
	act := func(key string, body map[string]any) {
		t.Helper()
		s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/act", key, body)
	}
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", "rec-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	act("rec-name", map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Ada Lovelace"})
	act("rec-email", map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "secret_ref": secretID})
	act("rec-terms", map[string]any{"action": "check", "query": map[string]any{"role": "checkbox", "name": "I accept the terms"}})
	act("rec-submit", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}})
	if b := sh.orderBody.Load(); b == nil || !strings.Contains(string(*b), "email="+url.QueryEscape(pin)) {
		t.Fatalf("the site did not receive the secret: %v", b)
	}

	actor := app.Actor{Tenant: "local", Subject: "test"}
	var archive []byte
	var post warcrecord.Record
	waitfor.Until(t, 10*time.Second, "the order's exchange in the task's archive", func() (bool, string) {
		rc, err := s.svc.TaskArchive(context.Background(), actor, taskID)
		if err != nil {
			return false, err.Error()
		}
		defer rc.Close()
		if archive, err = io.ReadAll(rc); err != nil {
			return false, err.Error()
		}
		recs, err := warcrecord.ReadAll(bytes.NewReader(archive), 4<<20)
		if err != nil {
			return false, err.Error() // a record being written
		}
		for _, r := range recs {
			if r.Type == "request" && r.Header.Get("WARC-Target-URI") == sh.srv.URL+"/order" {
				post = r
				return true, ""
			}
		}
		return false, "no POST /order yet"
	})
	body := string(post.Block[bytes.Index(post.Block, []byte("\r\n\r\n"))+4:])
	for _, want := range []string{"name=[masked:protected]", "email=[masked:shop_login]", "terms=yes"} {
		if !strings.Contains(body, want) {
			t.Errorf("the archived form %q lacks %q", body, want)
		}
	}
	for name, form := range map[string]string{
		"raw": pin, "form-encoded": url.QueryEscape(pin), "base64": base64.StdEncoding.EncodeToString([]byte(pin)),
		"fill value": "Ada Lovelace", "fill value encoded": "Ada+Lovelace",
	} {
		if bytes.Contains(archive, []byte(form)) {
			t.Errorf("the task's archive holds the %s", name)
		}
	}

	// Without the flag, nothing is recorded.
	plain, _ := openShop(t, s, sh, "rec-plain")
	if _, err := s.svc.TaskArchive(context.Background(), actor, plain); !errors.Is(err, app.ErrNotFound) {
		t.Fatalf("a task without policy.record has an archive: %v", err)
	}
}

// A task whose archive reaches its cap records one record.truncated event (in the spec's shape:
// s.must checks every event against its schema), naming the cap and its size.
func TestRecordCapIsReportedAsATaskEvent(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(t.TempDir(), 2000, 0, nil) })
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "cap-task", map[string]any{
		"goal": "browse", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "record": true}})
	taskID := r.str("task", "task_id")
	sessionID := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "cap-session", map[string]any{}).str("session", "session_id")
	for i, p := range []string{"/checkout", "/thanks?order=1"} {
		s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", "cap-nav-"+strings.Repeat("x", i+1), map[string]any{"url": sh.srv.URL + p})
	}
	var ev reply
	waitfor.Until(t, 10*time.Second, "a record.truncated event", func() (bool, string) {
		ev = s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
		return strings.Contains(string(ev.raw), `"record.truncated"`), "not yet"
	})
	if n := strings.Count(string(ev.raw), `"record.truncated"`); n != 1 {
		t.Fatalf("%d record.truncated events", n)
	}
	for _, want := range []string{`"reason":"task_bytes"`, `"limit_bytes":2000`, `"session_id":"` + sessionID + `"`} {
		if !strings.Contains(string(ev.raw), want) {
			t.Errorf("the event lacks %s: %s", want, ev.raw)
		}
	}
}

// recordSteps are the data of a task's record.step events, in order.
func recordSteps(t *testing.T, s *stack, taskID string) []map[string]any {
	t.Helper()
	ev := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil) // each event checked against its schema
	var steps []map[string]any
	for _, e := range ev.body["events"].([]any) {
		m := e.(map[string]any)
		if m["type"] == "record.step" {
			steps = append(steps, m["data"].(map[string]any))
		}
	}
	return steps
}

// Each navigate and act of a recording task leaves a record.step event with what a replay
// repeats and compares (issue #20 item 4): the navigate's URL, the act's target by role, name and
// frame (its node handle would mean nothing to another session), a fill's kind (a secret by
// reference; a plain value not kept), what the page showed after (URL, epoch change, a keyed
// observation digest). Neither the secret nor the plain value is in the history. A task without
// policy.record leaves none.
func TestRecordingTaskStepsSayWhatAReplayRepeats(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(t.TempDir(), 0, 0, nil) })
	const pin = "canary.step+4242@example.com"
	secretID := s.operator().must(t, 201, "POST", "/bap/v1/secrets", "step-secret", map[string]any{
		"name": "shop_login", "origins": []string{sh.srv.URL}, "value": pin}).str("secret", "secret_id")
	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "step-task", map[string]any{
		"goal": "place an order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "record": true}}).str("task", "task_id")
	sessionID := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "step-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", "step-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	// By handle: the step names the node, not the handle.
	nameNode := s.query(t, sessionID, map[string]any{"label": "Full name"})
	act := func(key string, body map[string]any) {
		t.Helper()
		s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/act", key, body)
	}
	act("step-name", map[string]any{"action": "fill", "node_id": nameNode, "value": "Ada Canary Lovelace"})
	act("step-email", map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "secret_ref": secretID})
	act("step-terms", map[string]any{"action": "check", "query": map[string]any{"role": "checkbox", "name": "I accept the terms"}})
	act("step-submit", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}})

	steps := recordSteps(t, s, taskID)
	if len(steps) != 5 {
		t.Fatalf("%d record.step events, want 5: %v", len(steps), steps)
	}
	nav, name, email, submit := steps[0], steps[1], steps[2], steps[4]
	if nav["operation"] != "navigate" || nav["url"] != sh.srv.URL+"/checkout" || nav["epoch_changed"] != true {
		t.Errorf("the navigate step: %v", nav)
	}
	target := func(st map[string]any) string {
		tg, _ := st["target"].(map[string]any)
		return fmt.Sprintf("%v|%v|%v", tg["role"], tg["name"], tg["frame"])
	}
	if name["action"] != "fill" || name["fill"] != "plain" || target(name) != "textbox|Full name|" {
		t.Errorf("the plain fill by handle: %v", name)
	}
	if email["fill"] != "secret" || email["secret_ref"] != secretID || target(email) != "textbox|Email|" {
		t.Errorf("the secret fill: %v", email)
	}
	if target(submit) != "button|Place order|" || submit["epoch_changed"] != true ||
		!strings.HasPrefix(submit["page_url"].(string), sh.srv.URL+"/thanks?order=") {
		t.Errorf("the submit: %v", submit)
	}
	digests := map[any]bool{}
	for _, st := range steps {
		digests[st["observation_digest"]] = true
	}
	if len(digests) != 5 {
		t.Errorf("%d distinct observation digests over 5 steps that each changed the page", len(digests))
	}
	raw := string(s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil).raw)
	for _, canary := range []string{pin, "canary.step", "Ada Canary", "Canary Lovelace"} {
		if strings.Contains(raw, canary) {
			t.Errorf("the task's history holds %q", canary)
		}
	}

	plain, _ := openShop(t, s, sh, "step-plain")
	if st := recordSteps(t, s, plain); len(st) != 0 {
		t.Errorf("a task without policy.record has %d record.step events", len(st))
	}
}
