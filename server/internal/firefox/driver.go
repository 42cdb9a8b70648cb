package firefox

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/egress"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
	"github.com/originweave/bap/server/internal/policy"
)

// Config configures a Driver.
type Config struct {
	Binary    string       // DefaultBinary when empty
	RunAsUser string       // see Options.RunAsUser
	Logger    *slog.Logger // nil: discard
	// MaxSessions bounds the open sessions (0: 16).
	MaxSessions int
	// ServerAddrs are the server's own listeners, which no page may reach (egress.Config.Forbidden).
	ServerAddrs []netip.AddrPort
	// UpstreamTLS configures the proxies' TLS towards the sites of tunnels they open
	// (egress.Config.UpstreamTLS): nil verifies against the system's roots; tests trust their own
	// sites with it.
	UpstreamTLS *tls.Config
}

// proxyPrefs make Firefox send every request of a user context through its proxy, loopback
// included (Firefox otherwise never proxies localhost), and switch off what a proxy cannot see or
// what resolves names itself: HTTP/3 (QUIC), WebRTC, DNS prefetch, speculative connections. Service
// workers are off too: Firefox attributes their requests to no browsing context, so no tab's
// intercept sees them, and a page could send a non-safe request past a form_submission rule from
// one (hold.go).
var proxyPrefs = map[string]any{
	"dom.serviceWorkers.enabled":                false,
	"network.proxy.allow_hijacking_localhost":   true,
	"network.proxy.no_proxies_on":               "",
	"network.http.http3.enable":                 false,
	"media.peerconnection.enabled":              false,
	"network.dns.disablePrefetch":               true,
	"network.prefetch-next":                     false,
	"network.predictor.enabled":                 false,
	"network.http.speculative-parallel-limit":   0,
	"browser.places.speculativeConnect.enabled": false,
	"network.trr.mode":                          5, // no DNS over HTTPS: names are the proxy's
}

// Driver is the WebDriver BiDi adapter's browser for a node: one Firefox ESR, one BiDi session
// with it, a user context per BAP session behind an egress proxy of its own (package egress, as
// the CDP adapter's browser contexts), so the task's origin policy holds for everything the
// session loads.
type Driver struct {
	cfg     Config
	log     *slog.Logger
	b       *Browser
	e       *Engine
	owned   bool // Close ends the engine and stops the browser
	product string

	mu       sync.Mutex
	sessions map[string]*Session
	byTop    map[bidi.BrowsingContextBrowsingContext]*Session // every tab of every session
	byUC     map[bidi.BrowserUserContext]*Session             // the sessions by user context
	frameTab map[bidi.BrowsingContextBrowsingContext]*Session // the tab of each frame (popups.go)
	closed   bool
	// While an owned browser restarts, down is set and ready is closed when it runs again
	// (engine waits on it); stop ends the driver's lifetime (watch and restart), at Close.
	down  bool
	ready chan struct{}
	stop  context.CancelFunc

	// Holds (hold.go): the sessions that hold requests by user context, and the browsing contexts
	// of those user contexts (tabs, popups, frames).
	holdUC  map[bidi.BrowserUserContext]*Session
	holdCtx map[bidi.BrowsingContextBrowsingContext]bidi.BrowserUserContext
}

// Start launches Firefox and opens its BiDi session. A missing binary wraps page.ErrUnavailable.
// A Firefox that crashes or whose connection drops is restarted (watch): its sessions are lost,
// the next session opens in the new browser.
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b, e, err := launch(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	d, err := newDriver(ctx, cfg, log, b, e)
	if err != nil {
		_ = e.Close(ctx)
		_ = b.Close()
		return nil, fmt.Errorf("%w: %w", page.ErrUnavailable, err)
	}
	d.mu.Lock()
	d.owned = true
	d.mu.Unlock()
	return d, nil
}

// launch starts a Firefox and its BiDi session.
func launch(ctx context.Context, cfg Config, log *slog.Logger) (*Browser, *Engine, error) {
	b, err := Launch(ctx, Options{Binary: cfg.Binary, Log: log, Prefs: proxyPrefs, RunAsUser: cfg.RunAsUser})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", page.ErrUnavailable, err)
	}
	e, err := Open(ctx, b, pagekit.AgentJS)
	if err != nil {
		_ = b.Close()
		return nil, nil, fmt.Errorf("%w: %w", page.ErrUnavailable, err)
	}
	return b, e, nil
}

// newDriver is a driver over a running browser and its engine (owned by Start's: restarted when
// they go away, stopped at Close).
func newDriver(ctx context.Context, cfg Config, log *slog.Logger, b *Browser, e *Engine) (*Driver, error) {
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 16
	}
	d := &Driver{cfg: cfg, log: log, b: b, e: e, sessions: map[string]*Session{},
		byTop: map[bidi.BrowsingContextBrowsingContext]*Session{}, byUC: map[bidi.BrowserUserContext]*Session{},
		frameTab: map[bidi.BrowsingContextBrowsingContext]*Session{},
		holdUC:   map[bidi.BrowserUserContext]*Session{}, holdCtx: map[bidi.BrowsingContextBrowsingContext]bidi.BrowserUserContext{},
		ready: make(chan struct{})}
	close(d.ready)
	// The driver's lifetime: it outlives the start's context and ends at Close.
	life, stop := context.WithCancel(context.WithoutCancel(ctx))
	d.stop = stop
	e.drv = d
	name, version, _ := strings.Cut(e.Version(), " ")
	if name == "firefox" {
		name = "Firefox"
	}
	d.product = name + "/" + version
	if err := d.follow(ctx, life, e); err != nil {
		stop()
		return nil, err
	}
	go d.watch(life, b, e)
	return d, nil
}

// follow subscribes (under ctx) to the navigations of the sessions' tabs (an act tells from them
// whether its input started one and waits for it to end, act.go's settle) and to their dialogs;
// what answers the sessions' blocked requests runs under life, the driver's lifetime.
func (d *Driver) follow(ctx, life context.Context, e *Engine) error {
	nav := func(started bool) func(bidi.BrowsingContextNavigationInfo) {
		return func(ev bidi.BrowsingContextNavigationInfo) {
			d.mu.Lock()
			s := d.byTop[ev.Context]
			d.mu.Unlock()
			if s != nil {
				s.noteNavigation(started)
			}
		}
	}
	e.c.OnBrowsingContextNavigationStarted(nav(true))
	for _, on := range []func(func(bidi.BrowsingContextNavigationInfo)) func(){
		e.c.OnBrowsingContextLoad, e.c.OnBrowsingContextNavigationFailed,
	} {
		on(nav(false))
	}
	// A tab's URL as its last load saw it: what a snapshot's contexts and a checkpoint show of a
	// tab nobody read since (a popup).
	e.c.OnBrowsingContextLoad(func(ev bidi.BrowsingContextNavigationInfo) {
		d.mu.Lock()
		s := d.byTop[ev.Context]
		d.mu.Unlock()
		if s != nil && ev.URL != "" {
			s.mu.Lock()
			s.docs.url = pagekit.RedactURL(ev.URL)
			s.mu.Unlock()
		}
	})
	// A navigation that turns into a download (refused: no downloads capability) ends there.
	e.c.OnBrowsingContextDownloadWillBegin(func(ev bidi.BrowsingContextDownloadWillBeginParams) {
		nav(false)(bidi.BrowsingContextNavigationInfo{Context: ev.Context})
	})
	e.c.OnBrowsingContextUserPromptOpened(func(ev bidi.BrowsingContextUserPromptOpenedParameters) {
		d.mu.Lock()
		s := d.byTop[ev.Context]
		d.mu.Unlock()
		if s != nil {
			s.notePrompt(ev)
		}
	})
	// The tabs pages open: subscribed to per session, for its user context (OpenSession).
	e.c.OnBrowsingContextContextCreated(d.onContextCreated)
	e.c.OnBrowsingContextContextDestroyed(d.onContextDestroyed)
	d.followRequests(life, e)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := e.c.SessionSubscribe(ctx, bidi.SessionSubscribeParameters{Events: []string{
		bidi.EventBrowsingContextNavigationStarted, bidi.EventBrowsingContextLoad,
		bidi.EventBrowsingContextNavigationFailed, bidi.EventBrowsingContextUserPromptOpened,
		bidi.EventBrowsingContextDownloadWillBegin,
	}}); err != nil {
		// Without them an act cannot tell what its input did: no driver rather than one that
		// guesses. (Firefox refuses a whole subscription for one event name it does not know:
		// 153 ESR has no navigationAborted.)
		return fmt.Errorf("firefox: subscribing to navigations and dialogs: %w", err)
	}
	// Downloads are refused browser-wide too, not only per session's user context (OpenSession):
	// under load a download was once written to the profile's Downloads with the per-context
	// refusal in place, so the default behaviour is the second layer.
	if err := e.c.BrowserSetDownloadBehavior(ctx, bidi.BrowserSetDownloadBehaviorParameters{
		DownloadBehavior: &bidi.BrowserDownloadBehavior{Type: "denied"}}); err != nil {
		return fmt.Errorf("firefox: refusing downloads: %w", err)
	}
	return nil
}

// followRequests routes the network events of the sessions that hold requests (each subscribes
// them for its own user context, hold.go): a blocked request to the session whose user context its
// browsing context is in, an answer to the session that released it.
func (d *Driver) followRequests(life context.Context, e *Engine) {
	e.c.OnBrowsingContextContextCreated(func(ev bidi.BrowsingContextInfo) {
		d.mu.Lock()
		if d.holdUC[ev.UserContext] != nil {
			d.holdCtx[ev.Context] = ev.UserContext
		}
		d.mu.Unlock()
	})
	e.c.OnBrowsingContextContextDestroyed(func(ev bidi.BrowsingContextInfo) {
		d.mu.Lock()
		delete(d.holdCtx, ev.Context)
		d.mu.Unlock()
	})
	e.c.OnNetworkBeforeRequestSent(func(ev bidi.NetworkBeforeRequestSentParameters) {
		if !ev.IsBlocked {
			return
		}
		var s, tab *Session
		held := ev.Context == nil // attributed to no context: maybe a holding session's
		d.mu.Lock()
		if ev.Context != nil {
			if uc, ok := d.holdCtx[*ev.Context]; ok {
				s, held = d.holdUC[uc], true
			}
			tab = d.byTop[*ev.Context] // nil for a frame
		}
		d.mu.Unlock()
		if s != nil {
			s.onRequestBlocked(life, ev, tab)
			return
		}
		// Not a holding session's (its user context subscribed no network events, yet another
		// subscription does): it goes on. One of a holding session that is closing, or of no
		// context: only what cannot have a side effect goes on.
		rid := ev.Request.Request
		go func() {
			ctx, cancel := context.WithTimeout(life, holdCmdTimeout)
			defer cancel()
			if !held || policy.SafeMethod(ev.Request.Method) {
				_ = e.c.NetworkContinueRequest(ctx, bidi.NetworkContinueRequestParameters{Request: rid})
			} else {
				_ = e.c.NetworkFailRequest(ctx, bidi.NetworkFailRequestParameters{Request: rid})
			}
		}()
	})
	answered := func(rid bidi.NetworkRequest, unsent bool) {
		d.mu.Lock()
		list := make([]*Session, 0, len(d.holdUC))
		for _, s := range d.holdUC {
			list = append(list, s)
		}
		d.mu.Unlock()
		for _, s := range list {
			s.onRequestAnswered(rid, unsent)
		}
	}
	e.c.OnNetworkResponseCompleted(func(ev bidi.NetworkResponseCompletedParameters) { answered(ev.Request.Request, false) })
	e.c.OnNetworkFetchError(func(ev bidi.NetworkFetchErrorParameters) {
		// A request that failed before its request started was never sent (Firefox fills
		// requestStart once it writes the request).
		answered(ev.Request.Request, ev.Request.Timings.RequestStart == 0)
	})
}

// holdFor makes the session's user context hold requests: its browsing contexts are routed to it
// and the browser's intercept exists (added once, for every context: it blocks requests only where
// network.beforeRequestSent is subscribed, which is in the user contexts of holding sessions).
func (d *Driver) holdFor(ctx context.Context, s *Session) error {
	d.mu.Lock()
	d.holdUC[s.uc] = s
	d.holdCtx[s.top] = s.uc
	d.mu.Unlock()
	e := s.e
	e.interMu.Lock()
	defer e.interMu.Unlock()
	if e.intercept != "" {
		return nil
	}
	ic, err := e.c.NetworkAddIntercept(ctx, bidi.NetworkAddInterceptParameters{
		Phases: []bidi.NetworkInterceptPhase{bidi.NetworkInterceptPhaseBeforeRequestSent}})
	if err != nil {
		return fmt.Errorf("firefox: intercepting requests: %w", err)
	}
	e.intercept = ic.Intercept
	return nil
}

// watch waits for the browser or its connection to go away, then marks the sessions in it lost
// and, for a browser the driver owns, starts a new one (restart), as the CDP adapter restarts a
// Chromium that died. Lost sessions stay listed until they are closed.
func (d *Driver) watch(life context.Context, b *Browser, e *Engine) {
	select {
	case <-e.c.Done():
	case <-b.Exited():
	}
	d.mu.Lock()
	closing := d.closed
	list := make([]*Session, 0, len(d.sessions))
	for _, s := range d.sessions {
		if s.e == e {
			list = append(list, s)
		}
	}
	owned := d.owned
	if !closing && owned && !d.down { // engine() may have marked it down first
		d.down, d.ready = true, make(chan struct{})
	}
	d.mu.Unlock()
	if closing {
		return
	}
	d.log.Error("firefox went away: its sessions are lost", goneCause(b, e)...)
	for _, s := range list {
		s.mu.Lock()
		was := s.lost || s.closed
		s.lost = true
		s.mu.Unlock()
		s.endLife()
		if !was {
			s.emit(page.Event{Type: page.EventSessionLost, Data: map[string]any{"reason": "the browser exited"}})
		}
	}
	if !owned {
		return
	}
	// What is left of the old browser (a hung parent, content processes) and its profile go.
	_ = e.c.Close()
	_ = b.Close()
	d.restart(life)
}

// goneCause says, for the operator's log, which end went first: the process (with its exit
// status: a signal names a crash or the OOM killer) or the BiDi connection (with its error). It
// names no page, URL or browser output, which may carry what a page holds.
func goneCause(b *Browser, e *Engine) []any {
	select {
	case <-b.Exited():
		status := "exit status 0"
		if b.waitErr != nil {
			status = b.waitErr.Error()
		}
		return []any{"cause", "process exited", "pid", b.cmd.Process.Pid, "status", status}
	default:
		return []any{"cause", "connection closed", "pid", b.cmd.Process.Pid, "err", e.c.Err()}
	}
}

// restart starts a new Firefox, retrying with a growing delay until it runs or the driver closes.
func (d *Driver) restart(life context.Context) {
	delay := 250 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(life, 60*time.Second)
		b, e, err := launch(ctx, d.cfg, d.log)
		if err == nil {
			e.drv = d
			if err = d.follow(ctx, life, e); err != nil {
				_ = e.Close(ctx)
				_ = b.Close()
			}
		}
		cancel()
		if err == nil {
			d.mu.Lock()
			if d.closed {
				d.mu.Unlock()
				cctx, cancel := context.WithTimeout(context.WithoutCancel(life), 10*time.Second)
				_ = e.Close(cctx)
				cancel()
				_ = b.Close()
				return
			}
			d.b, d.e, d.down = b, e, false
			close(d.ready)
			d.mu.Unlock()
			d.log.Info("firefox restarted")
			go d.watch(life, b, e)
			return
		}
		d.log.Error("restarting firefox failed", "err", err)
		select {
		case <-life.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, 30*time.Second)
	}
}

// engine is the running engine, waiting (within ctx) while the browser restarts. An owned
// engine whose connection has closed is down from that moment, though watch may not have seen
// it yet: a caller never gets the dead engine back once its end is known.
func (d *Driver) engine(ctx context.Context) (*Engine, error) {
	for {
		d.mu.Lock()
		if d.owned && !d.closed && !d.down && connClosed(d.e) {
			d.down, d.ready = true, make(chan struct{})
		}
		closed, down, e, ready := d.closed, d.down, d.e, d.ready
		d.mu.Unlock()
		switch {
		case closed:
			return nil, fmt.Errorf("%w: the browser was closed", page.ErrUnavailable)
		case !down:
			return e, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: firefox is restarting: %w", page.ErrUnavailable, ctx.Err())
		}
	}
}

// connClosed reports whether e's BiDi connection has ended.
func connClosed(e *Engine) bool {
	select {
	case <-e.c.Done():
		return true
	default:
		return false
	}
}

// proxyCerts is the running browser's authority for its proxies' tunnels, nil (an untyped nil:
// tunnels stay opaque) when its profile does not trust one.
func (d *Driver) proxyCerts() egress.CertSource {
	d.mu.Lock()
	b := d.b
	d.mu.Unlock()
	if b == nil || b.certs == nil {
		return nil
	}
	return b.certs
}

// ProtocolVersion is what protocol_adapter records as the version of WebDriver BiDi: the W3C
// specification has no version numbers, only dated drafts, and Firefox names none.
const ProtocolVersion = "W3C draft"

// Version is the browser's product and version ("Firefox/153.8.0esr") and ProtocolVersion.
func (d *Driver) Version() (product, protocol string) {
	d.mu.Lock()
	e := d.e
	d.mu.Unlock()
	select {
	case <-e.c.Done():
		return "", ""
	default:
	}
	return d.product, ProtocolVersion
}

// SessionLoad reports the open sessions and the limit.
func (d *Driver) SessionLoad() (open, limit int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sessions), d.cfg.MaxSessions
}

// OpenSession opens a BAP session: a user context whose traffic all goes through an egress proxy
// enforcing pol (refusing everything it does not allow), with a tab. It fails closed: a session
// whose proxy cannot be set up is not opened. When the browser goes away while the session is
// being opened, an owned browser is restarted and the session is opened once more in the new
// one, within ctx, rather than answered unavailable (a clean-clone CI run answered
// create_browser_session 503 so).
func (d *Driver) OpenSession(ctx context.Context, id string, pol *policy.Policy, onEvent func(page.Event)) (*Session, error) {
	s, err := d.openSession(ctx, id, pol, onEvent)
	if err != nil && errors.Is(err, errBrowserGone) && d.owned && ctx.Err() == nil {
		d.log.Warn("firefox went away while a session was opened: opening it in the restarted browser", "err", err)
		s, err = d.openSession(ctx, id, pol, onEvent)
	}
	return s, err
}

func (d *Driver) openSession(ctx context.Context, id string, pol *policy.Policy, onEvent func(page.Event)) (*Session, error) {
	d.mu.Lock()
	switch {
	case d.closed:
		d.mu.Unlock()
		return nil, fmt.Errorf("%w: the browser was closed", page.ErrUnavailable)
	case d.sessions[id] != nil:
		d.mu.Unlock()
		return nil, page.ErrSessionExists
	case len(d.sessions) >= d.cfg.MaxSessions:
		d.mu.Unlock()
		return nil, page.ErrTooManySessions
	}
	d.mu.Unlock()
	e, err := d.engine(ctx)
	if err != nil {
		return nil, err
	}
	var sess *Session
	var smu sync.Mutex
	px, err := egress.Listen(egress.Config{
		Policy: func() *policy.Policy { return pol },
		OnBlocked: func(b egress.Blocked) {
			smu.Lock()
			s := sess
			smu.Unlock()
			if s != nil {
				s.emit(page.Event{Type: page.EventRequestBlocked, URL: b.URL, Data: map[string]any{
					"resource_type": b.ResourceType, "layer": "proxy", "reason": string(b.Reason)}})
			}
		},
		Logger: d.log, Forbidden: d.cfg.ServerAddrs, Certs: d.proxyCerts(), UpstreamTLS: d.cfg.UpstreamTLS,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: starting the session's egress proxy: %w", page.ErrUnavailable, err)
	}
	// Dialogs are dismissed, as the CDP adapter dismisses them, and each is reported
	// (notePrompt). Setting beforeUnload apart made Firefox 153 drop pointer input.
	s, err := e.newSession(ctx, bidi.BrowserCreateUserContextParameters{
		Proxy:                   &bidi.SessionProxyConfiguration{ProxyType: "manual", HttpProxy: px.Addr(), SslProxy: px.Addr()},
		UnhandledPromptBehavior: &bidi.SessionUserPromptHandler{Default: bidi.SessionUserPromptHandlerTypeDismiss},
	})
	if err != nil {
		_ = px.Close()
		return nil, openErr(err)
	}
	s.proxy = px
	// No downloads capability: the browser refuses them rather than write files nobody keeps.
	if err := e.c.BrowserSetDownloadBehavior(ctx, bidi.BrowserSetDownloadBehaviorParameters{
		DownloadBehavior: &bidi.BrowserDownloadBehavior{Type: "denied"}, UserContexts: []bidi.BrowserUserContext{s.uc}}); err != nil {
		_ = s.Close(context.WithoutCancel(ctx))
		return nil, openErr(fmt.Errorf("firefox: refusing downloads: %w", err))
	}
	s.id, s.pol, s.onEvent = id, pol, onEvent
	if pol.HoldsRequests() {
		if err := s.interceptRequests(ctx); err != nil {
			_ = s.Close(context.WithoutCancel(ctx))
			return nil, openErr(err)
		}
	}
	d.mu.Lock()
	// Before the subscription, which reports the contexts that exist already (the tab) and
	// then each a page opens.
	d.byUC[s.uc] = s
	d.byTop[s.top] = s
	d.mu.Unlock()
	sub, err := e.c.SessionSubscribe(ctx, bidi.SessionSubscribeParameters{
		Events:       []string{bidi.EventBrowsingContextContextCreated, bidi.EventBrowsingContextContextDestroyed},
		UserContexts: []bidi.BrowserUserContext{s.uc},
	})
	if err != nil {
		d.forget(s)
		_ = s.Close(context.WithoutCancel(ctx))
		return nil, openErr(fmt.Errorf("firefox: subscribing to the session's tabs: %w", err))
	}
	s.sub = sub.Subscription
	smu.Lock()
	sess = s
	smu.Unlock()
	d.mu.Lock()
	if d.sessions[id] != nil || d.closed {
		d.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Close(cctx)
		return nil, page.ErrSessionExists
	}
	d.sessions[id] = s
	d.byTop[s.top] = s
	d.mu.Unlock()
	return s, nil
}

// errBrowserGone marks an open that failed because the browser's connection closed.
var errBrowserGone = errors.New("the browser connection closed")

// openErr maps an error of opening a session.
func openErr(err error) error {
	if errors.Is(err, bidi.ErrClosed) {
		return fmt.Errorf("%w: %w", page.ErrUnavailable, errBrowserGone)
	}
	return err
}

// Session finds an open session.
func (d *Driver) Session(id string) (*Session, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sessions[id]
	return s, ok
}

func (d *Driver) forget(s *Session) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sessions[s.id] == s {
		delete(d.sessions, s.id)
	}
	if d.byUC[s.uc] == s {
		delete(d.byUC, s.uc)
	}
	for top, t := range d.byTop {
		if t == s || t.main == s {
			delete(d.byTop, top)
		}
	}
	for f, t := range d.frameTab {
		if t == s || t.main == s {
			delete(d.frameTab, f)
		}
	}
	if d.holdUC[s.uc] == s {
		// Its contexts stay known until its user context is removed (forgetContexts): what they
		// send meanwhile is refused, not let through.
		delete(d.holdUC, s.uc)
	}
}

// forgetContexts drops the browsing contexts of a removed user context.
func (d *Driver) forgetContexts(uc bidi.BrowserUserContext) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c, u := range d.holdCtx {
		if u == uc {
			delete(d.holdCtx, c)
		}
	}
}

// Close closes every session, ends the BiDi session and stops the browser.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.stop()
	e, b := d.e, d.b
	list := make([]*Session, 0, len(d.sessions))
	for _, s := range d.sessions {
		list = append(list, s)
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range list {
		_ = s.Close(ctx)
	}
	d.mu.Lock()
	owned := d.owned
	d.mu.Unlock()
	if !owned {
		return nil
	}
	err := e.Close(ctx)
	return errors.Join(err, b.Close())
}
