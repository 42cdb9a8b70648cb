package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/waitfor"
)

// Verified replay (issue #20 item 4, ADR 0035), tried as an auditor would: a checkout recorded
// with policy.record (navigate, two fills of secrets by reference, check, click submit, the
// confirmation page) is closed and replayed against its own archive: every step compares
// identical, and the shop's request counter does not move. Then the archived confirmation page
// is edited (its record's digests recomputed, so the archive still reads back) and a second
// replay diverges at the step that loaded it: the submit, on the observation. The shop is served
// over plain HTTP and over HTTPS: there the recording session's proxy opens the TLS tunnels with
// the certificates of its browser's own authority (ADR 0037), so the archive holds the https
// exchanges (never the secrets typed) and the replay's proxy answers them.
func TestReplayOfACheckoutAgainstItsArchive(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		shop func(*testing.T) *shop
	}{{"http", newShop}, {"https", newTLSShop}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			replayCheckout(t, tt.shop(t))
		})
	}
}

func replayCheckout(t *testing.T, sh *shop) {
	dir := t.TempDir()
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(dir, 0, 0, nil) })
	s.startWorkers(t)
	secret := func(key, name, value string) string {
		return s.operator().must(t, 201, "POST", "/bap/v1/secrets", key, map[string]any{
			"name": name, "origins": []string{sh.srv.URL}, "value": value}).str("secret", "secret_id")
	}
	login := secret("rp-login", "shop_login", "ada.replay@example.com")

	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "rp-task", map[string]any{
		"goal": "place an order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "record": true},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you for your order"}}}}).str("task", "task_id")
	// A live task cannot be replayed.
	if r := s.call(t, "POST", "/bap/v1/tasks/"+taskID+"/replay", "rp-live", map[string]any{}); r.status != 409 || !strings.Contains(string(r.raw), "replay_not_possible") {
		t.Fatalf("replay of a live task: %d %s", r.status, r.raw)
	}
	sessionID := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "rp-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", "rp-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	act := func(key string, body map[string]any) {
		t.Helper()
		s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/act", key, body)
	}
	act("rp-name", map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Ada Replay Lovelace"})
	act("rp-email", map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "secret_ref": login})
	act("rp-terms", map[string]any{"action": "check", "query": map[string]any{"role": "checkbox", "name": "I accept the terms"}})
	act("rp-submit", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}})
	if n := sh.orders.Load(); n != 1 {
		t.Fatalf("%d orders placed, want 1", n)
	}
	if closed := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/close", "rp-close", map[string]any{}); closed.str("task", "state") != "succeeded" {
		t.Fatalf("close: %s", closed.raw)
	}
	awaitSessionsClosed(t, s, taskID) // a closing page's late request (a favicon) would count below
	archive := readArchive(t, filepath.Join(dir, "local", taskID))
	if !bytes.Contains(archive, []byte("WARC-Target-URI: "+sh.srv.URL+"/order\r\n")) || bytes.Contains(archive, []byte("tunnel://")) {
		t.Fatalf("the archive does not hold the order's exchange at %s/order (or holds an opaque tunnel)", sh.srv.URL)
	}
	for _, secret := range []string{"Ada Replay Lovelace", "Ada+Replay+Lovelace", "ada.replay@example.com", "ada.replay%40example.com"} {
		if bytes.Contains(archive, []byte(secret)) {
			t.Fatalf("the archive holds a typed value (%q)", secret)
		}
	}
	// The plain fill's value is kept for the replay, sealed: one row, not the value.
	var kept [][]byte
	rows, err := s.db.Query(t.Context(), `SELECT sealed FROM task_fill_value WHERE task_id = $1`, taskID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, b)
	}
	rows.Close()
	if len(kept) != 1 || bytes.Contains(kept[0], []byte("Ada Replay")) {
		t.Fatalf("kept fill values: %d rows (want the plain fill's, sealed)", len(kept))
	}

	replay := func(key string, mode ...string) (string, map[string]any) {
		t.Helper()
		m := "archive"
		if len(mode) > 0 {
			m = mode[0]
		}
		r := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/replay", key, map[string]any{"mode": m})
		id := r.str("task", "task_id")
		if r.str("task", "replay_of") != taskID || r.body["task"].(map[string]any)["delegated"] != true {
			t.Fatalf("replay_task: %s", r.raw)
		}
		s.awaitState(t, id, "succeeded", "failed")
		awaitSessionsClosed(t, s, id)
		fin := ofType(s.history(t, id), "replay.finished")
		if len(fin) != 1 {
			t.Fatalf("%d replay.finished events in %s", len(fin), id)
		}
		// The replay task's result repeats the verdict.
		got := s.must(t, 200, "GET", "/bap/v1/tasks/"+id, "", nil)
		if res, _ := got.body["task"].(map[string]any)["result"].(map[string]any); !reflect.DeepEqual(res["replay"], data(fin[0])) {
			t.Fatalf("result.replay of %s: %v, want %v", id, res["replay"], data(fin[0]))
		}
		return id, data(fin[0])
	}

	hits, orders := sh.hits.Load(), sh.orders.Load()
	first, verdict := replay("rp-replay-1")
	if verdict["outcome"] != "identical" || verdict["steps"] != float64(5) || verdict["replay_of"] != taskID {
		t.Fatalf("the replay of an untouched archive: %v; history %v", verdict, s.history(t, first))
	}
	if got := s.must(t, 200, "GET", "/bap/v1/tasks/"+first, "", nil); got.str("task", "replay_of") != taskID {
		t.Errorf("get_task of the replay: %s", got.raw)
	}
	for _, c := range ofType(s.history(t, first), "replay.step_compared") {
		if data(c)["identical"] != true {
			t.Errorf("a step compared different: %v", data(c))
		}
	}
	if h, o := sh.hits.Load()-hits, sh.orders.Load()-orders; h != 0 || o != 0 {
		t.Fatalf("the replay reached the shop: %d requests, %d orders", h, o)
	}
	// The same key answers the same replay: no second one runs.
	if again := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/replay", "rp-replay-1", map[string]any{"mode": "archive"}); again.str("task", "task_id") != first {
		t.Errorf("the key replayed another task: %s", again.raw)
	}

	// A live dry run walks the recorded path on the real shop up to the submit, which it does not
	// run: the shop serves its pages again (its order count on the checkout page has changed
	// since, which a dry run does not compare) and takes no order.
	dry, verdict := replay("rp-dry", "live_dry_run")
	if verdict["outcome"] != "identical" || verdict["mode"] != "live_dry_run" || verdict["steps"] != float64(4) || verdict["stopped_before"] != float64(4) {
		t.Fatalf("the dry run: %v; history %v", verdict, s.history(t, dry))
	}
	if got := s.must(t, 200, "GET", "/bap/v1/tasks/"+dry, "", nil); got.str("task", "replay_mode") != "live_dry_run" {
		t.Errorf("get_task of the dry run: %s", got.raw)
	}
	if sh.hits.Load() == hits || sh.orders.Load() != orders {
		t.Fatalf("the dry run: %d requests, %d orders; want the pages and no order", sh.hits.Load()-hits, sh.orders.Load()-orders)
	}
	hits = sh.hits.Load()

	// The auditor edits the archived confirmation page, recomputing its record's digests: the
	// archive reads back as sound, and the page shows something else.
	editArchivedBody(t, filepath.Join(dir, "local", taskID), "/thanks?order=1", "Thank you for your order 1", "Thank you for your order 7", true)
	second, verdict := replay("rp-replay-2")
	if verdict["outcome"] != "diverged" || verdict["step"] != float64(4) || verdict["field"] != "observation" || verdict["altered_records"] != nil {
		t.Fatalf("the replay of an edited archive: %v; history %v", verdict, s.history(t, second))
	}
	// Then edits it again without touching the digests (as sed would): the replay still runs,
	// diverges at the same step, and names the record that no longer matches its digests.
	editArchivedBody(t, filepath.Join(dir, "local", taskID), "/thanks?order=1", "Thank you for your order 7", "Thank you for your order 9", false)
	third, verdict := replay("rp-replay-3")
	if verdict["outcome"] != "diverged" || verdict["step"] != float64(4) || verdict["field"] != "observation" ||
		fmt.Sprint(verdict["altered_records"]) != "["+sh.srv.URL+"/thanks?order=1]" {
		t.Fatalf("the replay of an archive edited behind its digests: %v; history %v", verdict, s.history(t, third))
	}
	if h := sh.hits.Load() - hits; h != 0 {
		t.Fatalf("the replays of edited archives reached the shop: %d requests", h)
	}
}

// TestAnotherPrincipalCannotReplayPlainValues: a replay types the recorded task's plain values
// again, in a page its caller observes, so only the principal that created the task may replay a
// plain fill (ADR 0038 keeps them sealed for it). The local operator replaying the agent's task is
// refused without the value; the agent's own replay is accepted.
func TestAnotherPrincipalCannotReplayPlainValues(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(t.TempDir(), 0, 0, nil) })
	rec := recordPlainFill(t, s, sh, "ap", "Ada Private")

	r := s.operator().call(t, "POST", "/bap/v1/tasks/"+rec+"/replay", "ap-replay-operator", map[string]any{})
	if r.status != 409 || r.str("code") != "replay_not_possible" || !strings.Contains(string(r.raw), "only the principal that created the task") ||
		strings.Contains(string(r.raw), "Ada Private") {
		t.Fatalf("another principal's replay of a plain fill: %d %s", r.status, r.raw)
	}
	s.must(t, 201, "POST", "/bap/v1/tasks/"+rec+"/replay", "ap-replay-agent", map[string]any{})
}

// recordPlainFill records a task (keys prefixed with key) that opens the shop's checkout and
// types value, a plain fill, into its name field, then cancels it; it returns the task's id.
func recordPlainFill(t *testing.T, s *stack, sh *shop, key, value string) string {
	t.Helper()
	rec := s.must(t, 201, "POST", "/bap/v1/tasks", key+"-task", map[string]any{
		"goal": "order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "record": true}}).str("task", "task_id")
	sessionID := s.must(t, 201, "POST", "/bap/v1/tasks/"+rec+"/browser-sessions", key+"-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", key+"-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/act", key+"-fill", map[string]any{
		"action": "fill", "query": map[string]any{"label": "Full name"}, "value": value})
	s.must(t, 200, "POST", "/bap/v1/tasks/"+rec+"/cancel", key+"-cancel", map[string]any{})
	return rec
}

// A task that typed a plain value whose value was not kept (recorded before values were kept for
// replay: its row is deleted here) or recorded nothing cannot be replayed: 409
// replay_not_possible, saying why and never echoing the value; and nothing is created.
func TestReplayIsRefusedForWhatItCannotRepeat(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(t.TempDir(), 0, 0, nil) })
	rec := recordPlainFill(t, s, sh, "rf", "Ada Plain")
	if _, err := s.db.Exec(t.Context(), `DELETE FROM task_fill_value WHERE task_id = $1`, rec); err != nil {
		t.Fatal(err)
	}
	plain, _ := openShop(t, s, sh, "rf-plain")
	s.must(t, 200, "POST", "/bap/v1/tasks/"+plain+"/cancel", "rf-cancel-plain", map[string]any{})
	for name, tt := range map[string]struct{ task, want string }{
		"a plain fill":    {rec, "not kept"},
		"no steps at all": {plain, "no steps"},
	} {
		r := s.call(t, "POST", "/bap/v1/tasks/"+tt.task+"/replay", "rf-"+strings.ReplaceAll(name, " ", "-"), map[string]any{})
		if r.status != 409 || !strings.Contains(string(r.raw), "replay_not_possible") || !strings.Contains(string(r.raw), tt.want) ||
			strings.Contains(string(r.raw), "Ada Plain") {
			t.Errorf("%s: %d %s", name, r.status, r.raw)
		}
	}
	if r := s.call(t, "POST", "/bap/v1/tasks/tsk_nosuchtask/replay", "rf-none", map[string]any{}); r.status != 404 {
		t.Errorf("an unknown task: %d %s", r.status, r.raw)
	}
}

// readArchive is every WARC file of a recording directory, concatenated.
func readArchive(t *testing.T, dir string) []byte {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.warc"))
	if len(files) == 0 {
		t.Fatalf("no archive in %s", dir)
	}
	var all []byte
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, raw...)
	}
	return all
}

// editArchivedBody rewrites, in the WARC files under dir, the body of the response record whose
// target ends with target: old becomes repl (the same length, so the HTTP head stays right), and,
// with fixDigests, the record's Block and Payload digests are recomputed so that the archive
// still reads back as sound.
func editArchivedBody(t *testing.T, dir, target, old, repl string, fixDigests bool) {
	t.Helper()
	if len(old) != len(repl) {
		t.Fatal("the edit must keep the body's length")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.warc"))
	edited := 0
	clRe := regexp.MustCompile(`(?m)^Content-Length: (\d+)\r$`)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		for pos := 0; pos < len(raw); {
			he := bytes.Index(raw[pos:], []byte("\r\n\r\n"))
			if he < 0 {
				t.Fatalf("%s: a record without the end of its header at %d", f, pos)
			}
			head := string(raw[pos : pos+he+2])
			m := clRe.FindStringSubmatch(head)
			if m == nil {
				t.Fatalf("%s: a record without Content-Length", f)
			}
			n, _ := strconv.Atoi(m[1])
			block := raw[pos+he+4 : pos+he+4+n]
			next := pos + he + 4 + n + 4
			if strings.Contains(head, "WARC-Type: response\r\n") && strings.Contains(head, target+"\r\n") && bytes.Contains(block, []byte(old)) {
				block = bytes.Replace(block, []byte(old), []byte(repl), 1)
				if fixDigests {
					payload := block[bytes.Index(block, []byte("\r\n\r\n"))+4:]
					head = regexp.MustCompile(`(?m)^WARC-Block-Digest: .*\r$`).ReplaceAllString(head, "WARC-Block-Digest: "+digest(block)+"\r")
					head = regexp.MustCompile(`(?m)^WARC-Payload-Digest: .*\r$`).ReplaceAllString(head, "WARC-Payload-Digest: "+digest(payload)+"\r")
				}
				edited++
			}
			out.WriteString(head + "\r\n")
			out.Write(block)
			out.WriteString("\r\n\r\n")
			pos = next
		}
		if err := os.WriteFile(f, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if edited != 1 {
		t.Fatalf("%d records of %s edited, want 1", edited, target)
	}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return fmt.Sprintf("sha256:%s", hex.EncodeToString(s[:]))
}

// Whoever drives a session of a live dry-run replay — its worker, or an agent that opens one on
// the replay task itself — cannot send a side effect: the session's proxy refuses the order's
// POST (request.blocked, dry_run), and the shop takes no order. An archive replay's session, so
// driven, never reaches the shop at all.
func TestSessionsOfAReplayTaskCannotSendASideEffect(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(t.TempDir(), 0, 0, nil) }) // no workers: the agent drives
	rec := s.must(t, 201, "POST", "/bap/v1/tasks", "sd-task", map[string]any{
		"goal": "look", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "record": true}}).str("task", "task_id")
	sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+rec+"/browser-sessions", "sd-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/navigate", "sd-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	s.must(t, 200, "POST", "/bap/v1/tasks/"+rec+"/cancel", "sd-cancel", map[string]any{})
	awaitSessionsClosed(t, s, rec)

	// The archive replay first: the dry run's session stays open, and its page's late requests
	// (a favicon) would count as the shop's.
	for _, mode := range []string{"archive", "live_dry_run"} {
		t.Run(mode, func(t *testing.T) {
			replayID := s.must(t, 201, "POST", "/bap/v1/tasks/"+rec+"/replay", "sd-replay-"+mode, map[string]any{"mode": mode}).str("task", "task_id")
			rs := s.must(t, 201, "POST", "/bap/v1/tasks/"+replayID+"/browser-sessions", "sd-rs-"+mode, map[string]any{}).str("session", "session_id")
			hits := sh.hits.Load()
			s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+rs+"/navigate", "sd-rnav-"+mode, map[string]any{"url": sh.srv.URL + "/checkout"})
			fillCheckout(t, s, rs, "sd-"+mode)
			s.call(t, "POST", "/bap/v1/browser-sessions/"+rs+"/act", "sd-order-"+mode, placeOrder) // refused below the browser
			if n := sh.orders.Load(); n != 0 {
				t.Fatalf("the shop took %d orders", n)
			}
			want := "dry_run"
			if mode == "archive" {
				want = "not_in_archive"
				if h := sh.hits.Load() - hits; h != 0 {
					t.Errorf("an archive replay's session reached the shop %d times; history %v", h, s.history(t, replayID))
				}
			}
			var blocked []map[string]any
			waitForEvents(t, s, replayID, func(evs []map[string]any) bool {
				blocked = nil
				for _, e := range ofType(evs, "request.blocked") {
					if d := data(e); d["reason"] == want && strings.HasSuffix(fmt.Sprint(d["url"]), "/order") {
						blocked = append(blocked, d)
					}
				}
				return len(blocked) > 0
			})
		})
	}
}

// awaitSessionsClosed waits until every browser session a task opened is closed: nothing of its
// pages can reach a site after that.
func awaitSessionsClosed(t *testing.T, s *stack, taskID string) {
	t.Helper()
	waitForEvents(t, s, taskID, func(evs []map[string]any) bool {
		return len(ofType(evs, "browser_session.closed"))+len(ofType(evs, "browser_session.lost")) >= len(ofType(evs, "browser_session.opened"))
	})
}

// waitForEvents waits until a task's history satisfies ok.
func waitForEvents(t *testing.T, s *stack, taskID string, ok func([]map[string]any) bool) {
	t.Helper()
	if !waitfor.Holds(t, 20*time.Second, func() bool { return ok(s.history(t, taskID)) }) {
		t.Fatalf("the history of %s never showed it: %v", taskID, s.history(t, taskID))
	}
}

// A checkout whose submit a form_submission rule held until a person approved it replays too:
// the released act is a recorded step (its target traced before the release, what followed
// after), and the replay, which carries no approval rules (nothing leaves the node), runs the
// submit against the archive and compares identical, sending the shop nothing.
func TestReplayOfAnApprovedCheckout(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(t.TempDir(), 0, 0, nil) })
	s.startWorkers(t)
	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "ra-task", map[string]any{
		"goal": "place an order, asking first", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "record": true,
			"approval_rules": []any{map[string]any{"effect": "form_submission"}}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you for your order"}}}}).str("task", "task_id")
	sessionID := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "ra-session", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", "ra-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	for key, body := range map[string]map[string]any{
		"ra-name":  {"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Ada Approved"},
		"ra-email": {"action": "fill", "query": map[string]any{"label": "Email"}, "value": "ada.approved@example.com"},
	} {
		s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/act", key, body)
	}
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/act", "ra-terms", map[string]any{
		"action": "check", "query": map[string]any{"role": "checkbox", "name": "I accept the terms"}})
	held := s.must(t, 202, "POST", "/bap/v1/browser-sessions/"+sessionID+"/act", "ra-submit", map[string]any{
		"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}})
	aprID := held.str("approval", "approval_id")
	if sh.orders.Load() != 0 {
		t.Fatal("the held submit placed an order")
	}
	s.operator().must(t, 200, "POST", "/bap/v1/approvals/"+aprID+"/resolve", "ra-approve", map[string]any{"decision": "approve"})
	if n := sh.orders.Load(); n != 1 {
		t.Fatalf("%d orders after the approval, want 1", n)
	}
	if closed := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/close", "ra-close", map[string]any{}); closed.str("task", "state") != "succeeded" {
		t.Fatalf("close: %s", closed.raw)
	}
	awaitSessionsClosed(t, s, taskID)
	if steps := ofType(s.history(t, taskID), "record.step"); len(steps) != 5 || data(steps[4])["action"] != "click" || data(steps[4])["effect"] != "form_submission" {
		t.Fatalf("record.step events %v, want 5 with the approved click last", steps)
	}

	hits, orders := sh.hits.Load(), sh.orders.Load()
	id := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/replay", "ra-replay", map[string]any{"mode": "archive"}).str("task", "task_id")
	s.awaitState(t, id, "succeeded", "failed")
	awaitSessionsClosed(t, s, id)
	fin := ofType(s.history(t, id), "replay.finished")
	if len(fin) != 1 || data(fin[0])["outcome"] != "identical" || data(fin[0])["steps"] != float64(5) {
		t.Fatalf("the replay of an approved checkout: %v; history %v", fin, s.history(t, id))
	}
	if h, o := sh.hits.Load()-hits, sh.orders.Load()-orders; h != 0 || o != 0 {
		t.Fatalf("the replay reached the shop: %d requests, %d orders", h, o)
	}
}
