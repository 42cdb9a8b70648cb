package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The Playwright MCP side of BenchmarkComponentScores: the component fixture tasks (tasks.json)
// run through Playwright MCP (@playwright/mcp, pinned in testdata/playwright-mcp, installed by
// scripts/install-playwright-mcp.sh) over stdio with the official Go MCP SDK, on the system
// Chromium (never a downloaded browser), and judged exactly as runComponentTask judges BAP.
//
// The driver is the bounded vocabulary a task allows, played by a careful agent that reads the
// page only through browser_snapshot (never browser_evaluate or browser_run_code_unsafe):
//
//   - navigate: browser_navigate to the page (it waits for the load event);
//   - each step with a query: browser_snapshot, and find the element in the aria YAML by role and
//     accessible name, ranked as BAP ranks matches (ariasnapshot_test.go). A step whose element
//     is missing takes a fresh snapshot every 200 ms until it appears, bounded by the step
//     timeout BAP gets (componentStepTimeoutMS), as an agent would look again while a page
//     hydrates. When Playwright gave the element no ref (it does not receive pointer events: a
//     visually hidden native input under a styled label), the agent clicks what a person
//     would: its clickable ancestor ([cursor=pointer]) or its visible label (ariaTarget);
//   - click → browser_click; fill → browser_type (not submitted); clear → browser_type "";
//     check/uncheck → browser_click only when [checked] differs from the wanted state;
//     hover → browser_hover; focus → browser_click unless the element is [active];
//   - select_option → browser_select_option with the values; when that fails because the
//     element is not a native <select>, click it, then click the option of that name from a
//     fresh snapshot (role option first, then menu items and radios), as a person would;
//   - press_key → browser_press_key; with a query, first click the element (to focus it)
//     unless it is [active] or the previous step already acted on it (a person clicks a slider
//     once, then presses the arrow key three times);
//   - then wait, bounded, on the recorder for the expected effects and require exactly them.
//
// A step whose element is not found, or whose tool answers an error, fails the task.

const (
	pwmcpDir = "testdata/playwright-mcp"
	// pwmcpStamp is written by scripts/install-playwright-mcp.sh after npm ci.
	pwmcpStamp = pwmcpDir + "/node_modules/.bap-playwright-mcp.sha256"
	pwmcpCLI   = pwmcpDir + "/node_modules/@playwright/mcp/cli.js"
	// pwmcpPoll is the pause between two snapshots while a step's element is not there yet.
	pwmcpPoll = 200 * time.Millisecond
	// pwmcpTaskSlack bounds, with the step timeouts, one task: server start, browser launch,
	// navigation and the wait for the effects (pwmcpTaskTimeout).
	pwmcpTaskSlack = 2 * time.Minute
)

// pwmcpAllowedTools are the only tools the driver calls: no script evaluation, no code.
var pwmcpAllowedTools = []string{"browser_navigate", "browser_snapshot", "browser_click", "browser_type",
	"browser_select_option", "browser_press_key", "browser_hover", "browser_close"}

// pwmcpEnv is how Playwright MCP is started, and the versions in use.
type pwmcpEnv struct {
	Node, CLI, Chromium                                   string
	MCPVersion, CoreVersion, NodeVersion, ChromiumVersion string
}

// findPWMCP locates the installed server, a Node to run it (BAP_PWMCP_NODE; else the pinned Node
// of tools/ when scripts/node-tools.sh installed it; else node on PATH) and the system Chromium
// (BAP_CHROMIUM, else chromium, chromium-browser or google-chrome on PATH, as the adapter looks).
func findPWMCP() (pwmcpEnv, error) {
	var env pwmcpEnv
	if _, err := os.Stat(pwmcpStamp); err != nil {
		return env, fmt.Errorf("Playwright MCP is not installed: run scripts/install-playwright-mcp.sh (make bench does)")
	}
	cli, err := filepath.Abs(pwmcpCLI)
	if err != nil {
		return env, err
	}
	env.CLI = cli
	env.Node = os.Getenv("BAP_PWMCP_NODE")
	if env.Node == "" {
		if p, err := filepath.Abs("../../../tools/node_modules/node/bin/node"); err == nil {
			if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
				env.Node = p
			}
		}
	}
	if env.Node == "" {
		if env.Node, err = exec.LookPath("node"); err != nil {
			return env, fmt.Errorf("no Node.js to run Playwright MCP (set BAP_PWMCP_NODE): %w", err)
		}
	}
	env.Chromium = os.Getenv("BAP_CHROMIUM")
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if env.Chromium != "" {
			break
		}
		env.Chromium, _ = exec.LookPath(name)
	}
	if env.Chromium == "" {
		return env, errors.New("no Chromium for Playwright MCP (set BAP_CHROMIUM)")
	}
	env.MCPVersion = packageVersion(pwmcpDir + "/node_modules/@playwright/mcp/package.json")
	env.CoreVersion = packageVersion(pwmcpDir + "/node_modules/playwright-core/package.json")
	if out, err := exec.Command(env.Node, "--version").Output(); err == nil {
		env.NodeVersion = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command(env.Chromium, "--version").Output(); err == nil {
		env.ChromiumVersion = strings.TrimSpace(string(out))
	}
	return env, nil
}

func packageVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var p struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(b, &p)
	return p.Version
}

// pwmcpArgs are the server's options: headless, in-memory profile, the system Chromium, BAP's
// window size and BAP's per-step timeout; its files go to dir.
func (env pwmcpEnv) args(dir string) []string {
	a := []string{env.CLI, "--headless", "--isolated", "--browser", "chromium", "--executable-path", env.Chromium,
		"--viewport-size", "1280x800", "--timeout-action", fmt.Sprint(componentStepTimeoutMS),
		"--output-dir", dir, "--image-responses", "omit"}
	if os.Geteuid() == 0 {
		a = append(a, "--no-sandbox") // Chromium refuses to run as root with its sandbox
	}
	return a
}

// scoreResult is one task's outcome through one system.
type scoreResult struct {
	componentResult
	seconds float64
	notes   []string // how the Playwright MCP driver got there (fallbacks it used)
}

// tailBuffer keeps the last bytes written to it (a child's stderr, for failure reasons).
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = slices.Clone(t.b[len(t.b)-4096:])
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// pwmcpSession is one Playwright MCP server (and its browser) driving one task.
type pwmcpSession struct {
	cs     *mcp.ClientSession
	stderr *tailBuffer
}

func (p *pwmcpSession) call(ctx context.Context, name string, args map[string]any) (string, error) {
	if !slices.Contains(pwmcpAllowedTools, name) {
		panic("the Playwright MCP driver may not call " + name)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Duration(componentStepTimeoutMS)*time.Millisecond+30*time.Second)
	defer cancel()
	res, err := p.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		if s := p.stderr.String(); s != "" {
			return "", fmt.Errorf("%s: %w (server stderr: %s)", name, err, clip(s, 400))
		}
		return "", fmt.Errorf("%s: %w", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return b.String(), fmt.Errorf("%s: %s", name, toolError(b.String()))
	}
	return b.String(), nil
}

// toolError is the gist of a tool's error text: its "### Error" section, on one line.
func toolError(text string) string {
	if i := strings.Index(text, "### Error"); i >= 0 {
		text = text[i+len("### Error"):]
		if j := strings.Index(text, "\n###"); j >= 0 {
			text = text[:j]
		}
	}
	// Playwright's call log follows "Call log:": keep the message and the log's last finding
	// (such as "<div …> intercepts pointer events"), not its retries.
	msg, log, hasLog := strings.Cut(ansiEscape.ReplaceAllString(text, ""), "Call log:")
	msg = strings.Join(strings.Fields(msg), " ")
	if hasLog {
		lines := strings.Split(log, "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			l := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(lines[i]), "- "))
			if l == "" || strings.Contains(l, "waiting") || strings.Contains(l, "retrying") || strings.Contains(l, "scrolling") ||
				strings.Contains(l, "visible, enabled and stable") || strings.HasPrefix(l, "attempting") {
				continue
			}
			msg += " (call log: " + l + ")"
			break
		}
	}
	return clip(msg, 400)
}

// ansiEscape matches the terminal colour codes in Playwright's call logs.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// snapshot takes a browser_snapshot and parses its YAML.
func (p *pwmcpSession) snapshot(ctx context.Context) ([]ariaNode, error) {
	text, err := p.call(ctx, "browser_snapshot", map[string]any{})
	if err != nil {
		return nil, err
	}
	yaml, ok := extractSnapshotYAML(text)
	if !ok {
		return nil, fmt.Errorf("browser_snapshot: no YAML in the answer: %s", clip(text, 200))
	}
	return parseAriaSnapshot(yaml)
}

// find waits, at most the step timeout, for the first of qs to match in a snapshot.
func (p *pwmcpSession) find(ctx context.Context, qs ...ariaQuery) ([]ariaNode, int, error) {
	deadline := time.Now().Add(componentStepTimeoutMS * time.Millisecond)
	for {
		nodes, err := p.snapshot(ctx)
		if err != nil {
			return nil, -1, err
		}
		for _, q := range qs {
			if i := findAria(nodes, q); i >= 0 {
				return nodes, i, nil
			}
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("not in the snapshot after %d ms: %s", componentStepTimeoutMS, qs[0])
			if near := ariaNearMisses(nodes, qs[0]); len(near) > 0 {
				msg += "; same name under another role: " + strings.Join(near, "; ")
			}
			return nodes, -1, errors.New(msg)
		}
		select {
		case <-ctx.Done():
			return nil, -1, ctx.Err()
		case <-time.After(pwmcpPoll):
		}
	}
}

// pwmcpTaskTimeout bounds one task: each step may wait the step timeout for its element and
// again for its tool (select_option: for the option too), plus the slack.
func pwmcpTaskTimeout(tk componentTask) time.Duration {
	return time.Duration(len(tk.Steps))*3*componentStepTimeoutMS*time.Millisecond + componentEffectWait + pwmcpTaskSlack
}

// runPWMCPTask runs one task through a Playwright MCP server of its own (a fresh browser, as BAP
// gets a fresh session) against a fixture site of its own.
func runPWMCPTask(t *testing.T, env pwmcpEnv, tk componentTask) (res scoreResult) {
	start := time.Now()
	site := newComponentSite(t)
	res = scoreResult{componentResult: componentResult{task: tk, ran: true, step: -1}}
	defer func() { res.seconds = time.Since(start).Seconds() }()
	ctx, cancel := context.WithTimeout(context.Background(), pwmcpTaskTimeout(tk))
	defer cancel()

	p, stop, err := startPWMCP(ctx, env, t.TempDir(), "bap-component-bench")
	if err != nil {
		res.problem = err.Error()
		return res
	}
	defer stop()

	if _, err := p.call(ctx, "browser_navigate", map[string]any{"url": site.srv.URL + tk.Page}); err != nil {
		res.problem = "navigate: " + err.Error()
		return res
	}
	lastQuery := ""
	for i, st := range tk.Steps {
		res.step = i
		note, err := p.step(ctx, st, lastQuery)
		if note != "" {
			res.notes = append(res.notes, fmt.Sprintf("step %d: %s", i, note))
		}
		if err != nil {
			res.problem = err.Error()
			return res
		}
		if q, ok := st["query"]; ok {
			b, _ := json.Marshal(q)
			lastQuery = string(b)
		}
	}
	site.judge(tk, &res.componentResult)
	return res
}

// startPWMCP starts a Playwright MCP server (and, at its first tool call, its browser) with its
// files under dir, connected as client; stop closes the browser and the server and kills what
// they left behind.
func startPWMCP(ctx context.Context, env pwmcpEnv, dir, client string) (p *pwmcpSession, stop func(), err error) {
	cmd := exec.Command(env.Node, env.args(dir)...)
	cmd.Dir = dir // the server writes its snapshot and console files under its workspace
	stderr := &tailBuffer{}
	cmd.Stderr = stderr
	ownProcessGroup(cmd)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: client, Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 3 * time.Second}, nil)
	if err != nil {
		killProcessGroup(cmd)
		return nil, nil, fmt.Errorf("starting Playwright MCP: %w (stderr: %s)", err, clip(stderr.String(), 400))
	}
	p = &pwmcpSession{cs: cs, stderr: stderr}
	return p, func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _ = p.call(cctx, "browser_close", map[string]any{})
		ccancel()
		_ = cs.Close()
		killProcessGroup(cmd) // a browser the server left behind
	}, nil
}

// step plays one task step; lastQuery is the previous step's query (JSON) when it had one.
func (p *pwmcpSession) step(ctx context.Context, st map[string]any, lastQuery string) (note string, err error) {
	action, _ := st["action"].(string)
	qm, hasQuery := st["query"].(map[string]any)
	if !hasQuery {
		if action != "press_key" {
			return "", fmt.Errorf("%s without a query", action)
		}
		key, _ := st["key"].(string)
		_, err := p.call(ctx, "browser_press_key", map[string]any{"key": key})
		return "", err
	}
	q, err := ariaQueryOf(qm)
	if err != nil {
		return "", err
	}
	nodes, i, err := p.find(ctx, q)
	if err != nil {
		return "", err
	}
	node := nodes[i]
	ref, via := ariaTarget(nodes, i)
	if ref == "" {
		return "", fmt.Errorf("found %s but it has no ref (Playwright gives refs only to visible elements that receive pointer events) and no clickable ancestor or label with one", node.describe())
	}
	if via != "" {
		note = "no ref on " + node.describe() + "; used its " + via
	}
	target := map[string]any{"target": ref, "element": node.describe()}
	with := func(kv ...any) map[string]any {
		m := map[string]any{"target": ref, "element": node.describe()}
		for j := 0; j+1 < len(kv); j += 2 {
			m[kv[j].(string)] = kv[j+1]
		}
		return m
	}
	_, active := node.Attrs["active"]
	qb, _ := json.Marshal(qm)
	focused := active || string(qb) == lastQuery
	switch action {
	case "click":
		_, err = p.call(ctx, "browser_click", target)
	case "fill":
		value, _ := st["value"].(string)
		_, err = p.call(ctx, "browser_type", with("text", value))
	case "clear":
		_, err = p.call(ctx, "browser_type", with("text", ""))
	case "check", "uncheck":
		if node.checked() == (action == "check") {
			return joinNote(note, "already in the wanted state: no click"), nil
		}
		_, err = p.call(ctx, "browser_click", target)
	case "hover":
		_, err = p.call(ctx, "browser_hover", target)
	case "focus":
		if !focused {
			_, err = p.call(ctx, "browser_click", target)
		}
	case "press_key":
		if !focused {
			if _, err = p.call(ctx, "browser_click", target); err != nil {
				return note, err
			}
		}
		key, _ := st["key"].(string)
		_, err = p.call(ctx, "browser_press_key", map[string]any{"key": key})
	case "select_option":
		var values []string
		if vs, ok := st["values"].([]any); ok {
			for _, v := range vs {
				if s, ok := v.(string); ok {
					values = append(values, s)
				}
			}
		}
		_, err = p.call(ctx, "browser_select_option", with("values", values))
		if err == nil || !notNativeSelect(err) {
			return note, err
		}
		note = joinNote(note, "browser_select_option refused ("+clip(err.Error(), 120)+"): clicked it, then the option")
		if _, err := p.call(ctx, "browser_click", target); err != nil {
			return note, err
		}
		for _, v := range values {
			var qs []ariaQuery
			for _, role := range []string{"option", "menuitemradio", "menuitem", "radio"} {
				qs = append(qs, ariaQuery{Role: role, Name: v})
			}
			onodes, oi, err := p.find(ctx, qs...)
			if err != nil {
				return note, fmt.Errorf("the option after opening the select: %w", err)
			}
			oref, ovia := ariaTarget(onodes, oi)
			if oref == "" {
				return note, fmt.Errorf("found option %s but it has no ref", onodes[oi].describe())
			}
			if ovia != "" {
				note = joinNote(note, "no ref on "+onodes[oi].describe()+"; used its "+ovia)
			}
			if _, err := p.call(ctx, "browser_click", map[string]any{"target": oref, "element": onodes[oi].describe()}); err != nil {
				return note, err
			}
		}
		return note, nil
	default:
		return note, fmt.Errorf("action %q has no Playwright MCP counterpart in the driver", action)
	}
	return note, err
}

// notNativeSelect reports whether browser_select_option failed because its target is not a
// <select> (Playwright: "Element is not a <select> element").
func notNativeSelect(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "not a <select>") || strings.Contains(s, "not a select")
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
