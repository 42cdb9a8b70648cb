package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/pgcluster"
	"github.com/originweave/bap/server/internal/waitfor"
)

// The operator console (issue #18) in a real browser: console/test/driver.mjs drives the system
// Chromium with playwright-core (installed by scripts/install-console-tools.sh, no browser
// download) and these tests assert on what the site and the database recorded. With
// BAP_CONSOLE_SCREENSHOTS=DIR they also leave each page's picture in DIR (docs/console.md's are
// made so: BAP_CONSOLE_SCREENSHOTS=$PWD/docs/console go test -run TestConsole ./server/cmd/bap).

// browserDriver is one driver.mjs process: one browser, one page.
type browserDriver struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Scanner
	mu  sync.Mutex
}

// newBrowserDriver starts the driver on the system Chromium; it fails (never skips) when the
// console's tools are not installed.
func newBrowserDriver(t *testing.T) *browserDriver {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "console", "test", "driver.mjs")
	if _, err := os.Stat(filepath.Join(root, "console", "node_modules", "playwright-core", "index.js")); err != nil {
		t.Fatalf("the console's test tools are not installed (run scripts/install-console-tools.sh, as make test does): %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	chromium := os.Getenv("BAP_CHROMIUM")
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if chromium != "" {
			break
		}
		chromium, _ = exec.LookPath(name)
	}
	if chromium == "" {
		t.Fatal("no Chromium on PATH (BAP_CHROMIUM unset)")
	}
	cmd := exec.Command(node, script, chromium)
	cmd.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &browserDriver{t: t, in: in, out: bufio.NewScanner(out)}
	d.out.Buffer(make([]byte, 1<<20), 16<<20)
	t.Cleanup(func() {
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("driver stderr:\n%s", stderr.String())
		}
	})
	if !d.out.Scan() {
		t.Fatalf("the browser driver did not start: %s", stderr.String())
	}
	return d
}

// try sends one command and returns its answer, or the driver's error.
func (d *browserDriver) try(cmd map[string]any) (map[string]any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, _ := json.Marshal(cmd)
	if _, err := d.in.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	if !d.out.Scan() {
		return nil, fmt.Errorf("the browser driver exited: %v", d.out.Err())
	}
	var res map[string]any
	if err := json.Unmarshal(d.out.Bytes(), &res); err != nil {
		return nil, err
	}
	if res["ok"] != true {
		return res, fmt.Errorf("%v", res["error"])
	}
	return res, nil
}

// do sends one command; a failure fails the test with the page's console messages.
func (d *browserDriver) do(cmd map[string]any) map[string]any {
	d.t.Helper()
	res, err := d.try(cmd)
	if err != nil {
		logs, _ := d.try(map[string]any{"op": "logs"})
		d.t.Fatalf("browser %v: %v\npage console: %v", cmd, err, logs["logs"])
	}
	return res
}

func role(r, name string) map[string]any { return map[string]any{"role": r, "name": name} }
func css(sel string) map[string]any      { return map[string]any{"css": sel} }

func (d *browserDriver) text(loc map[string]any) string {
	d.t.Helper()
	s, _ := d.do(map[string]any{"op": "text", "loc": loc})["text"].(string)
	return s
}

// page checks the page the browser shows: no serious or critical axe-core violation, and its
// picture when BAP_CONSOLE_SCREENSHOTS asks for it: the viewport, or the part of the page that
// holds the elements within names (CSS selectors).
func (d *browserDriver) page(name string, within ...string) {
	d.t.Helper()
	vs, _ := d.do(map[string]any{"op": "axe"})["violations"].([]any)
	for _, v := range vs {
		if m, _ := v.(map[string]any); m["impact"] == "serious" || m["impact"] == "critical" {
			d.t.Errorf("%s: axe-core %v violation %v: %v at %v", name, m["impact"], m["id"], m["help"], m["nodes"])
		}
	}
	dir := os.Getenv("BAP_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = d.t.TempDir()
	}
	shot := map[string]any{"op": "shot", "path": filepath.Join(dir, name+".png")}
	if len(within) > 0 {
		shot["within"] = within
	}
	d.do(shot)
}

// consoleLogin runs `bap console` and returns the URL it printed.
func consoleLogin(t *testing.T, bin, dir string) string {
	t.Helper()
	cmd := exec.Command(bin, "console", "--data-dir", dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	u := strings.TrimSpace(string(out))
	if err != nil || !strings.Contains(u, "/console/login?token=") || !strings.Contains(stderr.String(), "works once") {
		t.Fatalf("bap console: %v %q %s", err, out, stderr.String())
	}
	return u
}

// tamperArtifact changes the stored bytes of an artifact (same size) in the node's database.
func tamperArtifact(t *testing.T, dir, artifactID string) {
	t.Helper()
	dsn, err := pgcluster.ConnStringFor(dir, "bap")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, `UPDATE artifact_content SET content = overlay(content placing '\xdeadbeef'::bytea from 60)
		WHERE sha256 = (SELECT sha256 FROM artifact_reference WHERE artifact_id = $1)`, artifactID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("tampering with %s: %v %v", artifactID, tag, err)
	}
}

// approvalOf reads one approval as the operator sees it (over the socket).
func approvalOf(t *testing.T, socket, id string) map[string]any {
	t.Helper()
	for _, state := range []string{"approved", "denied", "pending"} {
		resp, err := unixClient(socket).Get("http://localhost/bap/v1/approvals?state=" + state + "&limit=1000")
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Approvals []map[string]any `json:"approvals"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		for _, a := range l.Approvals {
			if a["approval_id"] == id {
				return a
			}
		}
	}
	t.Fatalf("approval %s not found", id)
	return nil
}

// timelineMatchesEvents waits until the task page's timeline shows exactly what list_task_events
// answers — every event, in seq order, each row with its seq, type, actor and cause — and returns
// the events. The page must be the task's.
func timelineMatchesEvents(t *testing.T, b *browserDriver, listen, taskID string) []any {
	t.Helper()
	var evs []any
	waitfor.Until(t, 10*time.Second, "the timeline to show list_task_events", func() (bool, string) {
		evs, _ = mustAPI(t, 200, listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")["events"].([]any)
		rows, _ := b.do(map[string]any{"op": "cells", "loc": css("tr[data-seq]")})["rows"].([]any)
		if len(rows) != len(evs) {
			return false, fmt.Sprintf("%d rows, %d events", len(rows), len(evs))
		}
		for i, e := range evs {
			ev := e.(map[string]any)
			actor, _ := ev["actor"].(map[string]any)
			kind, _ := actor["kind"].(string)
			who := kind
			if id, _ := actor["id"].(string); id != "" { // absent for system
				who += " " + id
			}
			var why []string
			if c, _ := ev["cause"].(map[string]any); c != nil {
				for _, k := range []string{"reason", "command_id", "event_id"} {
					if v, _ := c[k].(string); v != "" {
						why = append(why, v)
					}
				}
			}
			cells, _ := rows[i].([]any)
			want := []any{fmt.Sprint(ev["seq"]), ev["type"], who, strings.Join(why, " ")}
			if len(cells) < 5 || cells[0] != want[0] || cells[2] != want[1] || cells[3] != want[2] || cells[4] != want[3] {
				return false, fmt.Sprintf("row %d shows %q, the event is %v", i, cells, want)
			}
		}
		return true, ""
	})
	return evs
}

// The local profile as a new user tries it after `make run`: `bap console` prints a URL that
// signs the operator in once; a held checkout appears in the inbox within 2 s with its screenshot
// and the exact request; the agent's own resolve is refused while the console's Approve places
// exactly one order and Deny on a second hold none; the task list, the task's timeline opened from
// it (row for row the events of list_task_events: seq, type, actor and cause, before and after the
// handoff), the live view following the agent, a handoff (Take over, a typed field, Hand back, and
// the agent going on with a fresh handle on the new epoch) and the evidence viewer's Verify (valid, then invalid once the bytes are
// changed in the database); no page has a serious or critical accessibility violation.
func TestConsoleLocalProfile(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	r := start(t, bin, dir)
	site := newMultiSite(t)
	b := newBrowserDriver(t)
	base := "http://" + r.listen

	// Sign in: the URL works once; the session is an HttpOnly, SameSite=Strict cookie.
	login := consoleLogin(t, bin, dir)
	b.do(map[string]any{"op": "goto", "url": login})
	b.do(map[string]any{"op": "wait", "loc": role("heading", "Approvals")})
	if who := b.text(css("#subject")); who != "operator:local" {
		t.Fatalf("signed in as %q", who)
	}
	cookies, _ := b.do(map[string]any{"op": "cookies"})["cookies"].([]any)
	var session map[string]any
	for _, c := range cookies {
		if m, _ := c.(map[string]any); m["name"] == "bap_console" {
			session = m
		}
	}
	if session == nil || session["httpOnly"] != true || session["sameSite"] != "Strict" {
		t.Fatalf("the session cookie: %v", cookies)
	}
	if st, _, raw := send("GET", login, "", ""); st != 401 || !strings.Contains(raw, "used or expired") {
		t.Fatalf("the login URL a second time: %d %s", st, raw)
	}
	// The cookie alone is no credential: without the CSRF header, or from another origin, it is refused.
	cookie := "bap_console=" + session["value"].(string)
	if st, m, raw := send("GET", base+"/bap/v1/approvals", "", "", "Cookie", cookie); st != 401 || m["code"] != "unauthenticated" {
		t.Fatalf("the cookie without its CSRF token: %d %s", st, raw)
	}
	resp, err := http.Get(base + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
		strings.Contains(csp, "unsafe-inline") || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("the console's headers: %v", resp.Header)
	}
	b.do(map[string]any{"op": "wait", "loc": css(`#live[data-stream="open"]`), "state": "attached"})
	b.page("approvals-empty")

	// A held checkout: in the inbox within 2 s, with its screenshot and the exact request.
	rules := `{"goal":"order the blue mug, asking first","policy":{"allowed_origins":["` + site.srv.URL + `"],"approval_rules":[{"effect":"form_submission"}]}}`
	taskID := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "con-task", rules), "task", "task_id")
	sp := "/bap/v1/browser-sessions/" + field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "con-session", `{}`), "session", "session_id")
	held := heldOrder(t, r.listen, site.srv.URL, sp, "con-1")
	apr := field(held, "approval", "approval_id")
	card := `[data-approval="` + apr + `"]`
	b.do(map[string]any{"op": "wait", "loc": css(card), "timeout": 2000})
	b.do(map[string]any{"op": "wait", "loc": css(card + " img.shot"), "timeout": 5000})
	cardText := b.text(css(card))
	for _, want := range []string{"order the blue mug, asking first", "POST " + site.srv.URL + "/order", `button “Send”`, "left", "agent:local"} {
		if !strings.Contains(cardText, want) {
			t.Errorf("the inbox card lacks %q: %s", want, cardText)
		}
	}
	if d := field(held, "approval", "held_request", "digest"); d == "" || !strings.Contains(cardText, d) {
		t.Errorf("the inbox card lacks the keyed digest %q: %s", d, cardText)
	}
	b.page("approvals")

	// The agent's own resolve stays refused; the console's Approve places exactly one order.
	if st, m, raw := api(r.listen, "POST", "/bap/v1/approvals/"+apr+"/resolve", "con-self", `{"decision":"approve"}`); st != 403 || m["code"] != "insufficient_scope" || site.orders.Load() != 0 {
		t.Fatalf("the agent's own resolve: %d %s (orders %d)", st, raw, site.orders.Load())
	}
	b.do(map[string]any{"op": "fill", "loc": map[string]any{"role": "textbox", "name": "Note (optional)", "within": card}, "value": "checked: one blue mug"})
	b.do(map[string]any{"op": "click", "loc": map[string]any{"role": "button", "name": "Approve", "within": card}})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": card + " .result.ok", "hasText": "Approved"}})
	a := approvalOf(t, r.socket, apr)
	if site.orders.Load() != 1 || a["state"] != "approved" || a["resolved_by"] != "operator:local" || a["resolution_reason"] != "checked: one blue mug" ||
		a["resolved_workload"] != "cli_console_local" {
		t.Fatalf("after Approve: orders %d, %v", site.orders.Load(), a)
	}

	// Deny on a second hold: never sent.
	apr2 := field(heldOrder(t, r.listen, site.srv.URL, sp, "con-2"), "approval", "approval_id")
	card2 := `[data-approval="` + apr2 + `"]`
	b.do(map[string]any{"op": "wait", "loc": css(card2), "timeout": 2000})
	b.do(map[string]any{"op": "click", "loc": map[string]any{"role": "button", "name": "Deny", "within": card2}})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": card2 + " .result.ok", "hasText": "Denied"}})
	if a := approvalOf(t, r.socket, apr2); a["state"] != "denied" || site.orders.Load() != 1 {
		t.Fatalf("after Deny: orders %d, %v", site.orders.Load(), a)
	}

	// The task list, filtered by state.
	b.do(map[string]any{"op": "goto", "url": base + "/console/#/tasks?state=running"})
	b.do(map[string]any{"op": "wait", "loc": css(`tr[data-task="` + taskID + `"]`)})
	b.page("tasks")
	b.do(map[string]any{"op": "goto", "url": base + "/console/#/tasks?state=succeeded"})
	b.do(map[string]any{"op": "wait", "loc": css("td.empty")})

	// The task's timeline, opened from the list: the same events as list_task_events, live.
	b.do(map[string]any{"op": "goto", "url": base + "/console/#/tasks?state=running"})
	b.do(map[string]any{"op": "click", "loc": role("link", taskID)})
	timelineMatchesEvents(t, b, r.listen, taskID)
	// The live view: a frame of the agent's page, and a new one after the agent navigates.
	b.do(map[string]any{"op": "wait", "loc": css(`#live-view[data-stream="open"] img.live-frame:not([data-frames="0"])`), "timeout": 20000})
	frames, _ := b.do(map[string]any{"op": "attr", "loc": css("img.live-frame"), "name": "data-frames"})["value"].(string)
	mustAPI(t, 200, r.listen, "POST", sp+"/navigate", "con-live", `{"url":"`+site.srv.URL+`/form"}`)
	b.do(map[string]any{"op": "wait", "loc": css(`img.live-frame:not([data-frames="` + frames + `"])`), "timeout": 20000})
	timelineMatchesEvents(t, b, r.listen, taskID)
	b.page("task")
	handoffInTheConsole(t, b, r, dir, site, taskID, sp)
	// Extended live through the handoff and the agent's next act: still exactly the history.
	evs := timelineMatchesEvents(t, b, r.listen, taskID)

	// The DOM and AX snapshots: linked from the timeline, shown with the SHA-256 of their bytes.
	captured := mustAPI(t, 200, r.listen, "POST", sp+"/evidence", "con-evidence", `{"kinds":["dom_snapshot","ax_snapshot"]}`)
	arts, _ := captured["artifacts"].([]any)
	if len(arts) != 2 {
		t.Fatalf("capture_evidence: %v", captured)
	}
	for i, a := range arts {
		art := a.(map[string]any)
		b.do(map[string]any{"op": "goto", "url": base + "/console/#/tasks/" + taskID})
		b.do(map[string]any{"op": "click", "loc": map[string]any{"role": "link", "name": "evidence " + art["artifact_id"].(string)}})
		b.do(map[string]any{"op": "wait", "loc": css("pre.snap")})
		if sum := b.text(css("#sha256")); sum != art["sha256"] {
			t.Fatalf("%v: the viewer shows SHA-256 %q", art, sum)
		}
		if i == 1 {
			b.page("evidence-snapshot")
		}
	}

	// The evidence viewer: the hold's screenshot with its SHA-256; Verify valid, then invalid.
	shotID := field(held, "approval", "screenshot_artifact_id")
	b.do(map[string]any{"op": "goto", "url": base + "/console/#/artifacts/" + shotID})
	b.do(map[string]any{"op": "wait", "loc": css("#sha256")})
	b.do(map[string]any{"op": "click", "loc": role("button", "Verify")})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": "#verify-result .result.ok", "hasText": "Valid"}})
	v := mustAPI(t, 200, r.listen, "POST", "/bap/v1/artifacts/"+shotID+"/verify", "", "{}")
	if sum := b.text(css("#sha256")); sum != v["sha256"] || !strings.Contains(b.text(css("#verify-result")), sum) {
		t.Fatalf("the viewer's SHA-256 %q, verify_artifact %v", sum, v)
	}
	b.page("evidence")
	tamperArtifact(t, dir, shotID)
	b.do(map[string]any{"op": "click", "loc": role("button", "Verify")})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": "#verify-result .result.bad", "hasText": "Invalid"}})

	// The same over the socket, for people who live in terminals.
	out, err := exec.Command(bin, "tasks", "list", "--state", "running", "--since", "1h", "--data-dir", dir).Output()
	var row map[string]any
	if err != nil || json.Unmarshal(out, &row) != nil || row["task_id"] != taskID || row["origin"] != "interactive" {
		t.Fatalf("bap tasks list: %v %q", err, out)
	}
	if out, err := exec.Command(bin, "tasks", "show", taskID, "--data-dir", dir).Output(); err != nil || !strings.Contains(string(out), `"goal":"order the blue mug, asking first"`) {
		t.Fatalf("bap tasks show: %v %q", err, out)
	}
	out, err = exec.Command(bin, "tasks", "events", taskID, "--data-dir", dir).Output()
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); err != nil || len(lines) < len(evs) {
		t.Fatalf("bap tasks events: %v, %d lines for %d events", err, len(lines), len(evs))
	}
	follow := exec.Command(bin, "tasks", "events", taskID, "--follow", "--after", fmt.Sprint(evs[len(evs)-1].(map[string]any)["seq"]), "--data-dir", dir)
	fo, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = follow.Process.Kill(); _ = follow.Wait() })
	mustAPI(t, 200, r.listen, "POST", sp+"/navigate", "con-follow", `{"url":"`+site.srv.URL+`/form?again=1"}`)
	sc := bufio.NewScanner(fo)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"task_id":"`+taskID+`"`) {
		t.Fatalf("bap tasks events --follow printed %q", sc.Text())
	}

	// The live view's stream ends, with its reason, when the agent closes the session.
	b.do(map[string]any{"op": "goto", "url": base + "/console/#/tasks/" + taskID})
	b.do(map[string]any{"op": "wait", "loc": css(`#live-view[data-stream="open"] img.live-frame:not([data-frames="0"])`), "timeout": 20000})
	mustAPI(t, 200, r.listen, "POST", sp+"/close", "con-close", `{}`)
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": `#live-view[data-stream="ended"] #live-status`, "hasText": "the browser session closed"}, "timeout": 5000})

	// Sign out: the session ends on the server, not only in the browser.
	b.do(map[string]any{"op": "click", "loc": role("button", "Sign out")})
	b.do(map[string]any{"op": "wait", "loc": role("heading", "Sign in to the BAP console")})
	if st, _, raw := send("GET", base+"/console/session", "", "", "Cookie", cookie); st != 401 {
		t.Fatalf("the session after Sign out: %d %s", st, raw)
	}

	// The login URL's token never reaches the server's log.
	if tok := login[strings.Index(login, "token=")+len("token="):]; strings.Contains(r.logs.String(), tok) {
		t.Fatal("the server logged a login token")
	}
}

// The remote profile: the console signs a person in with the authorization code flow and PKCE as
// the tenant's public client, registered at start; the person's Approve is recorded as theirs.
func TestConsoleRemoteProfile(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	person := admin(t, bin, dir, "a long enough password\n", "user", "create", "--tenant", "acme", "--name", "ada", "--password-stdin")
	_, base := startRemote(t, bin, dir)
	agent := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "agent", "--scopes",
		"bap:tasks.read bap:tasks.write bap:browser.observe bap:browser.act bap:approvals.request bap:artifacts.read bap:events.read")
	tok := accessToken(t, base, agent)
	site := newMultiSite(t)
	b := newBrowserDriver(t)

	b.do(map[string]any{"op": "goto", "url": base + "/console/"})
	b.do(map[string]any{"op": "fill", "loc": role("textbox", "Tenant"), "value": "acme"})
	b.do(map[string]any{"op": "click", "loc": role("button", "Sign in")})
	b.do(map[string]any{"op": "wait", "loc": role("heading", "Sign in to BAP")}) // the authorization server's page
	b.do(map[string]any{"op": "fill", "loc": role("textbox", "Name"), "value": "ada"})
	b.do(map[string]any{"op": "fill", "loc": css("#password"), "value": "a long enough password"})
	b.do(map[string]any{"op": "click", "loc": role("button", "Allow")})
	b.do(map[string]any{"op": "wait", "loc": role("heading", "Approvals")})
	subject := "user:" + person["user_id"].(string)
	if who := b.text(css("#subject")); who != subject {
		t.Fatalf("signed in as %q, want %s", who, subject)
	}
	if u, _ := b.do(map[string]any{"op": "url"})["url"].(string); strings.Contains(u, "code=") {
		t.Fatalf("the authorization code stays in the address bar: %s", u)
	}
	b.do(map[string]any{"op": "wait", "loc": css(`#live[data-stream="open"]`), "state": "attached"})

	// The agent (its own client) holds a checkout; the person approves it in the console.
	st, task, _ := call(t, "POST", base+"/bap/v1/tasks", tok, `{"goal":"remote order","policy":{"allowed_origins":["`+site.srv.URL+`"],"approval_rules":[{"effect":"form_submission"}]}}`)
	if st != 201 {
		t.Fatalf("create_task: %d %v", st, task)
	}
	st, sess, _ := call(t, "POST", base+"/bap/v1/tasks/"+field(task, "task", "task_id")+"/browser-sessions", tok, `{}`)
	if st != 201 {
		t.Fatalf("create_browser_session: %d %v", st, sess)
	}
	sp := base + "/bap/v1/browser-sessions/" + field(sess, "session", "session_id")
	if st, m, _ := call(t, "POST", sp+"/navigate", tok, `{"url":"`+site.srv.URL+`/form"}`); st != 200 {
		t.Fatalf("navigate: %d %v", st, m)
	}
	st, held, _ := call(t, "POST", sp+"/act", tok, `{"action":"click","query":{"role":"button","name":"Send"}}`)
	if st != 202 {
		t.Fatalf("act: %d %v", st, held)
	}
	apr := field(held, "approval", "approval_id")
	card := `[data-approval="` + apr + `"]`
	b.do(map[string]any{"op": "wait", "loc": css(card), "timeout": 2000})
	if st, m, _ := call(t, "POST", base+"/bap/v1/approvals/"+apr+"/resolve", tok, `{"decision":"approve"}`); st != 403 || site.orders.Load() != 0 {
		t.Fatalf("the agent's own resolve: %d %v", st, m)
	}
	b.do(map[string]any{"op": "click", "loc": map[string]any{"role": "button", "name": "Approve", "within": card}})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": card + " .result.ok", "hasText": "Approved"}})
	if site.orders.Load() != 1 {
		t.Fatalf("orders after Approve: %d", site.orders.Load())
	}
	b.page("approvals-remote")
	reviewer := admin(t, bin, dir, "", "client", "create", "--tenant", "acme", "--name", "auditor", "--scopes", "bap:approvals.resolve")
	st, list, _ := call(t, "GET", base+"/bap/v1/approvals?state=approved", accessToken(t, base, reviewer), "")
	as, _ := list["approvals"].([]any)
	if st != 200 || len(as) != 1 || as[0].(map[string]any)["resolved_by"] != subject || as[0].(map[string]any)["resolved_workload"] != "cli_console_acme" {
		t.Fatalf("the decision does not record the signed-in person %s: %d %v", subject, st, list)
	}
}

// The reconciliation queue: a form submission interrupted by kill -9 after the order reached the
// site is reconciliation_required. It is a person's, sent during their handoff: after the restart
// the handoff is still open beside the reconciliation, **Hand back** on the task page says the
// task still waits for it, and the task runs again only once the operator settles it in the
// console as applied, with a note. The agent cannot see or settle the queue.
func TestConsoleReconciliationQueue(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	site := newHangFixture(t)
	r := start(t, bin, dir)
	taskID := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "rq-task", `{"goal":"pay once","policy":{"allowed_origins":["`+site.srv.URL+`"]}}`), "task", "task_id")
	sid := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "rq-session", `{}`), "session", "session_id")
	mustAPI(t, 200, r.listen, "POST", "/bap/v1/browser-sessions/"+sid+"/navigate", "rq-start", `{"url":"`+site.srv.URL+`/start"}`)
	op := operatorAPI(r.socket)
	if st, _, raw := op("POST", "/bap/v1/tasks/"+taskID+"/take_over", "rq-take", `{"session_id":"`+sid+`"}`); st != 200 {
		t.Fatalf("take over: %d %s", st, raw)
	}
	actPath, actBody := "/bap/v1/browser-sessions/"+sid+"/act", `{"action":"click","query":{"role":"button","name":"Pay"}}`
	go op("POST", actPath, "rq-act", actBody)
	site.await(t, "/order-slow")
	_ = r.stop(t, syscall.SIGKILL)
	r = start(t, bin, dir)
	if act := replayUntilClassifiedVia(t, operatorAPI(r.socket), actPath, "rq-act", actBody); field(act, "receipt", "outcome") != "reconciliation_required" {
		t.Fatalf("the person's interrupted submission: %v", act)
	}
	if st, _, raw := api(r.listen, "GET", "/console/api/reconciliations", "", ""); st != 403 {
		t.Fatalf("the agent reading the queue: %d %s", st, raw)
	}

	b := newBrowserDriver(t)
	b.do(map[string]any{"op": "goto", "url": consoleLogin(t, bin, dir)})
	b.do(map[string]any{"op": "wait", "loc": role("heading", "Approvals")})
	// Hand back: the handoff closes, the task still waits for the reconciliation.
	b.do(map[string]any{"op": "goto", "url": "http://" + r.listen + "/console/#/tasks/" + taskID})
	b.do(map[string]any{"op": "click", "loc": role("button", "Hand back")})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": "#handoff-result.ok", "hasText": "waits until its open reconciliation is settled"}})
	if st := field(mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+taskID, "", ""), "task", "state"); st != "waiting_for_external_input" {
		t.Fatalf("the task handed back with its reconciliation open: %s", st)
	}
	b.do(map[string]any{"op": "click", "loc": role("link", "Reconciliation")})
	card := `[data-reconciliation]`
	b.do(map[string]any{"op": "wait", "loc": css(card)})
	if txt := b.text(css(card)); !strings.Contains(txt, taskID) || !strings.Contains(txt, "Interrupted act") {
		t.Fatalf("the queue shows %q", txt)
	}
	b.page("reconciliation")
	b.do(map[string]any{"op": "click", "loc": role("radio", "The effect happened (applied)")})
	b.do(map[string]any{"op": "fill", "loc": role("textbox", "Note: what you found"), "value": "the shop has order 1"})
	b.do(map[string]any{"op": "click", "loc": role("button", "Settle")})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": card + " .result.ok", "hasText": "Settled as applied by operator:local"}})
	var resolved, returned map[string]any
	for _, e := range mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")["events"].([]any) {
		switch ev := e.(map[string]any); ev["type"] {
		case "reconciliation.resolved":
			resolved = ev
		case "handoff.returned":
			returned = ev
		}
	}
	if d, _ := resolved["data"].(map[string]any); d["outcome"] != "applied" || site.orders.Load() != 1 || returned == nil {
		t.Fatalf("after Settle: %v, handoff returned %v (orders %d)", resolved, returned, site.orders.Load())
	}
	if st := field(mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+taskID, "", ""), "task", "state"); st != "running" {
		t.Fatalf("the task after its reconciliation: %s", st)
	}
}

// handoffInTheConsole drives a human handoff from the task page (issue #18 items 5 and 7): **Take
// over**, type into the agent's page through the governed act path, a click the task's approval
// rule holds (the person's act is governed like the agent's), **Hand back**; then the agent's next
// command sees the new epoch — its handle from before answers 409 stale_node_handle — and it goes
// on there: a fresh query is on the epoch the hand-back started (later than the one before), and
// its act with the fresh handle applies. It asserts
// on what the database and the site recorded. The page is the task page, open on the agent's
// session at the site's /form.
func handoffInTheConsole(t *testing.T, b *browserDriver, r *running, dir string, site *multiSite, taskID, sp string) {
	t.Helper()
	q := mustAPI(t, 200, r.listen, "POST", sp+"/query-nodes", "", `{"query":{"role":"textbox","name":"Name"}}`)
	nodes, _ := q["nodes"].([]any)
	if len(nodes) == 0 {
		t.Fatalf("the agent's query for the Name field: %v", q)
	}
	oldHandle, _ := nodes[0].(map[string]any)["node_id"].(string)
	oldEpoch, _ := q["epoch_id"].(string)
	orders := site.orders.Load()

	b.do(map[string]any{"op": "click", "loc": role("button", "Take over")})
	b.do(map[string]any{"op": "wait", "loc": css(`#handoff[data-handoff="open"] #handoff-field[data-ready="true"]`)})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": "#task-state", "hasText": "waiting_for_external_input"}})
	// The agent waits: its commands answer the stable code.
	if st, m, raw := api(r.listen, "POST", sp+"/act", "con-ho-agent", `{"action":"fill","node_id":"`+oldHandle+`","value":"agent"}`); st != 409 || m["code"] != "task_handed_off" {
		t.Fatalf("the agent's act during the handoff: %d %s", st, raw)
	}
	b.do(map[string]any{"op": "select", "loc": role("combobox", "Field"), "label": `textbox “Name”`})
	b.do(map[string]any{"op": "fill", "loc": role("textbox", "Text"), "value": "Typed by a person"})
	b.do(map[string]any{"op": "click", "loc": role("button", "Type")})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": "#handoff-result.ok", "hasText": "Typed: applied"}})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": "#handoff-field option", "hasText": "= Typed by a person"}, "state": "attached"})
	b.page("task-handoff", "#live-view", "#handoff")
	// Send is a form submission the task's rule holds: the person's click is held too.
	b.do(map[string]any{"op": "select", "loc": role("combobox", "Field"), "label": `button “Send”`})
	b.do(map[string]any{"op": "click", "loc": role("button", "Click")})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": "#handoff-result.ok", "hasText": "Clicked: pending_approval"}})

	b.do(map[string]any{"op": "click", "loc": role("button", "Hand back")})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": "#handoff-result.ok", "hasText": "Handed back"}})
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": "#task-state", "hasText": "running"}})

	// The agent's next command sees the new epoch: its old handle is stale.
	if st, m, raw := api(r.listen, "POST", sp+"/act", "con-ho-stale", `{"action":"fill","node_id":"`+oldHandle+`","value":"agent"}`); st != 409 || m["code"] != "stale_node_handle" {
		t.Fatalf("the agent's old handle after Hand back: %d %s", st, raw)
	}
	// ... and it continues on the new epoch, the one the hand-back started: a fresh handle works.
	var returnedEpoch string
	for _, e := range mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")["events"].([]any) {
		if ev := e.(map[string]any); ev["type"] == "handoff.returned" {
			returnedEpoch, _ = ev["data"].(map[string]any)["epoch_id"].(string)
		}
	}
	fresh := mustAPI(t, 200, r.listen, "POST", sp+"/query-nodes", "", `{"query":{"role":"textbox","name":"Name"}}`)
	freshNodes, _ := fresh["nodes"].([]any)
	newEpoch, _ := fresh["epoch_id"].(string)
	if len(freshNodes) == 0 || oldEpoch == "" || newEpoch != returnedEpoch || newEpoch <= oldEpoch {
		t.Fatalf("the agent's query after Hand back: epoch %q, hand-back's %q, before %q: %v", newEpoch, returnedEpoch, oldEpoch, fresh)
	}
	newHandle, _ := freshNodes[0].(map[string]any)["node_id"].(string)
	agentAct := mustAPI(t, 200, r.listen, "POST", sp+"/act", "con-ho-next", `{"action":"fill","node_id":"`+newHandle+`","value":"the agent again"}`)
	if field(agentAct, "receipt", "outcome") != "applied" || agentAct["epoch_id"] != newEpoch || newHandle == oldHandle {
		t.Fatalf("the agent's act on the new epoch %s: %v", newEpoch, agentAct)
	}

	// What the database recorded: the person's two acts as theirs, the handoff returned with its
	// checkpoint, the held click's approval (the person's) cancelled by the hand-back; the site
	// never received the held submission.
	dsn, err := pgcluster.ConnStringFor(dir, "bap")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var acts int
	var hstate, holder, checkpoint, astate string
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM task_command WHERE task_id = $1 AND operation = 'act' AND actor = 'operator:local'`, taskID).Scan(&acts); err != nil || acts != 2 {
		t.Fatalf("the person's acts in task_command: %d (%v), want 2", acts, err)
	}
	if err := conn.QueryRow(ctx, `SELECT state, holder, coalesce(checkpoint_id, '') FROM task_handoff WHERE task_id = $1`, taskID).Scan(&hstate, &holder, &checkpoint); err != nil ||
		hstate != "returned" || holder != "operator:local" || checkpoint == "" {
		t.Fatalf("the handoff row: %q %q %q (%v)", hstate, holder, checkpoint, err)
	}
	if err := conn.QueryRow(ctx, `SELECT state FROM approval_request WHERE task_id = $1 AND requested_by = 'operator:local'`, taskID).Scan(&astate); err != nil || astate != "cancelled" {
		t.Fatalf("the person's held click: approval %q (%v), want cancelled", astate, err)
	}
	if n := site.orders.Load(); n != orders {
		t.Fatalf("the held submission reached the site: %d orders, %d before", n, orders)
	}
}

// The Dead letters page follows live events: a delegated task whose plan step fails for good
// (navigating outside the task's allowed origins is never retried) appears on the open page,
// without a reload, with what failed and why, as the task's own events recorded it.
func TestConsoleDeadLetters(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	r := start(t, bin, dir)
	site := newMultiSite(t)
	b := newBrowserDriver(t)
	b.do(map[string]any{"op": "goto", "url": consoleLogin(t, bin, dir)})
	b.do(map[string]any{"op": "wait", "loc": role("heading", "Approvals")})
	b.do(map[string]any{"op": "click", "loc": role("link", "Dead letters")})
	b.do(map[string]any{"op": "wait", "loc": css("#dead-letters .empty")})
	b.do(map[string]any{"op": "wait", "loc": css(`#live[data-stream="open"]`), "state": "attached"})

	plan := `[{"op":"navigate","args":{"url":"` + site.srv.URL + `/form"}},{"op":"navigate","args":{"url":"http://elsewhere.invalid/"}}]`
	taskID := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "dl-task",
		`{"goal":"wander off","policy":{"allowed_origins":["`+site.srv.URL+`"]},"plan":`+plan+`}`), "task", "task_id")
	card := `[data-dead-letter]`
	b.do(map[string]any{"op": "wait", "loc": map[string]any{"css": card, "hasText": taskID}, "timeout": 60000})
	var finished map[string]any
	for _, e := range mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")["events"].([]any) {
		if ev := e.(map[string]any); ev["type"] == "plan.step_finished" && ev["data"].(map[string]any)["dead_lettered"] == true {
			finished = ev["data"].(map[string]any)
		}
	}
	txt := b.text(css(card))
	for _, want := range []string{"Step 2 (navigate) failed", fmt.Sprint(finished["problem_code"]), "elsewhere.invalid", "not retryable"} {
		if finished == nil || !strings.Contains(txt, want) {
			t.Errorf("the dead letter card lacks %q: %s (event %v)", want, txt, finished)
		}
	}
	if st := field(mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+taskID, "", ""), "task", "state"); st != "failed" {
		t.Fatalf("the dead-lettered task is %s", st)
	}
	b.page("dead-letters")
}
