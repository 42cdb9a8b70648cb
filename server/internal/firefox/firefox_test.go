package firefox

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/proctree"
)

// browser is the one Firefox of this package's tests; each test opens its own BiDi session.
var browser *Browser

func TestMain(m *testing.M) {
	// A canary in our environment that must not reach the browser (TestProcessIsConfined).
	if err := os.Setenv(canaryEnv, canaryValue); err != nil {
		fmt.Fprintln(os.Stderr, "firefox tests:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	b, err := Launch(ctx, Options{Prefs: proxyPrefs}) // as Start launches it
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "firefox tests:", err)
		os.Exit(1)
	}
	browser = b
	code := m.Run()
	if err := b.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "firefox tests: close:", err)
		code = 1
	}
	if _, err := os.Stat(b.dir()); !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "firefox tests: the browser's directory outlived Close:", b.dir())
		code = 1
	}
	os.Exit(code)
}

// session opens a connection with a new BiDi session, ended and closed when the test ends.
func session(t *testing.T, ctx context.Context) (*bidi.Conn, *bidi.SessionNewResult) {
	t.Helper()
	c, err := browser.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.SessionNew(ctx, bidi.SessionNewParameters{})
	if err != nil {
		_ = c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := c.SessionEnd(ctx); err != nil && !errors.Is(err, bidi.ErrClosed) {
			t.Errorf("session.end: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c, res
}

// servePage serves html at every path until the test ends.
func servePage(t *testing.T, html string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(html))
	}))
	t.Cleanup(srv.Close)
	return srv
}

const flowPage = `<!doctype html><title>bidi</title><h1 id="x">hello</h1><script>window.pageVar = 1</script>`

// TestSessionFlow drives the commands the adapter is built on against the real browser: a
// session, a user context with a tab in it, a navigation with its load event, a function in a
// sandboxed realm (which does not see the page's own globals), a screenshot, and the cleanup.
func TestSessionFlow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := servePage(t, flowPage)

	c, sess := session(t, ctx)
	if sess.SessionID == "" || sess.Capabilities.BrowserName != "firefox" || sess.Capabilities.BrowserVersion == "" {
		t.Fatalf("session.new = %+v, want a session id and firefox with its version", sess)
	}

	uc, err := c.BrowserCreateUserContext(ctx, bidi.BrowserCreateUserContextParameters{})
	if err != nil {
		t.Fatal(err)
	}
	if uc.UserContext == "" || uc.UserContext == "default" {
		t.Fatalf("browser.createUserContext = %q, want a new user context", uc.UserContext)
	}

	loads := make(chan bidi.BrowsingContextNavigationInfo, 8)
	stop := c.OnBrowsingContextLoad(func(e bidi.BrowsingContextNavigationInfo) { loads <- e })
	defer stop()
	if _, err := c.SessionSubscribe(ctx, bidi.SessionSubscribeParameters{Events: []string{bidi.EventBrowsingContextLoad}}); err != nil {
		t.Fatal(err)
	}

	tab, err := c.BrowsingContextCreate(ctx, bidi.BrowsingContextCreateParameters{Type: bidi.BrowsingContextCreateTypeTab, UserContext: uc.UserContext})
	if err != nil {
		t.Fatal(err)
	}
	tree, err := c.BrowsingContextGetTree(ctx, bidi.BrowsingContextGetTreeParameters{Root: tab.Context})
	if err != nil {
		t.Fatal(err)
	}
	if len(tree.Contexts) != 1 || tree.Contexts[0].UserContext != uc.UserContext {
		t.Fatalf("the new tab's tree = %+v, want one context in user context %s", tree.Contexts, uc.UserContext)
	}

	nav, err := c.BrowsingContextNavigate(ctx, bidi.BrowsingContextNavigateParameters{Context: tab.Context, URL: srv.URL + "/", Wait: bidi.BrowsingContextReadinessStateComplete})
	if err != nil {
		t.Fatal(err)
	}
	if nav.URL != srv.URL+"/" {
		t.Fatalf("navigated to %q, want %q", nav.URL, srv.URL+"/")
	}
	for got := false; !got; {
		select {
		case e := <-loads:
			got = e.Context == tab.Context && e.URL == srv.URL+"/"
		case <-ctx.Done():
			t.Fatal("no browsingContext.load event for the navigation")
		}
	}

	arg, _ := json.Marshal("z")
	res, err := c.ScriptCallFunction(ctx, bidi.ScriptCallFunctionParameters{
		FunctionDeclaration: `(a) => document.getElementById("x").textContent + ":" + a + ":" + typeof window.pageVar`,
		Target:              bidi.ScriptTarget{Context: tab.Context, Sandbox: "bap"},
		Arguments:           []bidi.ScriptLocalValue{{Type: "string", Value: arg}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if res.Type != "success" || res.Result == nil || res.Result.Type != "string" || json.Unmarshal(res.Result.Value, &got) != nil {
		t.Fatalf("script.callFunction = %+v, want a string", res)
	}
	// The sandbox shares the DOM but not the page's JavaScript globals.
	if got != "hello:z:undefined" {
		t.Fatalf("script.callFunction in the sandbox = %q, want hello:z:undefined", got)
	}
	realms, err := c.ScriptGetRealms(ctx, bidi.ScriptGetRealmsParameters{Context: tab.Context})
	if err != nil {
		t.Fatal(err)
	}
	sandboxed := false
	for _, r := range realms.Realms {
		sandboxed = sandboxed || r.Realm == res.Realm && r.Sandbox == "bap"
	}
	if !sandboxed {
		t.Fatalf("realm %s of the call is not the bap sandbox among %+v", res.Realm, realms.Realms)
	}

	shot, err := c.BrowsingContextCaptureScreenshot(ctx, bidi.BrowsingContextCaptureScreenshotParameters{Context: tab.Context})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if img.Bounds().Dx() == 0 || img.Bounds().Dy() == 0 {
		t.Fatalf("the screenshot is %v", img.Bounds())
	}

	if err := c.BrowsingContextClose(ctx, bidi.BrowsingContextCloseParameters{Context: tab.Context}); err != nil {
		t.Fatal(err)
	}
	if err := c.BrowserRemoveUserContext(ctx, bidi.BrowserRemoveUserContextParameters{UserContext: uc.UserContext}); err != nil {
		t.Fatal(err)
	}
}

// TestErrors checks that the remote end's errors arrive typed, that a call gives up with its
// context while the connection stays usable, and that a closed connection says so.
func TestErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, _ := session(t, ctx)

	tests := []struct {
		name string
		call func() error
		code bidi.ErrorCode
	}{
		{"unknown browsing context", func() error {
			_, err := c.BrowsingContextNavigate(ctx, bidi.BrowsingContextNavigateParameters{Context: "no-such-context", URL: "about:blank"})
			return err
		}, bidi.ErrorCodeNoSuchFrame},
		{"unknown user context", func() error {
			return c.BrowserRemoveUserContext(ctx, bidi.BrowserRemoveUserContextParameters{UserContext: "no-such-user-context"})
		}, bidi.ErrorCodeNoSuchUserContext},
		{"unknown command", func() error {
			return c.Call(ctx, "browsingContext.noSuchCommand", struct{}{}, nil)
		}, bidi.ErrorCodeUnknownCommand},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var be *bidi.Error
			if !errors.As(err, &be) || be.Code != tt.code || !bidi.IsCode(err, tt.code) {
				t.Fatalf("err = %v, want a *bidi.Error with code %q", err, tt.code)
			}
		})
	}

	t.Run("context deadline", func(t *testing.T) {
		tree, err := c.BrowsingContextGetTree(ctx, bidi.BrowsingContextGetTreeParameters{})
		if err != nil || len(tree.Contexts) == 0 {
			t.Fatalf("getTree = %+v, %v", tree, err)
		}
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err = c.ScriptCallFunction(short, bidi.ScriptCallFunctionParameters{
			FunctionDeclaration: `() => new Promise(() => {})`,
			AwaitPromise:        true,
			Target:              bidi.ScriptTarget{Context: tree.Contexts[0].Context},
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the context's deadline", err)
		}
		if _, err := c.SessionStatus(ctx); err != nil {
			t.Fatalf("the connection after a timed-out call: %v", err)
		}
	})

	t.Run("closed connection", func(t *testing.T) {
		c2, err := browser.Dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c2.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := c2.SessionStatus(ctx); !errors.Is(err, bidi.ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	})
}

const (
	canaryEnv   = "BAP_FIREFOX_TEST_CANARY"
	canaryValue = "canary-7f3e9a1c"
)

// TestProcessIsConfined checks the running browser: as root it runs as the browser account, not
// root, and nothing of bap's environment but the allowed variables reaches it.
func TestProcessIsConfined(t *testing.T) {
	pid := browser.cmd.Process.Pid
	want := os.Geteuid()
	if want == 0 {
		u, err := user.Lookup(DefaultRunAsUser)
		if err != nil {
			t.Fatal(err)
		}
		want, _ = strconv.Atoi(u.Uid)
	}
	// Every process of the browser's group (the parent and its content processes).
	procs := processGroup(t, pid)
	if len(procs) < 2 {
		t.Fatalf("the browser's process group has %d processes, want the parent and its content processes", len(procs))
	}
	for _, p := range procs {
		uid, alive := procUID(t, p)
		if !alive {
			continue // a content process that exited since the listing (another test's frame or tab closed)
		}
		if uid != want || uid == 0 {
			t.Fatalf("firefox process %d runs as uid %d, want %d (never root)", p, uid, want)
		}
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(env, []byte(canaryValue)) || bytes.Contains(env, []byte(canaryEnv)) {
		t.Fatal("bap's environment reached the browser")
	}
	if !bytes.Contains(env, []byte("HOME="+browser.dir())) {
		t.Fatalf("the browser's HOME is not in its own tree: %q", env)
	}
}

// processGroup lists the processes whose process group is pgid and that have not exited (a zombie
// has).
func processGroup(t *testing.T, pgid int) []int {
	t.Helper()
	var out []int
	for pid, p := range proctree.Processes() {
		if p.PGID == pgid && !p.Exited() {
			out = append(out, pid)
		}
	}
	return out
}

// procUID is the real uid of a process, and false when it has exited.
func procUID(t *testing.T, pid int) (int, bool) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Uid:" {
			uid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return uid, true
		}
	}
	t.Fatalf("no Uid line for process %d", pid)
	return -1, false
}
