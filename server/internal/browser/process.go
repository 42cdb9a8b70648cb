package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/originweave/bap/server/internal/osuser"
	"github.com/originweave/bap/server/internal/tmptree"
)

// DefaultRunAsUser is the account Chromium runs as when this process runs as
// root and Config.RunAsUser is empty: a dedicated system account that owns
// nothing but the browser's own directories (scripts/install-deps.sh creates
// it). Sharing an account with another service (postgres owns the embedded
// cluster's files) would hand that service's files to a compromised browser.
const DefaultRunAsUser = "bap-browser"

// baseFlags are the flags every browser starts with. The first line is what
// the deployment asks for (without the background-networking flags a closed
// network makes Chromium hang on lookups); the rest keep background tabs and
// popups running at full speed, because an agent acts in whichever tab it
// likes. The sandbox is on: there is no --no-sandbox here (Config.NoSandbox
// adds it).
var baseFlags = []string{
	"--headless", "--disable-gpu", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-background-timer-throttling", "--disable-backgrounding-occluded-windows",
	"--disable-renderer-backgrounding", "--disable-ipc-flooding-protection",
	"--disable-default-apps", "--disable-extensions", "--disable-breakpad",
	"--disable-client-side-phishing-detection", "--disable-domain-reliability",
	"--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions",
	"--no-default-browser-check", "--metrics-recording-only", "--password-store=basic",
	"--use-mock-keychain", "--mute-audio", "--hide-scrollbars",
	"--window-size=1280,800",
	"--remote-debugging-pipe",
}

// networkFlags switch off the ways a page could send bytes that a per-context
// HTTP proxy never sees (see netpolicy.go and package egress).
var networkFlags = []string{
	// QUIC (HTTP/3) is UDP: a proxy that speaks HTTP and CONNECT cannot carry
	// it, and Chromium would otherwise race it beside the proxied connection.
	"--disable-quic",
	// WebRTC may send UDP (ICE, STUN, TURN, data channels) straight from the
	// host, around any proxy. disable_non_proxied_udp leaves it only what can
	// go through the proxy (TCP to a TURN server), which the proxy then checks
	// like any other CONNECT. Chromium 14x and 15x read this switch (chrome's
	// kWebRtcIPHandlingPolicy, applied like the WebRTC IP-handling preference);
	// --force-webrtc-ip-handling-policy is not in these builds.
	"--webrtc-ip-handling-policy=disable_non_proxied_udp",
	// DNS prefetch and preconnect hints have no switch in these builds (no
	// --dns-prefetch-disable; network prediction is a profile preference):
	// a context behind its proxy resolves no hint's name, which
	// TestResourceHintsResolveNoNames checks against the same flags without
	// one.
}

// findBinary returns the browser executable: cfg.Binary, or the first of
// chromium, chromium-browser and google-chrome on PATH.
func findBinary(bin string) (string, error) {
	if bin != "" {
		p, err := exec.LookPath(bin)
		if err != nil {
			return "", fmt.Errorf("%w (browser binary %q: %w)", ErrUnavailable, bin, err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: none of chromium, chromium-browser, google-chrome is on PATH (install the Debian package `chromium`, or set BAP_CHROMIUM)", ErrUnavailable)
}

// unavailableError is an [ErrUnavailable] whose message says what to fix.
type unavailableError struct{ msg string }

func (e *unavailableError) Error() string { return "browser unavailable: " + e.msg }
func (e *unavailableError) Unwrap() error { return ErrUnavailable }

// SandboxError reports that Chromium's sandbox could not start on this
// machine. It wraps [ErrUnavailable]; Fix says what the operator can do.
type SandboxError struct {
	// Fix names the change that lets the sandbox start.
	Fix string
	// Output is the tail of Chromium's output.
	Output string
}

func (e *SandboxError) Error() string {
	return "browser unavailable: Chromium's sandbox cannot start: " + e.Fix + "; Chromium said: " + e.Output
}

// Unwrap makes errors.Is(err, ErrUnavailable) hold.
func (e *SandboxError) Unwrap() error { return ErrUnavailable }

// sandboxFailure recognises Chromium's messages for a sandbox that cannot
// start and returns the error naming the fix, or nil.
func sandboxFailure(output string) error {
	tail := tailOf(output, 2000)
	switch {
	case strings.Contains(output, "No usable sandbox!"),
		strings.Contains(output, "Failed to move to new namespace"):
		return &SandboxError{Output: tail, Fix: "Chromium's namespace sandbox needs unprivileged user namespaces " +
			"(sysctl kernel.unprivileged_userns_clone=1 on Debian, user.max_user_namespaces > 0; on Ubuntu 23.10+ " +
			"kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for Chromium; in a container, a " +
			"seccomp profile that allows clone/unshare of user namespaces), or the setuid sandbox helper " +
			"(Debian package chromium-sandbox); bap serve --browser-no-sandbox runs it without a sandbox, at your risk"}
	case strings.Contains(output, "Running as root without --no-sandbox"):
		return &SandboxError{Output: tail, Fix: "Chromium refuses to run as root with its sandbox: run bap as root " +
			"(it then starts Chromium as --browser-user) or as an unprivileged user"}
	}
	return nil
}

// process is one running browser.
type process struct {
	cmd     *exec.Cmd
	tree    *tmptree.Tree // the browser's directory tree (see newBrowserDirs), held while it runs, removed by stop
	root    *os.Root      // dir, opened before anyone else could write in it
	acct    osuser.Account
	conn    *conn
	exited  chan struct{}
	output  *tailBuffer
	stopped sync.Once
	// version is what the browser said it is when it started (Browser.getVersion).
	version browser.GetVersionResult
}

// browserAccount resolves the account the browser runs as: cfg.RunAsUser (or
// DefaultRunAsUser) when this process is root, else the current user.
func browserAccount(cfg Config) (osuser.Account, error) {
	runAs := cfg.RunAsUser
	if runAs == "" && os.Geteuid() == 0 {
		runAs = DefaultRunAsUser
	}
	a, err := osuser.Resolve(os.Geteuid(), runAs, "browser user")
	var unknown user.UnknownUserError
	switch {
	case errors.As(err, &unknown):
		return a, &unavailableError{fmt.Sprintf("%v: Chromium's sandbox refuses root, so bap runs it as an "+
			"unprivileged account; create it (`useradd --system --user-group --home-dir /nonexistent --shell "+
			"/usr/sbin/nologin %s`, which scripts/install-deps.sh does) or name another with --browser-user", err, runAs)}
	case errors.Is(err, osuser.ErrRoot):
		return a, &unavailableError{fmt.Sprintf("%v: Chromium must not run as root; name an unprivileged account with --browser-user", err)}
	case err != nil:
		return a, &unavailableError{err.Error()}
	}
	return a, nil
}

// The browser's directory tree. bap creates it under os.TempDir():
//
//	bap-chromium-*/        0711 bap      (0700 when bap is not root)
//	├── profile/           0700 browser  --user-data-dir (crashpad's "Crash Reports" inside)
//	├── home/              0700 browser  HOME and the XDG directories
//	├── tmp/               0700 browser  TMPDIR (shared memory files with --disable-dev-shm-usage)
//	├── crash/             0700 browser  BREAKPAD_DUMP_LOCATION
//	└── bap-<id>/          0711 bap      one per session (session.go)
//	    ├── downloads/     0700 browser  Chromium saves downloads here (browser.go)
//	    └── uploads/<id>/  0711 bap      files for upload_file: 0600, owned by the browser user (act.go)
//
// The browser user may write only in its own directories; what bap writes for
// it lives in directories bap owns, so a compromised browser cannot make bap
// (possibly root) write or read elsewhere through a symlink: bap's own
// operations go through p.root, which does not follow links out of the tree.
var browserOwnedDirs = []string{"profile", "home", "tmp", "crash"}

// treePrefix names the browser's trees in the temporary directory.
const treePrefix = "bap-chromium-"

// newBrowserDirs creates the tree's root, held by this process (tmptree), and the browser's own
// directories.
func newBrowserDirs(acct osuser.Account) (*tmptree.Tree, *os.Root, error) {
	tree, err := tmptree.New("", treePrefix)
	if err != nil {
		return nil, nil, err
	}
	dir := tree.Dir
	root, err := os.OpenRoot(dir)
	if err == nil {
		err = acct.CheckSearchable(filepath.Dir(dir))
	}
	if err == nil {
		err = root.Chmod(".", bapDirMode(acct))
	}
	for _, d := range browserOwnedDirs {
		if err == nil {
			err = mkdirOwned(root, d, acct)
		}
	}
	if err != nil {
		if root != nil {
			_ = root.Close()
		}
		_ = os.RemoveAll(dir)
		_ = tree.Close()
		return nil, nil, err
	}
	return tree, root, nil
}

// bapDirMode is the mode of directories bap owns in the tree: the browser
// user must be able to pass through them, but not to list or change them.
func bapDirMode(acct osuser.Account) os.FileMode {
	if acct.Switch {
		return 0o711
	}
	return 0o700
}

// mkdirOwned creates rel (one level) in root as a 0700 directory of acct.
func mkdirOwned(root *os.Root, rel string, acct osuser.Account) error {
	if err := root.Mkdir(rel, 0o700); err != nil {
		return err
	}
	if acct.Switch {
		if err := root.Lchown(rel, int(acct.UID), int(acct.GID)); err != nil {
			return fmt.Errorf("giving %s to the browser user %s: %w", rel, acct.Name, err)
		}
	}
	return root.Chmod(rel, 0o700)
}

// dir is the browser's directory tree.
func (p *process) dir() string { return p.tree.Dir }

// rel returns path relative to the tree's root, refusing paths outside it.
func (p *process) rel(path string) (string, error) {
	r, err := filepath.Rel(p.dir(), path)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) || filepath.IsAbs(r) {
		return "", fmt.Errorf("%s is not in the browser's directory %s", path, p.dir())
	}
	return r, nil
}

// mkdirBap creates dir and its missing parents inside the tree as bap's own
// directories (bapDirMode).
func (p *process) mkdirBap(dir string) error {
	r, err := p.rel(dir)
	if err != nil {
		return err
	}
	cur := ""
	for _, part := range strings.Split(r, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		if err := p.root.Mkdir(cur, bapDirMode(p.acct)); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return p.root.Chmod(r, bapDirMode(p.acct))
}

// makeDownloadDir creates a session's download directory (and the session's
// directory above it, bap's): Chromium writes there, so it is the browser
// user's.
func (p *process) makeDownloadDir(dlDir string) error {
	if err := p.mkdirBap(filepath.Dir(dlDir)); err != nil {
		return err
	}
	r, err := p.rel(dlDir)
	if err != nil {
		return err
	}
	return mkdirOwned(p.root, r, p.acct)
}

// writeUpload writes a file for upload_file into a directory of mkdirBap:
// mode 0600, owned by the browser user, which reads it when the page submits.
func (p *process) writeUpload(path string, content []byte) error {
	r, err := p.rel(path)
	if err != nil {
		return err
	}
	f, err := p.root.OpenFile(r, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if err == nil && p.acct.Switch {
		err = f.Chown(int(p.acct.UID), int(p.acct.GID))
	}
	return errors.Join(err, f.Close())
}

// readDownload reads a file Chromium saved in a download directory: a
// regular file (not a link), no larger than limit, and, when the browser runs
// as another account, that account's (a hard link to someone else's file is
// not a download).
func (p *process) readDownload(path string, limit int64) ([]byte, error) {
	r, err := p.rel(path)
	if err != nil {
		return nil, err
	}
	f, err := p.root.OpenFile(r, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); p.acct.Switch && (!ok || sys.Uid != p.acct.UID) {
		return nil, fmt.Errorf("%s is not the browser user's", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit { // it grew since
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, err
}

// browserEnv is the browser's whole environment: its own HOME, XDG and temp
// directories in its tree, and from ours only PATH (the distribution's
// launcher script needs it), the locale and the time zone, and the location
// of a setuid sandbox helper. Nothing else of this process (BAP_*, database
// URLs, PG*, tokens) reaches the browser.
func browserEnv(dir string, parent func(string) (string, bool)) []string {
	home := filepath.Join(dir, "home")
	env := []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"TMPDIR=" + filepath.Join(dir, "tmp"),
		"BREAKPAD_DUMP_LOCATION=" + filepath.Join(dir, "crash"),
	}
	if v, ok := parent("PATH"); ok && v != "" {
		env = append(env, "PATH="+v)
	} else {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
	}
	for _, k := range []string{"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "CHROME_DEVEL_SANDBOX"} {
		if v, ok := parent(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// browserArgs is the browser's command line (after the binary). spki is the hash of the only key
// whose certificates the browser accepts beyond its own roots: its egress proxies' authority
// (tlsmint; ADR 0037).
func browserArgs(dir string, cfg Config, spki string) []string {
	args := append(append([]string{}, baseFlags...), networkFlags...)
	if cfg.NoSandbox {
		args = append(args, "--no-sandbox")
	}
	if keys := slices.DeleteFunc(append([]string{spki}, cfg.TrustSPKI...), func(k string) bool { return k == "" }); len(keys) > 0 {
		args = append(args, "--ignore-certificate-errors-spki-list="+strings.Join(keys, ","))
	}
	args = append(args, "--user-data-dir="+filepath.Join(dir, "profile"))
	args = append(args, cfg.ExtraFlags...)
	return append(args, "about:blank")
}

// launch starts the browser and waits until it answers.
func launch(ctx context.Context, bin string, cfg Config, spki string, log *slog.Logger) (*process, error) {
	acct, err := browserAccount(cfg)
	if err != nil {
		return nil, err
	}
	// The trees of browsers whose bap was killed before it could remove them (their profiles
	// hold the sessions' cookies and storage).
	tmptree.SweepDeadAndLog(log, treePrefix)
	tree, root, err := newBrowserDirs(acct)
	if err != nil {
		return nil, fmt.Errorf("%w: creating the browser's directories: %w", ErrUnavailable, err)
	}
	dir := tree.Dir
	cleanup := func() {
		_ = root.Close()
		_ = os.RemoveAll(dir)
		_ = tree.Close()
	}
	args := browserArgs(dir, cfg, spki)

	cmdR, parentW, err := os.Pipe()
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	parentR, cmdW, err := os.Pipe()
	if err != nil {
		cmdR.Close()
		parentW.Close()
		cleanup()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	out := &tailBuffer{max: 16 << 10}
	// #nosec G204 -- the binary is the operator's configuration; arguments are fixed flags.
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Join(dir, "home")
	cmd.Env = browserEnv(dir, os.LookupEnv)
	cmd.ExtraFiles = []*os.File{cmdR, cmdW} // fd 3: commands, fd 4: replies
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr(acct.Credential())
	if err := cmd.Start(); err != nil {
		cmdR.Close()
		cmdW.Close()
		parentR.Close()
		parentW.Close()
		cleanup()
		return nil, fmt.Errorf("%w: starting %s: %w", ErrUnavailable, bin, err)
	}
	cmdR.Close()
	cmdW.Close()
	p := &process{cmd: cmd, tree: tree, root: root, acct: acct, exited: make(chan struct{}), output: out}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	var tr chromedp.Transport = chromedp.NewPipeConn(parentR, parentW)
	if cfg.transport != nil {
		tr = cfg.transport(tr)
	}
	p.conn = newConn(tr, log)

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := call(ctx, p.conn.root, browser.GetVersion, struct{}{})
	if err != nil {
		p.stop()
		msg := out.String()
		if serr := sandboxFailure(msg); serr != nil {
			return nil, serr
		}
		return nil, fmt.Errorf("%w: the browser did not answer: %w; output: %s", ErrUnavailable, err, tailOf(msg, 2000))
	}
	p.version = v
	if cfg.NoSandbox {
		log.Warn("Chromium runs without its sandbox (--browser-no-sandbox): a compromised renderer has the browser user's rights",
			"user", acct.Name, "uid", acct.UID)
	}
	return p, nil
}

// tailOf returns the end of s, at most max bytes, trimmed.
func tailOf(s string, max int) string {
	s = strings.TrimSpace(s)
	if len(s) > max {
		s = s[len(s)-max:]
	}
	return s
}

// stop closes the pipe (the browser exits), kills what is left after a grace
// period and removes the browser's directories.
func (p *process) stop() {
	p.stopped.Do(func() {
		_ = p.conn.close()
		select {
		case <-p.exited:
		case <-time.After(3 * time.Second):
			killGroup(p.cmd)
			<-p.exited
		}
		killGroup(p.cmd) // helpers that outlived the browser
		_ = p.root.Close()
		_ = removeAllRetry(p.dir())
		_ = p.tree.Close() // after the removal: a sweep must not see the tree free while it is in use
	})
}

func removeAllRetry(dir string) error {
	var err error
	for range 5 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = cmd.Process.Kill()
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
