// Package firefox starts and stops Firefox ESR (Debian's firefox-esr) for the WebDriver BiDi
// adapter: headless, with a fresh profile in a temporary directory whose prefs turn off updates,
// telemetry, studies and first-run pages, its Remote Agent on a port the system picks, a scrubbed
// environment, and (when bap runs as root) an unprivileged account. Nothing is downloaded: the
// binary is the one the Debian package installed.
package firefox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/osuser"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
	"github.com/originweave/bap/server/internal/tlsmint"
	"github.com/originweave/bap/server/internal/tmptree"
)

// DefaultBinary is Debian's Firefox ESR.
const DefaultBinary = "firefox-esr"

// Options configure Launch.
type Options struct {
	Binary string       // the executable; DefaultBinary when empty
	Log    *slog.Logger // nil: discard
	// Prefs are added to (and override) the profile's prefs.
	Prefs map[string]any
	// RunAsUser is the unprivileged account Firefox runs as when this process is root
	// (DefaultRunAsUser when empty); when not root, Firefox runs as the current user.
	RunAsUser string
}

// DefaultRunAsUser is the account `make deps` creates for the browsers (the CDP adapter's too).
const DefaultRunAsUser = "bap-browser"

// account resolves the account Firefox runs as: never root.
func account(runAs string) (osuser.Account, error) {
	if runAs == "" && os.Geteuid() == 0 {
		runAs = DefaultRunAsUser
	}
	a, err := osuser.Resolve(os.Geteuid(), runAs, "browser user")
	if err != nil {
		return a, fmt.Errorf("firefox: %w (Firefox does not run as root; scripts/install-deps.sh creates %s)", err, DefaultRunAsUser)
	}
	return a, nil
}

// browserOwnedDirs are the directories of the tree the browser may write in.
var browserOwnedDirs = []string{"profile", "home", "tmp"}

// newDirs creates the browser's tree under os.TempDir():
//
//	bap-firefox-*/  0711 bap (0700 when bap is not root)
//	├── profile/    0700 browser  --profile, with the user.js bap writes before the start
//	├── home/       0700 browser  HOME, the XDG directories and the working directory
//	├── tmp/        0700 browser  TMPDIR
//	└── uploads/    0711 bap      the files of upload_file, one directory per upload (stageFiles)
//
// Everything is created before the browser starts, so the browser cannot have planted a link
// where bap writes.
func newDirs(acct osuser.Account) (*tmptree.Tree, error) {
	tree, err := tmptree.New("", treePrefix)
	if err != nil {
		return nil, err
	}
	dir := tree.Dir
	err = acct.CheckSearchable(filepath.Dir(dir))
	if err == nil && acct.Switch {
		err = os.Chmod(dir, 0o711)
	}
	for _, d := range browserOwnedDirs {
		if err == nil {
			err = acct.EnsurePrivateDir(filepath.Join(dir, d), false)
		}
	}
	if err == nil {
		err = os.Mkdir(filepath.Join(dir, uploadsDir), bapDirMode(acct))
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		_ = tree.Close()
		return nil, err
	}
	return tree, nil
}

// treePrefix names the browser's trees in the temporary directory.
const treePrefix = "bap-firefox-"

// dir is the browser's directory tree.
func (b *Browser) dir() string { return b.tree.Dir }

// uploadsDir is the directory of the tree that holds staged uploads.
const uploadsDir = "uploads"

// bapDirMode is the mode of a directory of bap's that the browser reads files in: searchable by
// the browser's account (never listable or writable by it), private when there is no other account.
func bapDirMode(acct osuser.Account) os.FileMode {
	if acct.Switch {
		return 0o711
	}
	return 0o700
}

// stageFiles writes files where the browser can read them: a fresh directory of bap's under
// uploads/, each file created anew (never through a link) under its safe name, the browser's
// account's when it runs as another. It returns the directory (removed by unstage) and the paths.
func (b *Browser) stageFiles(files []page.File) (string, []string, error) {
	dir := filepath.Join(b.dir(), uploadsDir, ids.New(ids.Artifact))
	if err := os.Mkdir(dir, bapDirMode(b.acct)); err != nil {
		return "", nil, fmt.Errorf("firefox: staging the upload: %w", err)
	}
	var paths []string
	seen := map[string]int{}
	for _, f := range files {
		name := pagekit.SafeFileName(f.Name)
		if n := seen[name]; n > 0 {
			name = fmt.Sprintf("%d-%s", n, name)
		}
		seen[pagekit.SafeFileName(f.Name)]++
		p := filepath.Join(dir, name)
		if err := b.writeFile(p, f.Content); err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, fmt.Errorf("firefox: staging the upload: %w", err)
		}
		paths = append(paths, p)
	}
	return dir, paths, nil
}

func (b *Browser) writeFile(p string, content []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if err == nil && b.acct.Switch {
		err = f.Chown(int(b.acct.UID), int(b.acct.GID))
	}
	return errors.Join(err, f.Close())
}

// browserEnv is the browser's whole environment: its own HOME, XDG and temp directories, and
// from ours only PATH, the locale and the time zone. Nothing else of this process (BAP_*,
// database URLs, tokens) reaches the browser.
func browserEnv(dir string, parent func(string) (string, bool)) []string {
	home := filepath.Join(dir, "home")
	env := []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"TMPDIR=" + filepath.Join(dir, "tmp"),
		"MOZ_CRASHREPORTER_DISABLE=1",
		"MOZ_HEADLESS=1",
	}
	if v, ok := parent("PATH"); ok && v != "" {
		env = append(env, "PATH="+v)
	} else {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
	}
	for _, k := range []string{"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ"} {
		if v, ok := parent(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// Browser is one running Firefox with its own profile.
type Browser struct {
	// URL is the Remote Agent's WebSocket endpoint (ws://127.0.0.1:PORT).
	URL string

	// certs is the authority whose certificates this browser's profile trusts beyond Firefox's own
	// roots: its egress proxies', for the tunnels they open (ADR 0037). nil when the profile could
	// not be made to trust it: tunnels then stay opaque.
	certs *tlsmint.Authority

	cmd     *exec.Cmd
	tree    *tmptree.Tree  // the browser's directory tree (newDirs), held while it runs, removed by Close
	acct    osuser.Account // the account it runs as
	log     *slog.Logger
	exited  chan struct{}
	waitErr error
	once    sync.Once
}

// prefs are written to the fresh profile's user.js: no update checks, no telemetry or studies,
// no first-run or what's-new pages, no safe-browsing or remote-settings fetches, so the browser
// stays off the network unless a page asks for it.
var prefs = map[string]any{
	"app.update.auto":                                             false,
	"app.update.enabled":                                          false,
	"app.update.disabledForTesting":                               true,
	"app.normandy.enabled":                                        false,
	"app.shield.optoutstudies.enabled":                            false,
	"browser.aboutwelcome.enabled":                                false,
	"browser.shell.checkDefaultBrowser":                           false,
	"browser.startup.homepage_override.mstone":                    "ignore",
	"browser.startup.page":                                        0,
	"browser.newtabpage.enabled":                                  false,
	"browser.safebrowsing.malware.enabled":                        false,
	"browser.safebrowsing.phishing.enabled":                       false,
	"browser.safebrowsing.downloads.enabled":                      false,
	"browser.safebrowsing.blockedURIs.enabled":                    false,
	"browser.search.update":                                       false,
	"datareporting.healthreport.uploadEnabled":                    false,
	"datareporting.policy.dataSubmissionEnabled":                  false,
	"extensions.update.enabled":                                   false,
	"extensions.getAddons.cache.enabled":                          false,
	"messaging-system.rsexperimentloader.enabled":                 false,
	"network.captive-portal-service.enabled":                      false,
	"network.connectivity-service.enabled":                        false,
	"services.settings.server":                                    "data:,",
	"toolkit.telemetry.enabled":                                   false,
	"toolkit.telemetry.unified":                                   false,
	"toolkit.telemetry.archive.enabled":                           false,
	"toolkit.telemetry.server":                                    "data:,",
	"trailhead.firstrun.didSeeAboutWelcome":                       true,
	"datareporting.policy.dataSubmissionPolicyBypassNotification": true,
}

// listening is the line the Remote Agent prints on stderr once its WebSocket server is up.
var listening = regexp.MustCompile(`WebDriver BiDi listening on (ws://[0-9.:\[\]a-z]+)`)

// Launch starts Firefox and waits (within ctx) until its Remote Agent listens. The browser
// outlives ctx: stop it with Close.
func Launch(ctx context.Context, opts Options) (*Browser, error) {
	bin := opts.Binary
	if bin == "" {
		bin = DefaultBinary
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("firefox: %w (Debian's firefox-esr package; `make deps` installs it)", err)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	acct, err := account(opts.RunAsUser)
	if err != nil {
		return nil, err
	}
	// The trees of browsers whose bap was killed before it could remove them (their profiles
	// hold the sessions' cookies and storage).
	tmptree.SweepDeadAndLog(log, treePrefix)
	tree, err := newDirs(acct)
	if err != nil {
		return nil, fmt.Errorf("firefox: %w", err)
	}
	dir := tree.Dir
	// Until the Browser owns the tree, a failure removes it here.
	abandon := func() {
		_ = os.RemoveAll(dir)
		_ = tree.Close()
	}
	profile := filepath.Join(dir, "profile")
	all := map[string]any{}
	for k, v := range prefs {
		all[k] = v
	}
	for k, v := range opts.Prefs {
		all[k] = v
	}
	userjs := filepath.Join(profile, "user.js")
	err = os.WriteFile(userjs, userJS(all), 0o600)
	if err == nil {
		err = acct.Chown(userjs)
	}
	if err != nil {
		abandon()
		return nil, fmt.Errorf("firefox: profile: %w", err)
	}
	certs, err := trustNewAuthority(ctx, profile, acct)
	if err != nil {
		// Fail closed: without it the proxies keep every tunnel opaque (HTTPS is then neither
		// recorded nor replayed), and nothing else changes.
		log.Warn("firefox: its proxies cannot open TLS tunnels (HTTPS is not recorded or replayed)", "err", err)
	}

	cmd := exec.Command(path, "--headless", "--no-remote", "--remote-debugging-port=0", "--profile", profile)
	cmd.Env = browserEnv(dir, os.LookupEnv)
	cmd.Dir = filepath.Join(dir, "home")
	// Its own process group, so Close stops the content processes too; as root, the account.
	// It dies with this process (sysProcAttr): a browser left running with its Remote Agent
	// listening could be driven by any local process, with the sessions' cookies.
	cmd.SysProcAttr = sysProcAttr(acct.Credential())
	// A pipe of our own rather than StderrPipe: the content processes inherit stderr, and the
	// reader must be free to read until the last of them closes it, after Wait has returned.
	stderr, w, err := os.Pipe()
	if err != nil {
		abandon()
		return nil, fmt.Errorf("firefox: %w", err)
	}
	cmd.Stderr = w
	cmd.Stdout = nil // the null device
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = stderr.Close()
		abandon()
		return nil, fmt.Errorf("firefox: start: %w", err)
	}
	b := &Browser{cmd: cmd, tree: tree, acct: acct, log: log, exited: make(chan struct{}), certs: certs}
	urls := make(chan string, 1)
	go b.scan(stderr, urls)
	go func() {
		b.waitErr = cmd.Wait()
		close(b.exited)
	}()

	select {
	case u := <-urls:
		b.URL = u
		log.Info("firefox started", "pid", cmd.Process.Pid)
		return b, nil
	case <-b.exited:
		exit := b.waitErr
		if exit == nil {
			exit = errors.New("exit status 0")
		}
		return nil, errors.Join(fmt.Errorf("firefox: exited before its Remote Agent listened: %w", exit), b.cleanup())
	case <-ctx.Done():
		_ = b.Close()
		return nil, fmt.Errorf("firefox: waiting for the Remote Agent: %w", ctx.Err())
	}
}

// scan reads the browser's stderr: the first listening line gives the endpoint; the rest is
// drained (it can name pages the browser loaded, so it is not logged).
func (b *Browser) scan(r io.ReadCloser, urls chan<- string) {
	defer func() { _ = r.Close() }()
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	found := false
	for s.Scan() {
		if found {
			continue
		}
		if m := listening.FindStringSubmatch(s.Text()); m != nil {
			found = true
			urls <- m[1]
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

func userJS(p map[string]any) []byte {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		var v string
		switch x := p[k].(type) {
		case bool:
			v = strconv.FormatBool(x)
		case int:
			v = strconv.Itoa(x)
		default:
			v = strconv.Quote(fmt.Sprint(x))
		}
		fmt.Fprintf(&b, "user_pref(%s, %s);\n", strconv.Quote(k), v)
	}
	return []byte(b.String())
}

// Dial opens a new BiDi connection to the browser's session endpoint (then send session.new).
func (b *Browser) Dial(ctx context.Context) (*bidi.Conn, error) {
	return bidi.Dial(ctx, b.URL+"/session", b.log)
}

// Exited is closed when the browser process has exited.
func (b *Browser) Exited() <-chan struct{} { return b.exited }

// Close stops the browser (SIGTERM to its process group, SIGKILL after five seconds) and
// removes its profile. It is safe to call more than once.
func (b *Browser) Close() error {
	var err error
	b.once.Do(func() {
		pgid := b.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-b.exited
		}
		// Content processes that outlived the parent share its group.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		err = b.cleanup()
	})
	return err
}

func (b *Browser) cleanup() error {
	if err := os.RemoveAll(b.dir()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("firefox: removing the browser's directory: %w", err)
	}
	return b.tree.Close() // after the removal: a sweep must not see the tree free while it is in use
}
