package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"

	"github.com/originweave/bap/server/internal/egress"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/tlsmint"
)

// Browser is one Chromium process (restarted when it dies) and the sessions
// it runs. It is safe for concurrent use.
type Browser struct {
	cfg Config
	log *slog.Logger
	bin string

	mu        sync.Mutex
	proc      *procState    // nil while (re)starting
	procReady chan struct{} // closed when proc is set; replaced when it goes
	sessions  map[string]*Session
	reserved  map[string]bool
	closed    bool
	closeCh   chan struct{}
	warmWake  chan struct{}
	wg        sync.WaitGroup
}

// procState is the per-process part of the Browser, guarded by Browser.mu.
type procState struct {
	p *process
	// certs mints the certificates this browser's proxies present in tunnels they open: the
	// browser trusts its key, and no other browser does.
	certs  *tlsmint.Authority
	owners map[cdp.BrowserContextID]*Session
	warm   []*Session
	// downloads maps a download guid to the tab that started it.
	downloads map[string]*download
}

// Start launches the browser and returns once it answers. Without a browser
// binary, or when the browser does not start, the error wraps
// [ErrUnavailable].
func Start(ctx context.Context, cfg Config) (*Browser, error) {
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 32
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.WarmContexts == 0 {
		cfg.WarmContexts = 2
	}
	if cfg.WarmContexts < 0 {
		cfg.WarmContexts = 0
	}
	if cfg.MaxDownloadBytes <= 0 {
		cfg.MaxDownloadBytes = 25 << 20
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	bin, err := findBinary(cfg.Binary)
	if err != nil {
		return nil, err
	}
	b := &Browser{
		cfg:       cfg,
		log:       log,
		bin:       bin,
		procReady: make(chan struct{}),
		sessions:  make(map[string]*Session),
		reserved:  make(map[string]bool),
		closeCh:   make(chan struct{}),
		warmWake:  make(chan struct{}, 1),
	}
	ps, err := b.startProcess(ctx)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.proc = ps
	close(b.procReady)
	b.mu.Unlock()
	b.wg.Add(3)
	go b.monitor(ps)
	go b.warmLoop()
	go b.reapLoop()
	b.poke()
	return b, nil
}

// startProcess launches a browser and turns on auto-attach for its pages.
func (b *Browser) startProcess(ctx context.Context) (*procState, error) {
	certs, err := tlsmint.New(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	p, err := launch(ctx, b.bin, b.cfg, certs.SPKIHash(), b.log)
	if err != nil {
		return nil, err
	}
	ps := &procState{p: p, certs: certs, owners: make(map[cdp.BrowserContextID]*Session), downloads: make(map[string]*download)}
	p.conn.root.setHandler(func(ev any) { b.onRootEvent(ps, ev) })
	// Every new page (tabs this package creates and popups alike) and every
	// top-level worker is attached paused, so that its request interception
	// is on before it loads anything.
	_, err = call(ctx, p.conn.root, target.SetAutoAttach, target.SetAutoAttachParams{
		AutoAttach: true, WaitForDebuggerOnStart: true, Flatten: ptr(true),
		Filter: target.Filter{{Type: "page"}, {Type: "service_worker"}, {Type: "shared_worker"}, {Exclude: true}},
	})
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("%w: setting up the browser: %w", ErrUnavailable, err)
	}
	b.log.Info("browser started", "binary", b.bin, "pid", p.cmd.Process.Pid)
	return ps, nil
}

// onRootEvent handles the browser session's events.
func (b *Browser) onRootEvent(ps *procState, ev any) {
	switch ev := ev.(type) {
	case *target.EventAttachedToTarget:
		b.mu.Lock()
		s := ps.owners[ev.TargetInfo.BrowserContextID]
		b.mu.Unlock()
		sess := ps.p.conn.session(ev.SessionID)
		if sess == nil {
			return
		}
		if s == nil {
			// A target of no session (the browser's first tab): leave it idle.
			if ev.WaitingForDebugger {
				fireCmd(sess, runtime.RunIfWaitingForDebugger, cdp.Empty{})
			}
			return
		}
		s.attachTarget(sess, ev.TargetInfo, nil)
	case *cdpbrowser.EventDownloadWillBegin:
		b.onDownloadBegin(ps, ev)
	case *cdpbrowser.EventDownloadProgress:
		b.onDownloadProgress(ps, ev)
	}
}

// monitor waits for the browser to go away; unless the Browser is closing
// it marks the process's sessions lost and starts a new browser.
func (b *Browser) monitor(ps *procState) {
	defer b.wg.Done()
	select {
	case <-ps.p.conn.done:
	case <-ps.p.exited:
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.proc = nil
	b.procReady = make(chan struct{})
	var lost []*Session
	for _, s := range ps.owners {
		if s.ID() != "" {
			lost = append(lost, s)
		}
	}
	ps.owners = map[cdp.BrowserContextID]*Session{}
	warm := ps.warm
	ps.warm = nil
	b.mu.Unlock()
	for _, s := range warm {
		s.markClosed()
	}
	b.log.Error("browser process lost; restarting it", "err", ps.p.conn.readErr, "output", lastLines(ps.p.output.String(), 5))
	for _, s := range lost {
		s.lose("the browser process exited")
	}
	go ps.p.stop()

	delay := 250 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		nps, err := b.startProcess(ctx)
		cancel()
		if err == nil {
			b.mu.Lock()
			if b.closed {
				b.mu.Unlock()
				nps.p.stop()
				return
			}
			b.proc = nps
			close(b.procReady)
			b.mu.Unlock()
			b.wg.Add(1)
			go b.monitor(nps)
			b.poke()
			return
		}
		b.log.Error("restarting the browser failed", "err", err)
		select {
		case <-b.closeCh:
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, 30*time.Second)
	}
}

func lastLines(s string, n int) string {
	lines := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			lines++
			if lines > n {
				return s[i+1:]
			}
		}
	}
	return s
}

// current returns the running process, waiting while it restarts.
func (b *Browser) current(ctx context.Context) (*procState, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, fmt.Errorf("%w: the browser was closed", ErrUnavailable)
		}
		ps, ready := b.proc, b.procReady
		b.mu.Unlock()
		if ps != nil {
			return ps, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: the browser is restarting: %w", ErrUnavailable, ctx.Err())
		}
	}
}

func (b *Browser) poke() {
	select {
	case b.warmWake <- struct{}{}:
	default:
	}
}

// warmLoop keeps cfg.WarmContexts browser contexts ready.
func (b *Browser) warmLoop() {
	defer b.wg.Done()
	for {
		select {
		case <-b.closeCh:
			return
		case <-b.warmWake:
		}
		for {
			b.mu.Lock()
			ps := b.proc
			need := ps != nil && !b.closed && len(ps.warm) < b.cfg.WarmContexts
			b.mu.Unlock()
			if !need {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			s, err := b.newContextSession(ctx, ps)
			cancel()
			if err != nil {
				b.log.Warn("preparing a browser context failed", "err", err)
				select {
				case <-b.closeCh:
					return
				case <-time.After(time.Second):
				}
				continue
			}
			b.mu.Lock()
			if b.proc == ps && !b.closed {
				ps.warm = append(ps.warm, s)
				b.mu.Unlock()
			} else {
				b.mu.Unlock()
				s.dispose(context.Background())
			}
		}
	}
}

// reapLoop closes idle sessions.
func (b *Browser) reapLoop() {
	defer b.wg.Done()
	if b.cfg.IdleTimeout < 0 {
		<-b.closeCh
		return
	}
	every := min(max(b.cfg.IdleTimeout/4, 10*time.Millisecond), 30*time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-b.closeCh:
			return
		case <-tick.C:
		}
		var idle []*Session
		b.mu.Lock()
		for _, s := range b.sessions {
			if s.idleFor() > b.cfg.IdleTimeout {
				idle = append(idle, s)
			}
		}
		b.mu.Unlock()
		for _, s := range idle {
			b.log.Info("closing an idle browser session", "session", s.id)
			s.emit(Event{Type: EventSessionClosed, Data: map[string]any{"reason": "idle"}})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = s.Close(ctx)
			cancel()
		}
	}
}

// newContextSession creates a browser context with its first tab, set up
// and ready, as a session without an id or policy (nothing but about:blank
// loads in it until OpenSession assigns one).
func (b *Browser) newContextSession(ctx context.Context, ps *procState) (*Session, error) {
	root := ps.p.conn.root
	// The context's own egress proxy, before the context exists: nothing it loads can go around
	// it (netpolicy.go). Its policy is the session's once OpenSession assigns one; until then it
	// refuses everything.
	gate := &sessionGate{}
	px, err := egress.Listen(egress.Config{Policy: gate.policy, DocumentCSP: gate.documentCSP, OnBlocked: gate.blocked, Logger: b.log,
		Forbidden: b.cfg.ServerAddrs, Certs: ps.certs, UpstreamTLS: b.cfg.UpstreamTLS})
	if err != nil {
		return nil, fmt.Errorf("%w: starting the context's egress proxy: %w", ErrUnavailable, err)
	}
	bc, err := call(ctx, root, target.CreateBrowserContext, target.CreateBrowserContextParams{
		DisposeOnDetach: ptr(true), ProxyServer: px.URL(), ProxyBypassList: proxyBypassList,
	})
	if err != nil {
		_ = px.Close()
		return nil, fmt.Errorf("creating a browser context: %w", err)
	}
	s := newSession(b, ps, bc.BrowserContextID)
	s.proxy = px
	gate.bind(s)
	b.mu.Lock()
	ps.owners[bc.BrowserContextID] = s
	b.mu.Unlock()
	fail := func(err error) (*Session, error) {
		s.dispose(context.Background())
		return nil, err
	}
	if err := ps.p.makeDownloadDir(s.dlDir); err != nil {
		return fail(err)
	}
	dl := start(ctx, root, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, BrowserContextID: bc.BrowserContextID,
		DownloadPath: s.dlDir, EventsEnabled: ptr(true),
	})
	tr, err := call(ctx, root, target.CreateTarget, target.CreateTargetParams{URL: "about:blank", BrowserContextID: bc.BrowserContextID})
	if err != nil {
		return fail(fmt.Errorf("creating a tab: %w", err))
	}
	if err := dl.wait(ctx, nil); err != nil {
		return fail(fmt.Errorf("setting the download behavior: %w", err))
	}
	t, err := s.waitTab(ctx, tr.TargetID)
	if err != nil {
		return fail(err)
	}
	s.mu.Lock()
	s.defaultCtx = t.id
	s.mu.Unlock()
	return s, nil
}

// Close closes every session and stops the browser.
func (b *Browser) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.closeCh)
	ps := b.proc
	var all []*Session
	for _, s := range b.sessions {
		all = append(all, s)
	}
	if ps != nil {
		all = append(all, ps.warm...)
		ps.warm = nil
	}
	b.mu.Unlock()
	for _, s := range all {
		s.markClosed()
	}
	if ps != nil {
		ps.p.stop()
	}
	b.wg.Wait()
	for _, s := range all {
		s.cleanupFiles()
	}
	return nil
}

// OpenSession opens a browser session with the id (a bs_… id chosen by the
// caller) under the policy pol; onEvent (may be nil) receives the session's
// events, one at a time, in order, on a goroutine of the session. It uses a
// warm browser context when one is ready.
func (b *Browser) OpenSession(ctx context.Context, sessionID string, pol *policy.Policy, onEvent func(Event)) (*Session, error) {
	if !ids.Valid(ids.BrowserSession, sessionID) {
		return nil, fmt.Errorf("%w: session id %q is not a bs_ id", ErrInvalidRequest, sessionID)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: the browser was closed", ErrUnavailable)
	}
	if _, ok := b.sessions[sessionID]; ok || b.reserved[sessionID] {
		b.mu.Unlock()
		return nil, ErrSessionExists
	}
	active := len(b.reserved)
	for _, s := range b.sessions {
		if !s.isLost() {
			active++
		}
	}
	if active >= b.cfg.MaxSessions {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w (limit %d)", ErrTooManySessions, b.cfg.MaxSessions)
	}
	b.reserved[sessionID] = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.reserved, sessionID)
		b.mu.Unlock()
	}()

	var s *Session
	for s == nil {
		ps, err := b.current(ctx)
		if err != nil {
			return nil, err
		}
		b.mu.Lock()
		if b.proc == ps && len(ps.warm) > 0 {
			s = ps.warm[0]
			ps.warm = ps.warm[1:]
		}
		b.mu.Unlock()
		if s != nil {
			b.poke()
			break
		}
		s, err = b.newContextSession(ctx, ps)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			if errors.Is(err, errConnClosed) {
				continue // the browser died; wait for the next one
			}
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	s.assign(sessionID, pol, onEvent)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		s.markClosed()
		return nil, fmt.Errorf("%w: the browser was closed", ErrUnavailable)
	}
	b.sessions[sessionID] = s
	b.mu.Unlock()
	b.log.Debug("browser session opened", "session", sessionID)
	return s, nil
}

// Session returns the open (or lost) session with the id.
func (b *Browser) Session(sessionID string) (*Session, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sessions[sessionID]
	return s, ok
}

// forget removes a closed session from the maps.
func (b *Browser) forget(s *Session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sessions[s.id] == s {
		delete(b.sessions, s.id)
	}
	if s.ps.owners[s.bctx] == s {
		delete(s.ps.owners, s.bctx)
	}
}

func ptr[T any](v T) *T { return &v }
