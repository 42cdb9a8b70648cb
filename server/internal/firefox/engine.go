package firefox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/egress"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
	"github.com/originweave/bap/server/internal/policy"
)

// agentSandbox names the sandboxed realm the page agent runs in: it shares the page's DOM but
// none of its JavaScript globals, so page scripts can neither see nor change the agent.
const agentSandbox = "__bap_agent"

// agentMissing is what an agent call yields in a sandbox the agent is not installed in yet, and
// agentStale what it yields in a document other than the one asked for.
const (
	agentMissing = "\u0000bap:agent-missing"
	agentStale   = "\u0000bap:agent-stale"
)

// maxExceptionText bounds the text of a script exception kept in an error (it can quote the page).
const maxExceptionText = 200

// ErrClosed is returned by a session's methods after Close.
var ErrClosed = errors.New("firefox: session closed")

// Engine is one BiDi session with a Firefox: each BAP browser session is a user context in it
// (its own cookies, storage and cache), so sessions are isolated as Chromium's browser contexts
// isolate them. Raw BiDi ids stay inside the engine and its sessions.
type Engine struct {
	c       *bidi.Conn
	agent   string
	version string
	drv     *Driver // nil for an engine opened without a driver

	// The browser's one intercept of the requests of holding sessions (hold.go), added with the
	// first of them.
	interMu   sync.Mutex
	intercept bidi.NetworkIntercept
}

// Open connects to b and starts the BiDi session. agentJS is the page agent (the script the CDP
// adapter installs in its isolated worlds); it must define globalThis.__bap.
func Open(ctx context.Context, b *Browser, agentJS string) (*Engine, error) {
	c, err := b.Dial(ctx)
	if err != nil {
		return nil, err
	}
	res, err := c.SessionNew(ctx, bidi.SessionNewParameters{})
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("firefox: session.new: %w", err)
	}
	return &Engine{c: c, agent: agentJS, version: res.Capabilities.BrowserName + " " + res.Capabilities.BrowserVersion}, nil
}

// Version is the engine's name and version as the browser reports it ("firefox 153.8.0esr").
func (e *Engine) Version() string { return e.version }

// Close ends the BiDi session and closes the connection; the browser keeps running.
func (e *Engine) Close(ctx context.Context) error {
	err := e.c.SessionEnd(ctx)
	if cerr := e.c.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, bidi.ErrClosed) {
		return fmt.Errorf("firefox: ending the session: %w", err)
	}
	return nil
}

// Session is one BAP browser session: a user context with its top-level tab. Its methods
// implement the use-cases' browser session (port.go) with page's vocabulary; no BiDi id leaves it.
type Session struct {
	e   *Engine
	uc  bidi.BrowserUserContext
	top bidi.BrowsingContextBrowsingContext

	// Set by the driver when it opens the session for BAP (port.go); zero for a bare one.
	id      string
	ctxID   string // the tab's ctx_ id
	pol     *policy.Policy
	onEvent func(page.Event)
	proxy   *egress.Proxy
	actMu   sync.Mutex // one act at a time

	// A popup's first tab (nil for the first tab itself) and the ctx_ id of the tab that opened
	// it (popups.go).
	main   *Session
	opener string
	sub    bidi.SessionSubscription // the first tab's subscription to its user context's tabs

	// The live view (live.go): its watchers and capture loop, and the session's lifetime, which
	// ends when it closes or is lost.
	live    pagekit.LiveHub
	life    context.Context //nolint:containedctx // the session's lifetime, see above
	endLife context.CancelFunc

	mu     sync.Mutex
	closed bool
	lost   bool
	front  *Session   // of the first tab: the tab the agent last navigated or acted in (nil: the first)
	popups []*Session // of the first tab: its popups, in the order they opened
	opened []string   // the ctx_ ids of the popups this tab opened, in order
	docs   documents  // the tab's documents, epochs and node handles (handles.go)
	// the tab's navigation events (act.go's noteNavigation): how many started, the numbers of
	// the latest start and end, and a channel closed (and replaced) at each
	navStarted                       int
	navSeq, navLastStart, navLastEnd uint64
	navCh                            chan struct{}
	dialogs                          []page.Dialog // every dialog the tab answered, in order

	// Holds of non-safe requests (hold.go), for a policy with a form_submission rule.
	collector     bidi.NetworkCollector // the user context's request bodies
	acting        *actHold              // the act or release running
	hold          *heldReq              // the request held for approval, if any
	lastPaused    time.Time             // the last request blocked at interception
	approvedUntil time.Time             // an approved act's late requests go out until then
	released      bidi.NetworkRequest   // the request Release sent, until its answer
	releasedDone  bool                  // its answer came
	// releasedUnsent: it failed without a byte sent (the page had given it up while it was held:
	// the browser reports that only once the request is continued)
	releasedUnsent bool

	staged []string // the directories of the files it uploaded, removed at Close
}

// tabCreateAttempts bounds the tries of a session's tab when Firefox answers that the context it
// placed it beside was discarded meanwhile.
const tabCreateAttempts = 5

// NewSession creates a user context and a tab in it (with no proxy: the driver's OpenSession
// gives BAP sessions their egress proxy).
func (e *Engine) NewSession(ctx context.Context) (*Session, error) {
	return e.newSession(ctx, bidi.BrowserCreateUserContextParameters{})
}

func (e *Engine) newSession(ctx context.Context, p bidi.BrowserCreateUserContextParameters) (*Session, error) {
	uc, err := e.c.BrowserCreateUserContext(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("firefox: creating a user context: %w", err)
	}
	// Firefox 153 places a new tab beside the window's last tab; while another session's tab is
	// being discarded it answers "no such frame: DiscardedBrowsingContextError" and creates nothing
	// (a clean-clone conformance run answered create_browser_session 500 twice so): try again.
	var tab *bidi.BrowsingContextCreateResult
	for attempt := 1; ; attempt++ {
		tab, err = e.c.BrowsingContextCreate(ctx, bidi.BrowsingContextCreateParameters{Type: bidi.BrowsingContextCreateTypeTab, UserContext: uc.UserContext})
		if attempt == tabCreateAttempts || !bidi.IsCode(err, bidi.ErrorCodeNoSuchFrame) {
			break
		}
	}
	if err != nil {
		_ = e.c.BrowserRemoveUserContext(context.WithoutCancel(ctx), bidi.BrowserRemoveUserContextParameters{UserContext: uc.UserContext})
		return nil, fmt.Errorf("firefox: creating the session's tab: %w", err)
	}
	s := &Session{e: e, uc: uc.UserContext, top: tab.Context, ctxID: ids.New(ids.BrowsingContext), navCh: make(chan struct{})}
	s.life, s.endLife = context.WithCancel(context.WithoutCancel(ctx))
	s.docs.init(nil)
	return s, nil
}

func (s *Session) check() error {
	if s.main != nil {
		if err := s.main.check(); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lost:
		return page.ErrSessionLost
	case s.closed:
		return ErrClosed
	}
	return nil
}

// load navigates the session's tab to url, waiting as wait says, and returns the URL reached.
func (s *Session) load(ctx context.Context, url string, wait bidi.BrowsingContextReadinessState) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	res, err := s.e.c.BrowsingContextNavigate(ctx, bidi.BrowsingContextNavigateParameters{Context: s.top, URL: url, Wait: wait})
	if err != nil {
		return "", fmt.Errorf("firefox: navigate: %w", err)
	}
	return res.URL, nil
}

// Agent runs globalThis.__bap.fn(args…) in the agent's sandbox of the session's tab and decodes
// its JSON value into out (nil: ignored), installing the agent first in a document that lacks it.
// Arguments are passed as JSON literals, never as code.
func (s *Session) Agent(ctx context.Context, out any, fn string, args ...any) error {
	_, err := s.agentIn(ctx, "", out, fn, args...)
	return err
}

// agentIn is Agent in the document doc ("": whichever the tab shows), which may be the document
// of one of the tab's frames: in another document it answers page.ErrStaleNodeHandle without
// calling fn. It returns the document it ran in.
func (s *Session) agentIn(ctx context.Context, doc string, out any, fn string, args ...any) (string, error) {
	return s.agentAt(ctx, s.frameOf(doc), doc, out, fn, args...)
}

// agentAt is agentIn in the browsing context frame (the tab or one of its frames), each with a
// sandbox of its own.
func (s *Session) agentAt(ctx context.Context, frame bidi.BrowsingContextBrowsingContext, doc string, out any, fn string, args ...any) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	call, err := agentCall(fn, args...)
	if err != nil {
		return "", err
	}
	// The document's token is set when the agent is installed, in the sandbox, where the page
	// cannot reach it; an awaited call lets the agent's checks wait for animation frames.
	expr := "(async () => { if (globalThis.__bap === undefined) return " + jsonString(agentMissing) + "; " +
		"const d = globalThis.__bapDoc; if (" + jsonString(doc) + " !== \"\" && d !== " + jsonString(doc) + ") return " + jsonString(agentStale) + "; " +
		"return JSON.stringify({d: d, v: await " + call + "}); })()"
	for attempt := 0; ; attempt++ {
		v, err := s.evaluateIn(ctx, frame, expr, true)
		if err != nil {
			return "", err
		}
		switch v {
		case agentStale:
			return "", fmt.Errorf("%w: the browsing context navigated since it was issued", page.ErrStaleNodeHandle)
		case agentMissing:
			if attempt > 0 {
				return "", errors.New("firefox: the page agent could not be installed")
			}
			if err := s.install(ctx, frame); err != nil {
				return "", err
			}
			if doc != "" {
				return "", fmt.Errorf("%w: the browsing context navigated since it was issued", page.ErrStaleNodeHandle)
			}
			continue
		}
		var r struct {
			D string          `json:"d"`
			V json.RawMessage `json:"v"`
		}
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return "", fmt.Errorf("firefox: page agent: %w", err)
		}
		if frame == s.top {
			s.noteDocument(r.D)
		} else {
			s.noteFrameDocument(frame, r.D)
		}
		if out != nil && len(r.V) > 0 && string(r.V) != "null" {
			if err := json.Unmarshal(r.V, out); err != nil {
				return "", fmt.Errorf("firefox: page agent: %w", err)
			}
		}
		return r.D, nil
	}
}

// install runs the agent in the document of frame and gives the document a fresh token.
func (s *Session) install(ctx context.Context, frame bidi.BrowsingContextBrowsingContext) error {
	token := ids.New(ids.DocumentEpoch) // random; never leaves the sandbox and this package
	if _, err := s.evaluateIn(ctx, frame, s.e.agent+"\n;if (globalThis.__bapDoc === undefined) globalThis.__bapDoc = "+jsonString(token)+";\"\"", false); err != nil {
		return fmt.Errorf("installing the page agent: %w", err)
	}
	return nil
}

// evaluate runs expr in the sandbox of the tab's document and returns its value, which must be a
// string (or undefined, returned as "").
func (s *Session) evaluate(ctx context.Context, expr string, await bool) (string, error) {
	return s.evaluateIn(ctx, s.top, expr, await)
}

// evaluateIn is evaluate in the sandbox of frame's document. A frame that is gone (its iframe
// removed) answers page.ErrStaleNodeHandle; the tab gone is the session lost.
func (s *Session) evaluateIn(ctx context.Context, frame bidi.BrowsingContextBrowsingContext, expr string, await bool) (string, error) {
	res, err := s.e.c.ScriptEvaluate(ctx, bidi.ScriptEvaluateParameters{
		Expression:      expr,
		Target:          bidi.ScriptTarget{Context: frame, Sandbox: agentSandbox},
		AwaitPromise:    await,
		ResultOwnership: bidi.ScriptResultOwnershipNone,
	})
	if err != nil {
		if frame != s.top && bidi.IsCode(err, bidi.ErrorCodeNoSuchFrame) {
			return "", fmt.Errorf("%w: the frame is gone", page.ErrStaleNodeHandle)
		}
		return "", s.mapErr(fmt.Errorf("firefox: page agent: %w", err))
	}
	if res.Type == "exception" {
		return "", scriptException(res.ExceptionDetails)
	}
	if res.Result == nil || res.Result.Type == "undefined" {
		return "", nil
	}
	var v string
	if res.Result.Type != "string" || json.Unmarshal(res.Result.Value, &v) != nil {
		return "", fmt.Errorf("firefox: page agent: a %s where a string was expected", res.Result.Type)
	}
	return v, nil
}

// scriptException is the error of a script that threw, its text bounded (it can quote the page).
func scriptException(d *bidi.ScriptExceptionDetails) error {
	text := ""
	if d != nil {
		text = d.Text
	}
	if len(text) > maxExceptionText {
		text = strings.ToValidUTF8(text[:maxExceptionText], "")
	}
	return fmt.Errorf("firefox: page agent: %s", text)
}

// Record makes the session's egress proxy archive what it forwards into rec (a task's
// policy.record) until the session closes; rec must implement egress.Recorder. A session opened
// without a proxy (NewSession, tests) cannot record.
func (s *Session) Record(rec page.Recorder) error {
	if s.proxy == nil {
		return fmt.Errorf("%w: the session has no egress proxy to record", page.ErrInvalidRequest)
	}
	return s.proxy.Record(rec)
}

// ServeFrom makes the session's egress proxy answer every request from a (a replay, ADR 0035)
// and never reach the network again; a must implement egress.Archive. A session without a proxy
// cannot.
func (s *Session) ServeFrom(a page.Archive) error {
	if s.proxy == nil {
		return fmt.Errorf("%w: the session has no egress proxy to serve an archive", page.ErrInvalidRequest)
	}
	return s.proxy.Replay(a)
}

// RefuseUnsafe makes the session's egress proxy send only plain-HTTP requests with a safe
// method from now on (a live dry-run replay, ADR 0035). A session without a proxy cannot.
func (s *Session) RefuseUnsafe() error {
	if s.proxy == nil {
		return fmt.Errorf("%w: the session has no egress proxy to carry a dry run", page.ErrInvalidRequest)
	}
	s.proxy.RefuseUnsafe()
	return nil
}

// Close removes the session's user context, which closes its tabs and drops its cookies and
// storage, and stops its egress proxy. It is safe to call more than once.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	staged := s.staged
	s.mu.Unlock()
	if s.main != nil {
		// A popup: its tab closes; the session stays.
		err := s.e.c.BrowsingContextClose(ctx, bidi.BrowsingContextCloseParameters{Context: s.top})
		if err != nil && !errors.Is(err, bidi.ErrClosed) && !bidi.IsCode(err, bidi.ErrorCodeNoSuchFrame) {
			return fmt.Errorf("firefox: closing the tab: %w", err)
		}
		return nil
	}
	s.endLife()
	if s.e.drv != nil {
		s.e.drv.forget(s)
	}
	if s.sub != "" {
		_ = s.e.c.SessionUnsubscribe(ctx, bidi.SessionUnsubscribeParameters{Subscriptions: []bidi.SessionSubscription{s.sub}})
	}
	err := s.e.c.BrowserRemoveUserContext(ctx, bidi.BrowserRemoveUserContextParameters{UserContext: s.uc})
	if s.e.drv != nil {
		s.e.drv.forgetContexts(s.uc)
	}
	for _, dir := range staged {
		_ = os.RemoveAll(dir) // the files it uploaded (the browser's tree goes with the browser anyway)
	}
	if s.proxy != nil {
		_ = s.proxy.Close()
	}
	if err != nil && !errors.Is(err, bidi.ErrClosed) {
		return fmt.Errorf("firefox: removing the user context: %w", err)
	}
	return nil
}

// agentCall formats globalThis.__bap.fn(args…) with JSON arguments; fn must be an identifier.
func agentCall(fn string, args ...any) (string, error) {
	if fn == "" || strings.IndexFunc(fn, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_'
	}) >= 0 {
		return "", fmt.Errorf("firefox: %q is not an agent function name", fn)
	}
	if args == nil {
		args = []any{}
	}
	list, err := json.Marshal(args) // "[a,b]": the arguments, as JSON literals
	if err != nil {
		return "", fmt.Errorf("firefox: agent argument: %w", err)
	}
	return "globalThis.__bap." + fn + "(" + string(list[1:len(list)-1]) + ")", nil
}

func jsonString(s string) string {
	j, _ := json.Marshal(s)
	return string(j)
}
