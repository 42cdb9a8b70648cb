package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/osuser"
	"github.com/originweave/bap/server/internal/proctree"
	"github.com/originweave/bap/server/internal/tmptree"
)

// procInfo is what /proc says about one process.
type procInfo struct {
	pid     int
	uids    []string // real, effective, saved, filesystem
	cmdline []string
	environ []string // nil when not readable
	userNS  string
}

// readProc reads a process's credentials, command line, environment and
// user namespace.
func readProc(pid int) (procInfo, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return procInfo{}, err
	}
	pi := procInfo{pid: pid}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			pi.uids = strings.Fields(rest)
		}
	}
	cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return procInfo{}, err
	}
	// Chromium's helpers rewrite their title into one space-separated string
	// (which may run over the environment's memory: their environ is then a
	// tail of the title).
	pi.cmdline = strings.Fields(strings.ReplaceAll(string(cmd), "\x00", " "))
	if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil && len(env) > 0 {
		pi.environ = strings.Split(strings.TrimRight(string(env), "\x00"), "\x00")
	}
	pi.userNS, _ = os.Readlink(filepath.Join(dir, "ns", "user"))
	return pi, nil
}

// browserProcs returns the processes of the browser started as pid: its
// process group and every descendant (whatever group it moved to).
func browserProcs(t testing.TB, pid int) []procInfo {
	t.Helper()
	procs := proctree.Processes()
	var out []procInfo
	for n, pr := range procs {
		ours := pr.PGID == pid
		for p := n; !ours && p > 1; p = procs[p].PPID {
			ours = p == pid
		}
		if !ours {
			continue
		}
		if pi, err := readProc(n); err == nil {
			out = append(out, pi)
		}
	}
	return out
}

// processOf returns the running browser process of b.
func processOf(t *testing.T, b *Browser) *process {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proc == nil {
		t.Fatal("the browser is not running")
	}
	return b.proc.p
}

// TestBrowserProcessIsSandboxedUnprivilegedAndGetsAMinimalEnvironment starts
// browsers with database and BAP_ variables in this process's environment and
// reads every browser process from /proc: never root when the test runs as
// root (the user is DefaultRunAsUser), never --no-sandbox unless asked, the
// sandbox's own user namespace in use, and none of those variables.
func TestBrowserProcessIsSandboxedUnprivilegedAndGetsAMinimalEnvironment(t *testing.T) {
	canaries := map[string]string{
		"BAP_PROCESS_TEST_CANARY": "bap-canary", "BAP_DATABASE_URL": "postgres://bap:canary@db/bap",
		"DATABASE_URL": "postgres://canary@db/x", "PGPASSWORD": "pg-canary", "BAP_ORCHESTRATOR_TOKEN": "tok-canary",
	}
	for k, v := range canaries {
		t.Setenv(k, v)
	}
	wantUID := strconv.Itoa(os.Getuid())
	if os.Geteuid() == 0 {
		a, err := osuser.Resolve(0, DefaultRunAsUser, "browser user")
		if err != nil {
			t.Fatalf("the browser user (scripts/install-deps.sh creates it): %v", err)
		}
		wantUID = strconv.FormatUint(uint64(a.UID), 10)
	}
	ownNS, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		noSandbox bool
	}{
		{"sandboxed", false},
		{"explicit opt-out", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			b, err := Start(ctx, Config{WarmContexts: 1, NoSandbox: tc.noSandbox})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			s, err := b.OpenSession(ctx, "bs_process_test", testPolicy(t), func(Event) {})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Navigate(ctx, NavigateRequest{URL: fx.A + "/shop.html"}); err != nil {
				t.Fatal(err) // a renderer with a page in it
			}
			p := processOf(t, b)
			procs := browserProcs(t, p.cmd.Process.Pid)
			if len(procs) < 3 {
				t.Fatalf("found %d browser processes, want the browser and its helpers: %+v", len(procs), procs)
			}
			var inSandboxNS, renderers int
			for _, pi := range procs {
				for _, u := range pi.uids {
					if u != wantUID {
						t.Errorf("process %d %v runs as uids %v, want %s", pi.pid, pi.cmdline[0], pi.uids, wantUID)
						break
					}
				}
				if !tc.noSandbox && hasArg(pi.cmdline, "--no-sandbox") {
					t.Errorf("process %d %.80v has --no-sandbox on its command line", pi.pid, pi.cmdline)
				}
				if hasArg(pi.cmdline, "--type=renderer") {
					renderers++
				}
				if pi.userNS != ownNS {
					inSandboxNS++
				}
				for _, kv := range pi.environ {
					k, _, _ := strings.Cut(kv, "=")
					if strings.HasPrefix(k, "BAP_") || strings.HasPrefix(k, "PG") || k == "DATABASE_URL" {
						t.Errorf("process %d has %s in its environment", pi.pid, k)
					}
					for _, v := range canaries {
						if strings.Contains(kv, v) {
							t.Errorf("process %d has a canary value in %s", pi.pid, k)
						}
					}
				}
			}
			if renderers == 0 {
				t.Errorf("no renderer among the browser's processes %+v", procs)
			}
			// The namespace sandbox puts the zygote and renderers in a user namespace of their own.
			if sandboxed := inSandboxNS > 0; sandboxed == tc.noSandbox {
				t.Errorf("%d processes in a user namespace of their own; want some only with the sandbox on", inSandboxNS)
			}
			main, err := readProc(p.cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if got := hasArg(main.cmdline, "--no-sandbox"); got != tc.noSandbox {
				t.Errorf("the browser's command line has --no-sandbox: %v, want %v", got, tc.noSandbox)
			}
			env := map[string]string{}
			for _, kv := range main.environ {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			if env["HOME"] != filepath.Join(p.dir(), "home") || env["TMPDIR"] != filepath.Join(p.dir(), "tmp") || env["PATH"] == "" {
				t.Errorf("browser environment HOME=%q TMPDIR=%q PATH=%q, want its own directories under %s and PATH",
					env["HOME"], env["TMPDIR"], env["PATH"], p.dir())
			}
		})
	}
}

func hasArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

// TestBrowserEnvKeepsOnlyWhatItNeeds checks browserEnv against a parent
// environment full of things the browser must not see.
func TestBrowserEnvKeepsOnlyWhatItNeeds(t *testing.T) {
	t.Parallel()
	parent := map[string]string{
		"PATH": "/usr/bin:/bin", "LANG": "fr_FR.UTF-8", "TZ": "Europe/Paris", "HOME": "/root",
		"BAP_DATABASE_URL": "postgres://x", "DATABASE_URL": "postgres://y", "PGPASSWORD": "p", "PGHOST": "h",
		"BAP_ORCHESTRATOR_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "k", "GITHUB_TOKEN": "g", "XDG_RUNTIME_DIR": "/run/user/0",
		"DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/0/bus", "SSH_AUTH_SOCK": "/tmp/agent",
	}
	got := browserEnv("/t/b", func(k string) (string, bool) { v, ok := parent[k]; return v, ok })
	want := map[string]string{
		"HOME": "/t/b/home", "XDG_CONFIG_HOME": "/t/b/home/.config", "XDG_CACHE_HOME": "/t/b/home/.cache",
		"XDG_DATA_HOME": "/t/b/home/.local/share", "XDG_STATE_HOME": "/t/b/home/.local/state",
		"TMPDIR": "/t/b/tmp", "BREAKPAD_DUMP_LOCATION": "/t/b/crash",
		"PATH": "/usr/bin:/bin", "LANG": "fr_FR.UTF-8", "TZ": "Europe/Paris",
	}
	seen := map[string]bool{}
	for _, kv := range got {
		k, v, _ := strings.Cut(kv, "=")
		if seen[k] {
			t.Errorf("%s twice", k)
		}
		seen[k] = true
		if w, ok := want[k]; !ok || w != v {
			t.Errorf("browser environment has %s=%q, want %q (present: %v)", k, v, w, ok)
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("browser environment lacks %s", k)
		}
	}
}

// testDirs is a browser directory tree without a browser, for the file
// operations bap performs in it.
func testDirs(t *testing.T) (*process, osuser.Account) {
	t.Helper()
	acct, err := browserAccount(Config{})
	if err != nil {
		t.Fatal(err)
	}
	tree, root, err := newBrowserDirs(acct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = root.Close()
		_ = os.RemoveAll(tree.Dir)
		_ = tree.Close()
	})
	return &process{tree: tree, root: root, acct: acct}, acct
}

func ownerMode(t *testing.T, path string) (uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid, fi.Mode()
}

// TestBrowserDirectoriesBelongToTheBrowserUser checks the owner and mode of
// every directory of the tree and of an upload, and that bap's own
// operations in it cannot be turned to other files by links the browser user
// could plant.
func TestBrowserDirectoriesBelongToTheBrowserUser(t *testing.T) {
	t.Parallel()
	p, acct := testDirs(t)
	me := uint32(os.Geteuid())
	bapMode := os.FileMode(0o700)
	if acct.Switch {
		bapMode = 0o711
	}
	session := filepath.Join(p.dir(), "bap-test")
	dl := filepath.Join(session, "downloads")
	up := filepath.Join(session, "uploads", "art_1")
	if err := p.makeDownloadDir(dl); err != nil {
		t.Fatal(err)
	}
	if err := p.mkdirBap(up); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(up, "cv.pdf")
	if err := p.writeUpload(file, []byte("%PDF-1.7")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  string
		owner uint32
		mode  os.FileMode
	}{
		{p.dir(), me, os.ModeDir | bapMode},
		{filepath.Join(p.dir(), tmptree.LockName), me, 0o600},
		{filepath.Join(p.dir(), "profile"), acct.UID, os.ModeDir | 0o700},
		{filepath.Join(p.dir(), "home"), acct.UID, os.ModeDir | 0o700},
		{filepath.Join(p.dir(), "tmp"), acct.UID, os.ModeDir | 0o700},
		{filepath.Join(p.dir(), "crash"), acct.UID, os.ModeDir | 0o700},
		{session, me, os.ModeDir | bapMode},
		{dl, acct.UID, os.ModeDir | 0o700},
		{filepath.Join(session, "uploads"), me, os.ModeDir | bapMode},
		{up, me, os.ModeDir | bapMode},
		{file, acct.UID, 0o600},
	} {
		owner, mode := ownerMode(t, tc.path)
		if owner != tc.owner || mode != tc.mode {
			t.Errorf("%s: owner uid %d mode %v, want uid %d mode %v", tc.path, owner, mode, tc.owner, tc.mode)
		}
	}

	// Files outside the tree that a planted link could point at.
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("not for the browser"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := func(name, target string) string {
		path := filepath.Join(dl, name)
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		_ = os.Lchown(path, int(acct.UID), int(acct.GID))
		return path
	}
	download := func(name string, content []byte) string {
		path := filepath.Join(dl, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := acct.Chown(path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if b, err := p.readDownload(download("ok", []byte("a,b\n")), 100); err != nil || string(b) != "a,b\n" {
		t.Errorf("readDownload of a download = %q, %v", b, err)
	}
	if _, err := p.readDownload(download("big", make([]byte, 101)), 100); err == nil {
		t.Error("readDownload read a file over the limit")
	}
	if b, err := p.readDownload(plant("link", secret), 1<<20); err == nil {
		t.Errorf("readDownload followed a link out of the tree: %q", b)
	}
	if b, err := p.readDownload(plant("rel", "../../../../../../../.."+secret), 1<<20); err == nil {
		t.Errorf("readDownload followed a relative link out of the tree: %q", b)
	}
	if _, err := p.readDownload(secret, 1<<20); err == nil {
		t.Error("readDownload read a path outside the tree")
	}
	if acct.Switch {
		// A hard link to a file the browser user does not own is not its download.
		hard := filepath.Join(dl, "hard")
		if err := os.Link(secret, hard); err != nil {
			t.Fatal(err)
		}
		if b, err := p.readDownload(hard, 1<<20); err == nil {
			t.Errorf("readDownload read another user's file through a hard link: %q", b)
		}
	}
	// A download directory replaced by a link (the browser user owns it) does
	// not take bap's writes or reads elsewhere.
	moved := filepath.Join(session, "downloads.moved")
	if err := os.Rename(dl, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, dl); err != nil {
		t.Fatal(err)
	}
	if b, err := p.readDownload(filepath.Join(dl, "secret"), 1<<20); err == nil {
		t.Errorf("readDownload went through a linked directory: %q", b)
	}
	if err := p.writeUpload(filepath.Join(dl, "x"), []byte("y")); err == nil {
		t.Error("writeUpload wrote through a linked directory")
	}
	if err := p.mkdirBap(filepath.Join(dl, "sub")); err == nil {
		t.Error("mkdirBap created a directory through a linked directory")
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file appeared outside the tree: %v", err)
	}
}

// fakeChromium writes an executable script, in a directory the browser user
// can reach, that prints msg on stderr and exits 1 as Chromium does when it
// cannot start its sandbox. (A real sandbox failure needs a kernel setting
// changed for the whole machine.)
func fakeChromium(t *testing.T, msg string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bap-fake-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "chromium")
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' %s >&2\nexit 1\n", shellQuote(msg))
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil { // #nosec G306 -- the browser user executes it
		t.Fatal(err)
	}
	return bin
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestSandboxFailureNamesTheFix: when Chromium says its sandbox cannot
// start, Start refuses with a SandboxError (an ErrUnavailable) naming what
// to change; other failures stay plain ErrUnavailable.
func TestSandboxFailureNamesTheFix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		output  string
		sandbox bool
		want    []string
	}{
		{
			name: "no user namespaces",
			// Chromium 156's message (Debian build) when neither the namespace
			// sandbox nor the setuid helper can start.
			output: "[1:1:0101/000000.000000:FATAL:content/browser/zygote_host/zygote_host_impl_linux.cc:132] No usable sandbox! " +
				"If this is a Debian system, please install the chromium-sandbox package to solve this problem. If you are " +
				"running on Ubuntu 23.10+ or another Linux distro that has disabled unprivileged user namespaces with AppArmor, " +
				"see https://chromium.googlesource.com/chromium/src/+/main/docs/security/apparmor-userns-restrictions.md. If " +
				"you want to live dangerously and need an immediate workaround, you can try using --no-sandbox.",
			sandbox: true,
			want:    []string{"kernel.unprivileged_userns_clone", "kernel.apparmor_restrict_unprivileged_userns", "chromium-sandbox", "--browser-no-sandbox", "No usable sandbox!"},
		},
		{
			name:    "namespace refused",
			output:  "[1:1:0101/000000.000000:FATAL:sandbox/linux/services/credentials.cc:131] Failed to move to new namespace: PID namespaces supported, Network namespace supported, but failed: errno = Operation not permitted",
			sandbox: true,
			want:    []string{"user.max_user_namespaces", "seccomp"},
		},
		{
			name:    "root",
			output:  "[1:1:0101/000000.000000:ERROR:content/browser/zygote_host/zygote_host_impl_linux.cc:101] Running as root without --no-sandbox is not supported. See https://crbug.com/638180.",
			sandbox: true,
			want:    []string{"--browser-user"},
		},
		{
			name:   "something else",
			output: "[1:1:0101/000000.000000:FATAL:ui/base/resource/resource_bundle.cc:1] Check failed: some resource",
			want:   []string{"the browser did not answer", "resource_bundle"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			b, err := Start(ctx, Config{Binary: fakeChromium(t, tc.output), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err == nil {
				_ = b.Close()
				t.Fatal("Start succeeded with a browser that exits")
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("Start = %v, want ErrUnavailable", err)
			}
			var se *SandboxError
			if got := errors.As(err, &se); got != tc.sandbox {
				t.Errorf("Start = %v (%T): a SandboxError = %v, want %v", err, err, got, tc.sandbox)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start = %q, want it to name %q", err, w)
				}
			}
		})
	}
}

// TestBrowserUserIsChecked: the account must exist and must not be root;
// only root may name one.
func TestBrowserUserIsChecked(t *testing.T) {
	t.Parallel()
	type tcase struct {
		runAs string
		want  string
	}
	var cases []tcase
	if os.Geteuid() == 0 {
		cases = []tcase{
			{"bap-no-such-user-4711", "useradd --system"},
			{"root", "must not run as root"},
		}
	} else {
		cases = []tcase{{"root", "needs root"}}
	}
	for _, tc := range cases {
		_, err := browserAccount(Config{RunAsUser: tc.runAs})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("browserAccount(%q) = %v, want ErrUnavailable naming %q", tc.runAs, err, tc.want)
		}
	}
}
