package main

import (
	"encoding/json"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/browser"
	"github.com/originweave/bap/server/internal/proctree"
)

// chromiumProc is one process bap started for its browser, as /proc shows it.
type chromiumProc struct {
	pid     int
	ppid    int
	uids    []string
	args    []string
	environ []string
}

// chromiumProcs returns every descendant of pid whose executable is a Chromium (the launcher
// script execs the real binary, which forks its helpers).
func chromiumProcs(t *testing.T, pid int) []chromiumProc {
	t.Helper()
	parent := proctree.Parents()
	var out []chromiumProc
	for n := range parent {
		under := false
		for p := parent[n]; p > 1 && !under; p = parent[p] {
			under = p == pid
		}
		if !under {
			continue
		}
		dir := filepath.Join("/proc", strconv.Itoa(n))
		cmd, err1 := os.ReadFile(filepath.Join(dir, "cmdline"))
		status, err2 := os.ReadFile(filepath.Join(dir, "status"))
		if err1 != nil || err2 != nil {
			continue
		}
		cp := chromiumProc{pid: n, ppid: parent[n], args: strings.Fields(strings.ReplaceAll(string(cmd), "\x00", " "))}
		if len(cp.args) == 0 || !strings.Contains(filepath.Base(cp.args[0]), "chrom") {
			continue // PostgreSQL, or a helper already gone
		}
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				cp.uids = strings.Fields(rest)
			}
		}
		if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
			cp.environ = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
		}
		out = append(out, cp)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestServeRunsChromiumSandboxedAsAnUnprivilegedUser runs the real `bap serve` with database and
// BAP_ variables in its environment and reads its Chromium processes from /proc, the way `ps`
// would: not root when bap is root, no --no-sandbox, none of those variables. The explicit
// opt-out passes --no-sandbox and says so at WARN and on /readyz.
func TestServeRunsChromiumSandboxedAsAnUnprivilegedUser(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	canaries := []string{"BAP_SANDBOX_TEST_CANARY=bap-canary-1", "DATABASE_URL=postgres://canary-2@db/x", "PGPASSWORD=pg-canary-3"}
	wantUID := strconv.Itoa(os.Getuid())
	if os.Geteuid() == 0 {
		u, err := user.Lookup(browser.DefaultRunAsUser)
		if err != nil {
			t.Fatalf("the browser user (scripts/install-deps.sh creates it): %v", err)
		}
		wantUID = u.Uid
	}
	for _, tc := range []struct {
		name      string
		args      []string
		noSandbox bool
	}{
		{"default", nil, false},
		{"--browser-no-sandbox", []string{"--browser-no-sandbox"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, _ := serveProcess(t, bin, dataDir(t), canaries, tc.args...)
			procs := chromiumProcs(t, r.cmd.Process.Pid)
			var top *chromiumProc // the browser itself: bap's child
			for i, p := range procs {
				if p.ppid == r.cmd.Process.Pid {
					top = &procs[i]
				}
				for _, u := range p.uids {
					if u != wantUID {
						t.Errorf("Chromium process %d runs as uids %v, want %s", p.pid, p.uids, wantUID)
						break
					}
				}
				if !tc.noSandbox && contains(p.args, "--no-sandbox") {
					t.Errorf("Chromium process %d has --no-sandbox: %.100v", p.pid, p.args)
				}
				for _, kv := range p.environ {
					if strings.HasPrefix(kv, "BAP_") || strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "DATABASE_URL=") {
						t.Errorf("Chromium process %d has %s… in its environment", p.pid, kv[:min(len(kv), 12)])
					}
					for _, c := range canaries {
						if _, v, _ := strings.Cut(c, "="); strings.Contains(kv, v) {
							t.Errorf("Chromium process %d has a canary value in its environment", p.pid)
						}
					}
				}
			}
			if top == nil || len(procs) < 3 {
				t.Fatalf("found %d Chromium processes under bap (pid %d), none its child", len(procs), r.cmd.Process.Pid)
			}
			t.Logf("%d Chromium processes under bap, the browser (pid %d) as uid %v", len(procs), top.pid, top.uids)
			if got := contains(top.args, "--no-sandbox"); got != tc.noSandbox {
				t.Errorf("the browser's command line has --no-sandbox: %v, want %v", got, tc.noSandbox)
			}
			if len(top.environ) == 0 {
				t.Error("the browser's environment is unreadable")
			}

			resp, err := unixClient(r.socket).Get("http://bap/readyz")
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var health struct {
				Status string `json:"status"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(raw, &health); err != nil || resp.StatusCode != 200 || health.Status != "ready" {
				t.Fatalf("/readyz = %d %s", resp.StatusCode, raw)
			}
			if got := strings.Contains(health.Detail, "without its sandbox"); got != tc.noSandbox {
				t.Errorf("/readyz detail %q names the missing sandbox: %v, want %v", health.Detail, got, tc.noSandbox)
			}
			warned := false
			for _, line := range strings.Split(r.logs.String(), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) == nil && m["level"] == "WARN" && strings.Contains(m["msg"].(string), "without its sandbox") {
					warned = true
				}
			}
			if warned != tc.noSandbox {
				t.Errorf("a WARN line about the sandbox: %v, want %v\n%s", warned, tc.noSandbox, r.logs)
			}
		})
	}
}

// TestVersionReportsTheBrowserSandbox: `bap version` says whether bap serve, under this
// environment, runs Chromium with its sandbox, and as whom.
func TestVersionReportsTheBrowserSandbox(t *testing.T) {
	for _, tc := range []struct {
		env         string
		sandbox     bool
		wantWarning bool
	}{
		{"", true, false},
		{"1", false, true},
		{"not-a-bool", true, false}, // anything but true keeps the sandbox
	} {
		t.Setenv("BAP_BROWSER_NO_SANDBOX", tc.env)
		var out strings.Builder
		if code := run([]string{"version"}, &out, io.Discard); code != 0 {
			t.Fatalf("exit %d", code)
		}
		var v struct {
			Sandbox  *bool    `json:"browser_sandbox"`
			User     string   `json:"browser_user"`
			Warnings []string `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(out.String()), &v); err != nil || v.Sandbox == nil || *v.Sandbox != tc.sandbox || v.User == "" {
			t.Errorf("BAP_BROWSER_NO_SANDBOX=%q: version %s, want browser_sandbox %v and a browser_user", tc.env, out.String(), tc.sandbox)
		}
		if got := len(v.Warnings) > 0; got != tc.wantWarning {
			t.Errorf("BAP_BROWSER_NO_SANDBOX=%q: warnings %v, want some: %v", tc.env, v.Warnings, tc.wantWarning)
		}
		if os.Geteuid() == 0 && v.User != browser.DefaultRunAsUser {
			t.Errorf("browser_user %q as root, want %s", v.User, browser.DefaultRunAsUser)
		}
	}
}
