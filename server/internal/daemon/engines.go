package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/browser"
	"github.com/originweave/bap/server/internal/observation"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/spec"
)

// The engine registry (issue #19, ADR 0025): every browser engine this build can drive, by name,
// with the adapter that drives it, what it can do and how to start it. `bap serve --engines`
// picks some of them, the first being the default; a second adapter (WebDriver BiDi for Firefox)
// plugs in by adding its entry here, without touching the use-cases.

// EngineBrowser is one started browser of an engine, as its adapter drives it. Its sessions are
// the use-cases' app.BrowserSession: nothing of the adapter's protocol crosses.
type EngineBrowser interface {
	OpenSession(ctx context.Context, sessionID string, pol *policy.Policy, onEvent func(page.Event)) (app.BrowserSession, error)
	Session(sessionID string) (app.BrowserSession, bool)
	// Version is the browser's product and version ("Chrome/131.0.6778.85") and the version of the
	// protocol the adapter speaks to it; both "" while no browser process runs.
	Version() (product, protocol string)
	Close() error
}

// EngineAdapter is one entry of the registry.
type EngineAdapter struct {
	Engine      string // the spec's BrowserEngine: "chromium", "firefox"
	AdapterID   string // protocol_adapter's id of the protocol it speaks: "cdp"
	AdapterName string // what that protocol is, for people
	// Capabilities is what the adapter can do (docs/engines.md); an operation needing another
	// answers 501 engine_capability_unsupported.
	Capabilities []app.Capability
	// Install says what to install when its browser cannot start.
	Install string
	// Start starts the engine's browser for this node.
	Start func(ctx context.Context, cfg Config, log *slog.Logger) (EngineBrowser, error)
}

// EngineRegistry is the engines this build has an adapter for, by name.
type EngineRegistry map[string]EngineAdapter

// DefaultEngineRegistry is the registry of this build: Chromium over CDP, Firefox ESR over
// WebDriver BiDi (firefoxport.go).
func DefaultEngineRegistry() EngineRegistry {
	return EngineRegistry{"chromium": ChromiumAdapter(), "firefox": FirefoxAdapter()}
}

// ChromiumAdapter is the registry entry of Chromium, driven over the Chrome DevTools Protocol by
// package browser.
func ChromiumAdapter() EngineAdapter {
	return EngineAdapter{
		Engine: "chromium", AdapterID: app.AdapterCDP, AdapterName: "Chrome DevTools Protocol",
		Capabilities: []app.Capability{app.CapMHTMLEvidence, app.CapLiveView, app.CapFileUpload, app.CapRequestHolds, app.CapDownloads},
		Install:      "install the Debian package `chromium` (or set BAP_CHROMIUM) and restart",
		Start: func(ctx context.Context, cfg Config, log *slog.Logger) (EngineBrowser, error) {
			b, err := browser.Start(ctx, browser.Config{Binary: cfg.Chromium, Logger: log,
				MaxSessions: cfg.browserMaxSessions(), RunAsUser: cfg.BrowserUser, NoSandbox: cfg.BrowserNoSandbox,
				ServerAddrs: listenAddrs(cfg.Listen)})
			if err != nil {
				return nil, err
			}
			return BrowserPort{Browser: b}, nil
		},
	}
}

// DefaultEngines is what --engines (and BAP_ENGINES) default to.
const DefaultEngines = "chromium"

// ParseEngines reads a comma-separated --engines list.
func ParseEngines(list string) []string {
	var out []string
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// validateEngines refuses, before anything starts, an engine list that names an engine BAP does
// not know, one this build has no adapter for, or one twice (none: the default).
func validateEngines(names []string, reg EngineRegistry) error {
	if len(names) == 0 {
		names = ParseEngines(DefaultEngines)
	}
	known := make([]string, 0, len(reg))
	for name := range reg {
		known = append(known, name)
	}
	slices.Sort(known)
	bap, err := SpecEngines()
	if err != nil {
		return err
	}
	for i, name := range names {
		if !slices.Contains(bap, name) {
			return fmt.Errorf("--engines: %q is not a browser engine of BAP (%s)", name, strings.Join(bap, ", "))
		}
		if _, ok := reg[name]; !ok {
			return fmt.Errorf("--engines: this build has no adapter for the browser engine %s yet (it drives: %s)", name, strings.Join(known, ", "))
		}
		if slices.Contains(names[:i], name) {
			return fmt.Errorf("--engines names %s twice", name)
		}
	}
	return nil
}

// RunningEngine is a configured engine and its browser (nil when it did not start).
type RunningEngine struct {
	Adapter EngineAdapter
	Browser EngineBrowser
}

// Engines is the node's browser port: app.Browser over every configured engine, the first the
// default. A session lives on the engine it was opened on; its id finds it on any. Every session
// it hands out observes through its own observation.Keeper (ADR 0028), so max_bytes, cursor and
// since mean the same on every engine, and an adapter observes only whole snapshots.
type Engines struct {
	list []RunningEngine

	mu   sync.Mutex
	kept map[string]*keptSession // by session id
}

// keptSession is an engine's session with its observation keeper in front of its Observe.
type keptSession struct {
	app.BrowserSession
	keeper *observation.Keeper
	forget func()
}

// Observe answers through the keeper: budgets, cursors and deltas over the engine's snapshots.
func (k *keptSession) Observe(ctx context.Context, req page.ObserveRequest) (*page.Snapshot, error) {
	return k.keeper.Observe(ctx, k.BrowserSession, req)
}

// Close closes the engine's session and drops what its keeper kept.
func (k *keptSession) Close(ctx context.Context) error {
	err := k.BrowserSession.Close(ctx)
	k.forget()
	return err
}

// keepSession puts a keeper in front of an engine's session (the one it has, or a new one).
func (e *Engines) keepSession(sessionID string, s app.BrowserSession, keeper *observation.Keeper) *keptSession {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kept == nil {
		e.kept = make(map[string]*keptSession)
	}
	if k, ok := e.kept[sessionID]; ok && keeper == nil {
		return k
	}
	if keeper == nil {
		keeper = observation.NewKeeper()
	}
	k := &keptSession{BrowserSession: s, keeper: keeper}
	k.forget = func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.kept[sessionID] == k {
			delete(e.kept, sessionID)
		}
	}
	e.kept[sessionID] = k
	return k
}

// sweep drops the keepers of sessions no engine has any more (closed by the idle reaper, lost).
func (e *Engines) sweep() {
	e.mu.Lock()
	ids := make([]string, 0, len(e.kept))
	for id := range e.kept {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	for _, id := range ids {
		if _, _, ok := e.find(id); !ok {
			e.mu.Lock()
			delete(e.kept, id)
			e.mu.Unlock()
		}
	}
}

var (
	_ app.Browser       = (*Engines)(nil)
	_ app.SessionLoad   = (*Engines)(nil)
	_ app.SessionEngine = (*Engines)(nil)
)

// NewEngines is the port over engines, the first the default.
func NewEngines(engines ...RunningEngine) *Engines {
	return &Engines{list: engines}
}

// Engines implements app.Browser.
func (e *Engines) Engines() []app.Engine {
	out := make([]app.Engine, 0, len(e.list))
	for _, r := range e.list {
		en := app.Engine{Name: r.Adapter.Engine, AdapterID: r.Adapter.AdapterID, Available: r.Browser != nil,
			Capabilities: slices.Clone(r.Adapter.Capabilities)}
		if r.Browser != nil {
			product, _ := r.Browser.Version()
			en.Version = productVersion(product)
		} else {
			en.Unavailable = r.Adapter.Install
		}
		out = append(out, en)
	}
	return out
}

// productVersion is the version of a browser product string: "Chrome/131.0.6778.85" gives
// "131.0.6778.85".
func productVersion(product string) string {
	if i := strings.LastIndexByte(product, '/'); i >= 0 {
		return product[i+1:]
	}
	return product
}

// OpenSession implements app.Browser.
func (e *Engines) OpenSession(ctx context.Context, engine, sessionID string, pol *policy.Policy, onEvent func(page.Event)) (app.BrowserSession, error) {
	for _, r := range e.list {
		if r.Adapter.Engine != engine {
			continue
		}
		if r.Browser == nil {
			return nil, fmt.Errorf("%w: the browser engine %s does not run", page.ErrUnavailable, engine)
		}
		e.sweep()
		keeper := observation.NewKeeper()
		s, err := r.Browser.OpenSession(ctx, sessionID, pol, func(ev page.Event) {
			if ev.Type == page.EventContextClosed {
				keeper.Forget(ev.ContextID)
			}
			if onEvent != nil {
				onEvent(ev)
			}
		})
		if err != nil {
			return nil, err
		}
		return e.keepSession(sessionID, s, keeper), nil
	}
	return nil, fmt.Errorf("%w: no browser engine %s on this node", page.ErrUnavailable, engine)
}

// Session implements app.Browser.
func (e *Engines) Session(sessionID string) (app.BrowserSession, bool) {
	_, s, ok := e.find(sessionID)
	if !ok {
		e.mu.Lock()
		delete(e.kept, sessionID)
		e.mu.Unlock()
		return nil, false
	}
	return e.keepSession(sessionID, s, nil), true
}

// find finds an open session on the engine that runs it (the engine's own, without its keeper).
func (e *Engines) find(sessionID string) (EngineAdapter, app.BrowserSession, bool) {
	for _, r := range e.list {
		if r.Browser == nil {
			continue
		}
		if s, ok := r.Browser.Session(sessionID); ok {
			return r.Adapter, s, true
		}
	}
	return EngineAdapter{}, nil, false
}

// SessionEngine implements app.SessionEngine.
func (e *Engines) SessionEngine(sessionID string) (string, bool) {
	a, _, ok := e.find(sessionID)
	return a.Engine, ok
}

// SessionLoad implements app.SessionLoad over the engines that report their load.
func (e *Engines) SessionLoad() (open, limit int) {
	for _, r := range e.list {
		if l, ok := r.Browser.(app.SessionLoad); ok {
			o, lim := l.SessionLoad()
			open, limit = open+o, limit+lim
		}
	}
	return open, limit
}

// running tells whether any engine's browser runs.
func (e *Engines) running() bool {
	for _, r := range e.list {
		if r.Browser != nil {
			return true
		}
	}
	return false
}

// Close closes every engine's browser.
func (e *Engines) Close() error {
	var errs []error
	for _, r := range e.list {
		if r.Browser != nil {
			errs = append(errs, r.Browser.Close())
		}
	}
	return errors.Join(errs...)
}

// startEngines starts the browsers of the configured engines, at once, and returns them with the
// function that closes them. An engine whose browser cannot start leaves the node running: its
// sessions answer 503 browser_unavailable naming it.
func startEngines(ctx context.Context, cfg Config, reg EngineRegistry, log *slog.Logger) (*Engines, func()) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	list := make([]RunningEngine, len(cfg.Engines))
	var wg sync.WaitGroup
	for i, name := range cfg.Engines {
		list[i].Adapter = reg[name]
		wg.Go(func() {
			elog := log.With("component", "browser", "engine", name)
			b, err := list[i].Adapter.Start(ctx, cfg, elog)
			if err != nil {
				var sandbox *browser.SandboxError
				switch {
				case errors.As(err, &sandbox):
					// Fail closed: no browser rather than one without its sandbox; the error names the fix.
					elog.Error("the browser's sandbox cannot start: its sessions will answer 503 browser_unavailable", "err", err)
				case errors.Is(err, browser.ErrUnavailable):
					elog.Warn("no browser: its sessions will answer 503 browser_unavailable", "err", err)
				default:
					elog.Error("starting the browser failed: its sessions will answer 503 browser_unavailable", "err", err)
				}
				return
			}
			list[i].Browser = b
		})
	}
	wg.Wait()
	e := NewEngines(list...)
	return e, func() {
		if err := e.Close(); err != nil {
			log.Warn("closing the browser", "err", err)
		}
	}
}

// SpecEngines are the browser engines of the spec (BrowserEngine.json), in its order.
func SpecEngines() ([]string, error) {
	raw, err := spec.FS.ReadFile("schemas/BrowserEngine.json")
	if err != nil {
		return nil, fmt.Errorf("reading the spec's browser engines: %w", err)
	}
	var schema struct {
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		return nil, fmt.Errorf("reading the spec's browser engines: %w", err)
	}
	if len(schema.Enum) == 0 {
		return nil, errors.New("the spec's BrowserEngine.json lists no engines")
	}
	return schema.Enum, nil
}
