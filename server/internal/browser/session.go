package browser

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/audits"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/inspector"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"

	"github.com/originweave/bap/server/internal/egress"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/pagekit"
	"github.com/originweave/bap/server/internal/policy"
)

// Session is one BAP browser session: an isolated browser context (own
// cookies, storage, cache) with its tabs (browsing contexts), its node
// handles and its policy. It is safe for concurrent use; actions and
// navigations of a session run one at a time.
type Session struct {
	b    *Browser
	ps   *procState
	bctx cdp.BrowserContextID

	proxy *egress.Proxy // the context's egress proxy: all its traffic goes through it (netpolicy.go)
	// reserved counts the responses the browser re-served with the connect-src CSP (body read and
	// fulfilled; netpolicy.go browserAddsCSP): those over TLS, not the proxy's plain-HTTP ones.
	reserved atomic.Int64

	dlDir string // downloads (allowAndName: files named by guid)
	upDir string // files staged for upload_file

	actMu sync.Mutex // one act/navigate at a time

	mu            sync.Mutex
	id            string
	pol           *policy.Policy
	csp           string
	onEvent       func(Event)
	defaultCtx    string
	tabs          map[string]*tab    // by ctx_ id
	byTarget      map[target.ID]*tab // by page target id
	tabOrder      []*tab
	front         *tab
	reg           registry
	docSeq        uint64 // source of document and world generations
	lost          string // why the session was lost; "" while alive
	closed        bool
	lastUsed      time.Time
	busy          int
	changed       chan struct{}      // closed and replaced on every state change
	seedURL       string             // the stand-in document of a restore (state.go)
	auditing      map[target.ID]bool // targets whose issues a session reports (netpolicy.go claimAudits)
	acting        *actHold           // the act running, whose non-safe requests may be held (hold.go)
	hold          *heldReq           // the request held for approval, if any (hold.go)
	replay        *replayNav         // a held navigation Release is sending again (hold.go)
	released      fetch.RequestID    // the request Release sent, until its answer
	releasedDone  bool               // its answer came
	lastPaused    time.Time          // the last request paused at interception (hold.go awaitLateRequests)
	approvedUntil time.Time          // an approved act's late requests go out until then (hold.go)

	// redirects are the proxy's reports of redirects to disallowed URLs, each waiting for a
	// browser layer to report the hop itself (netpolicy.go deferRedirect).
	redirects map[string]*time.Timer
	// reported are the proxy's redirect reports already recorded, by key, with when: a browser
	// layer that refuses such a hop later records nothing more (redirectReported).
	reported map[string]time.Time

	live pagekit.LiveHub // the live view's watchers and capture loop (live.go)

	// life ends when the session is lost or closed: the session's own lifetime, which the
	// commands' contexts and its background loops watch.
	life    context.Context //nolint:containedctx // the session's lifetime, see above
	endLife context.CancelFunc

	evMu    sync.Mutex
	evQueue []Event
	muted   bool // a restore is loading stand-in documents: drop their events
	// held collects the events of a restore instead of reporting them (nil
	// otherwise): its session is not recorded yet, so its caller records them
	// with it (RestoreResult.Events).
	held   *[]Event
	evWake chan struct{}
	evStop chan struct{}
	// The request.blocked budget (admitBlockedLocked), under evMu.
	blkStart         time.Time
	blkN, blkDropped int
}

// tab is one browsing context: a page target and the frames in it.
type tab struct {
	s        *Session
	id       string // ctx_…
	targetID target.ID
	page     *targetConn
	opener   string // ctx_ id of the opener
	ready    chan struct{}
	closed   bool

	epoch  string
	frames map[cdp.FrameID]*frameState
	main   *frameState

	// navigation bookkeeping of the main frame
	commits    int    // cross-document commits
	navSignals int    // navigations requested or started
	stops      int    // frameStoppedLoading
	blocked    int    // main-frame documents refused by the policy
	blockedURL string // the last one, redacted
	windowOpen int    // window.open / target=_blank requests
	navigating bool   // a Navigate call is running (accepts beforeunload)
	subStarted int    // cross-document navigations started in its subframes
	dialogs    []Dialog
	downloads  []*download
	expectDL   int    // navigations answered with an attachment
	dialogMode string // "accept" or "" (dismiss)
	promptText string
}

// frameState is one frame of a tab, wherever it runs (the page's process or
// an out-of-process iframe target).
type frameState struct {
	id     cdp.FrameID
	parent cdp.FrameID
	host   *targetConn
	doc    uint64 // document generation
	url    string
	loader cdp.LoaderID
	life   map[cdp.LoaderID]map[string]bool
	status int

	// navPending: a cross-document navigation of this subframe started and
	// the frame has not stopped loading since.
	navPending bool

	worldMu     sync.Mutex
	world       runtime.ExecutionContextID
	worldDoc    uint64
	worldSerial uint64
	owner       int    // index of the owner iframe element in the parent's world
	ownerWorld  uint64 // the parent world serial owner belongs to
}

// targetConn is one attached target of a session: a page, an iframe
// (out-of-process) or a worker.
type targetConn struct {
	s    *Session
	sess *cdpSession
	id   target.ID
	typ  string
	tab  *tab // nil for top-level workers
	// ownCSP is set once a document this target loaded came with a Content-Security-Policy of its
	// own: its connect-src refusals are then not only ours (netpolicy.go onIssue). Guarded by s.mu.
	ownCSP bool
}

func newSession(b *Browser, ps *procState, bctx cdp.BrowserContextID) *Session {
	base := filepath.Join(ps.p.dir(), "bap-"+rand.Text()[:12])
	s := &Session{
		b:        b,
		ps:       ps,
		bctx:     bctx,
		dlDir:    filepath.Join(base, "downloads"),
		upDir:    filepath.Join(base, "uploads"),
		tabs:     make(map[string]*tab),
		byTarget: make(map[target.ID]*tab),
		changed:  make(chan struct{}),
		lastUsed: time.Now(),
		evWake:   make(chan struct{}, 1),
		evStop:   make(chan struct{}),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.reg.init()
	go s.eventLoop()
	return s
}

// assign gives a prepared session its identity and policy.
func (s *Session) assign(id string, pol *policy.Policy, onEvent func(Event)) {
	s.mu.Lock()
	s.id = id
	s.pol = pol
	if !s.b.cfg.NoDocumentCSP {
		s.csp = connectSrc(pol)
	}
	s.onEvent = onEvent
	s.lastUsed = time.Now()
	s.mu.Unlock()
}

// ID returns the session's bs_ id.
func (s *Session) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// DefaultContext returns the ctx_ id of the session's first tab.
func (s *Session) DefaultContext() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defaultCtx
}

// Contexts lists the session's open browsing contexts, the first tab first.
func (s *Session) Contexts() []ContextInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contextsLocked()
}

func (s *Session) contextsLocked() []ContextInfo {
	out := make([]ContextInfo, 0, len(s.tabOrder))
	for _, t := range s.tabOrder {
		if t.closed {
			continue
		}
		u := ""
		if t.main != nil {
			u = t.main.url
		}
		out = append(out, ContextInfo{ContextID: t.id, URL: u, Opener: t.opener})
	}
	return out
}

// notifyLocked wakes every waiter on the session's state.
func (s *Session) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor waits until cond (called with s.mu held) is true, the session is
// lost or closed, or ctx ends.
func (s *Session) waitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrSessionClosed
		}
		if s.lost != "" {
			s.mu.Unlock()
			return fmt.Errorf("%w: %s", ErrSessionLost, s.lost)
		}
		if cond() {
			s.mu.Unlock()
			return nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// begin checks that the session can run an operation and marks it busy;
// the returned func ends the operation.
// The returned context ends when ctx does or when the session is lost or
// closed, so that no call waits on a renderer that is gone.
func (s *Session) begin(ctx context.Context) (context.Context, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, ErrSessionClosed
	}
	if s.lost != "" {
		return nil, nil, fmt.Errorf("%w: %s", ErrSessionLost, s.lost)
	}
	s.busy++
	s.lastUsed = time.Now()
	octx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.life, cancel)
	return octx, func() {
		stop()
		cancel()
		s.mu.Lock()
		s.busy--
		s.lastUsed = time.Now()
		s.mu.Unlock()
	}, nil
}

func (s *Session) idleFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy > 0 || s.closed {
		return 0
	}
	return time.Since(s.lastUsed)
}

func (s *Session) isLost() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost != ""
}

// tab returns the browsing context with the id ("" for the default one).
func (s *Session) tab(ctxID string) (*tab, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctxID == "" {
		ctxID = s.defaultCtx
	}
	t := s.tabs[ctxID]
	if t == nil || t.closed {
		if !ids.Valid(ids.BrowsingContext, ctxID) {
			return nil, fmt.Errorf("%w: %q is not a ctx_ id", ErrNoSuchContext, ctxID)
		}
		return nil, ErrNoSuchContext
	}
	return t, nil
}

// waitTab waits for the tab of the page target to be attached and set up.
func (s *Session) waitTab(ctx context.Context, id target.ID) (*tab, error) {
	var t *tab
	err := s.waitFor(ctx, func() bool { t = s.byTarget[id]; return t != nil })
	if err != nil {
		return nil, err
	}
	select {
	case <-t.ready:
		return t, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ---- attaching targets ----

// attachTarget takes over an auto-attached target of this session's
// browser context (parent is nil for a page or top-level worker).
func (s *Session) attachTarget(sess *cdpSession, info *target.Info, parent *targetConn) {
	tc := &targetConn{s: s, sess: sess, id: info.TargetID, typ: info.Type}
	s.b.log.Debug("attach", "type", info.Type, "target", info.TargetID, "opener", info.OpenerID, "session", sess.id, "parent", parent != nil, "url", info.URL)
	switch info.Type {
	case "page":
		s.mu.Lock()
		t := &tab{
			s:        s,
			id:       ids.New(ids.BrowsingContext),
			targetID: info.TargetID,
			page:     tc,
			ready:    make(chan struct{}),
			frames:   make(map[cdp.FrameID]*frameState),
			epoch:    ids.New(ids.DocumentEpoch),
		}
		if o := s.byTarget[info.OpenerID]; info.OpenerID != "" && o != nil {
			t.opener = o.id
		}
		s.docSeq++
		t.main = &frameState{id: cdp.FrameID(info.TargetID), host: tc, doc: s.docSeq, url: info.URL, life: map[cdp.LoaderID]map[string]bool{}}
		t.frames[t.main.id] = t.main
		tc.tab = t
		s.tabs[t.id] = t
		s.byTarget[info.TargetID] = t
		s.tabOrder = append(s.tabOrder, t)
		if s.front == nil {
			s.front = t
		}
		s.notifyLocked()
		s.mu.Unlock()
		sess.setHandler(tc.handle)
		go func() {
			<-sess.detached
			s.onTabGone(tc)
		}()
		go func() {
			tc.setup(true)
			close(t.ready)
			if t.opener != "" {
				s.mu.Lock()
				ev := Event{Type: EventContextOpened, ContextID: t.id, EpochID: t.epoch, URL: redactURL(t.main.url), Data: map[string]any{"opener": t.opener}}
				s.mu.Unlock()
				s.emit(ev)
			}
		}()
	case "iframe":
		t := parent.tab
		s.mu.Lock()
		fid := cdp.FrameID(info.TargetID)
		f := t.frames[fid]
		if f == nil {
			s.docSeq++
			f = &frameState{id: fid, parent: info.ParentFrameID, doc: s.docSeq, url: info.URL, life: map[cdp.LoaderID]map[string]bool{}}
			t.frames[fid] = f
		}
		f.host = tc
		tc.tab = t
		s.notifyLocked()
		s.mu.Unlock()
		sess.setHandler(tc.handle)
		go tc.setup(true)
	default: // workers
		if parent != nil {
			tc.tab = parent.tab
		}
		sess.setHandler(tc.handle)
		go tc.setup(false)
	}
}

// setup turns on what the target needs and lets it run.
func (tc *targetConn) setup(frames bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s := tc.sess
	patterns := []*fetch.RequestPattern{
		{URLPattern: "*", RequestStage: fetch.RequestStageRequest},
		{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageResponse},
	}
	if !frames {
		// A worker's own script response carries the CSP of its global scope.
		patterns = []*fetch.RequestPattern{
			{URLPattern: "*", RequestStage: fetch.RequestStageRequest},
			{URLPattern: "*", RequestStage: fetch.RequestStageResponse},
		}
	}
	fs := []*future{
		start(ctx, s, target.SetAutoAttach, target.SetAutoAttachParams{AutoAttach: true, WaitForDebuggerOnStart: true, Flatten: ptr(true)}),
		start(ctx, s, fetch.Enable, fetch.EnableParams{Patterns: patterns}),
	}
	if tc.s.claimAudits(tc) {
		// Issues report what the connect-src CSP refused in the renderer, before any request
		// existed for interception or the proxy to see (netpolicy.go).
		fs = append(fs, start(ctx, s, audits.Enable, cdp.Empty{}))
	}
	if frames {
		fs = append(fs,
			start(ctx, s, page.Enable, page.EnableParams{}),
			start(ctx, s, page.SetLifecycleEventsEnabled, page.SetLifecycleEventsEnabledParams{Enabled: true}),
			// The page agent is put in its isolated world as each document is
			// created, so that the first call after a navigation costs no
			// install.
			start(ctx, s, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: agentJS, WorldName: worldName, RunImmediately: ptr(true)}),
			start(ctx, s, inspector.Enable, cdp.Empty{}),
		)
	}
	// Resume in the same batch: the browser handles a session's commands in
	// order, so interception is on before the target runs, and some of the
	// commands above (Page.enable in a popup) only answer once it runs.
	fs = append(fs, start(ctx, s, runtime.RunIfWaitingForDebugger, cdp.Empty{}))
	for _, f := range fs {
		if err := f.wait(ctx, nil); err != nil {
			tc.s.b.log.Debug("setting up a target", "type", tc.typ, "err", err)
		}
	}
}

// handle receives the target's events, in order.
func (tc *targetConn) handle(ev any) {
	s := tc.s
	switch ev := ev.(type) {
	case *fetch.EventRequestPaused:
		s.onRequestPaused(tc, ev)
	case *audits.EventIssueAdded:
		s.onIssue(tc, ev.Issue)
	case *target.EventAttachedToTarget:
		sess := s.ps.p.conn.session(ev.SessionID)
		if sess != nil {
			s.attachTarget(sess, ev.TargetInfo, tc)
		}
	case *target.EventDetachedFromTarget:
		// A child went away; its frame (if any) is updated by frame events.
	case *page.EventFrameAttached:
		s.mu.Lock()
		if tc.tab != nil && tc.tab.frames[ev.FrameID] == nil {
			s.docSeq++
			tc.tab.frames[ev.FrameID] = &frameState{id: ev.FrameID, parent: ev.ParentFrameID, host: tc, doc: s.docSeq, life: map[cdp.LoaderID]map[string]bool{}}
		}
		s.mu.Unlock()
	case *page.EventFrameDetached:
		if ev.Reason == page.FrameDetachedReasonSwap {
			return // it moves to another process; the new host attaches
		}
		s.mu.Lock()
		if t := tc.tab; t != nil {
			if f := t.frames[ev.FrameID]; f != nil && f.host == tc && f != t.main {
				s.removeFrameLocked(t, f)
			}
		}
		s.notifyLocked()
		s.mu.Unlock()
	case *page.EventFrameNavigated:
		s.onFrameNavigated(tc, ev.Frame, false)
	case *page.EventDocumentOpened:
		s.onFrameNavigated(tc, ev.Frame, true)
	case *page.EventNavigatedWithinDocument:
		s.mu.Lock()
		if t := tc.tab; t != nil {
			if f := t.frames[ev.FrameID]; f != nil {
				f.url = ev.URL
			}
		}
		s.notifyLocked()
		s.mu.Unlock()
	case *page.EventLifecycleEvent:
		s.mu.Lock()
		if t := tc.tab; t != nil {
			if f := t.frames[ev.FrameID]; f != nil {
				if ev.Name == "init" {
					// A new document starts loading in the frame.
					for l := range f.life {
						if l != f.loader {
							delete(f.life, l)
						}
					}
				}
				m := f.life[ev.LoaderID]
				if m == nil {
					m = map[string]bool{}
					f.life[ev.LoaderID] = m
				}
				m[ev.Name] = true
			}
		}
		s.notifyLocked()
		s.mu.Unlock()
	case *page.EventFrameStartedNavigating:
		if ev.NavigationType == page.FrameStartedNavigatingNavigationTypeSameDocument {
			return
		}
		s.mu.Lock()
		s.navStartedLocked(tc.tab, ev.FrameID)
		s.notifyLocked()
		s.mu.Unlock()
	case *page.EventFrameRequestedNavigation:
		s.mu.Lock()
		if ev.Disposition == page.ClientNavigationDispositionCurrentTab {
			s.navStartedLocked(tc.tab, ev.FrameID)
		}
		s.notifyLocked()
		s.mu.Unlock()
	case *page.EventFrameStoppedLoading:
		s.mu.Lock()
		if t := tc.tab; t != nil && t.main != nil {
			if ev.FrameID == t.main.id {
				t.stops++
			} else if f := t.frames[ev.FrameID]; f != nil {
				f.navPending = false
			}
		}
		s.notifyLocked()
		s.mu.Unlock()
	case *page.EventWindowOpen:
		s.mu.Lock()
		if t := tc.tab; t != nil {
			t.windowOpen++
		}
		s.notifyLocked()
		s.mu.Unlock()
	case *page.EventJavascriptDialogOpening:
		s.onDialog(tc, ev)
	case *inspector.EventTargetCrashed:
		s.lose("the page's renderer process crashed")
		go s.b.disposeLost(s)
	}
}

// navStartedLocked counts a cross-document navigation requested or started
// in frame id of t: the main frame's signal, or a pending subframe load
// (an act waits for both).
func (s *Session) navStartedLocked(t *tab, id cdp.FrameID) {
	if t == nil || t.main == nil {
		return
	}
	if id == t.main.id {
		t.navSignals++
		return
	}
	if f := t.frames[id]; f != nil {
		f.navPending = true
		t.subStarted++
	}
}

// onFrameNavigated records a new document in a frame: a new epoch for the
// tab when it is the main frame, a new document generation otherwise.
func (s *Session) onFrameNavigated(tc *targetConn, fr *cdp.Frame, opened bool) {
	if fr == nil || tc.tab == nil {
		return
	}
	t := tc.tab
	s.mu.Lock()
	f := t.frames[fr.ID]
	if f == nil {
		f = &frameState{id: fr.ID, parent: fr.ParentID, life: map[cdp.LoaderID]map[string]bool{}}
		t.frames[fr.ID] = f
	}
	f.host = tc
	s.docSeq++
	f.doc = s.docSeq
	f.world = 0
	if u := fr.URL + fr.URLFragment; u != "" {
		f.url = u
	}
	if !opened {
		f.loader = fr.LoaderID
	}
	isMain := f == t.main
	var ev Event
	if isMain {
		t.epoch = ids.New(ids.DocumentEpoch)
		t.commits++
		// Frames of the old document are gone (their detach events may
		// come later).
		for id, cf := range t.frames {
			if cf != t.main {
				delete(t.frames, id)
			}
		}
		ev = Event{Type: EventNavigationCommitted, ContextID: t.id, EpochID: t.epoch, URL: redactURL(f.url)}
		if opened {
			ev.Data = map[string]any{"document_replaced": true}
		}
	} else {
		// Descendants of the frame belonged to its old document.
		s.removeDescendantsLocked(t, f)
	}
	s.reg.purgeFrame(t, f)
	s.notifyLocked()
	// A Navigate waiting on this document looks the world up itself once it has its answer: the
	// browser answers a page session's commands in order, so a lookup sent now would hold
	// navigate's title read back until the renderer is idle after load (docs/benchmarks.md).
	byNavigate := isMain && t.navigating
	s.mu.Unlock()
	if isMain {
		s.emit(ev)
	}
	if !byNavigate {
		s.prepareWorld(t, f)
	}
}

// prepareWorld looks the frame's agent world up in the background, so that the next operation
// finds it ready.
func (s *Session) prepareWorld(t *tab, f *frameState) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = s.worldOf(ctx, t, f)
	}()
}

func (s *Session) removeFrameLocked(t *tab, f *frameState) {
	s.removeDescendantsLocked(t, f)
	delete(t.frames, f.id)
}

func (s *Session) removeDescendantsLocked(t *tab, f *frameState) {
	for id, cf := range t.frames {
		if cf.parent == f.id && cf != f {
			s.removeDescendantsLocked(t, cf)
			delete(t.frames, id)
		}
	}
}

// onTabGone handles a page target that closed (window.close, crash).
func (s *Session) onTabGone(tc *targetConn) {
	s.mu.Lock()
	t := tc.tab
	if t == nil || t.closed {
		s.mu.Unlock()
		return
	}
	t.closed = true
	delete(s.tabs, t.id)
	delete(s.byTarget, t.targetID)
	if s.front == t {
		s.front = nil
	}
	s.notifyLocked()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		s.emit(Event{Type: EventContextClosed, ContextID: t.id})
	}
}

// onDialog answers a JavaScript dialog at once (default: dismiss; a
// beforeunload during navigate: accept) so that it never wedges the page.
func (s *Session) onDialog(tc *targetConn, ev *page.EventJavascriptDialogOpening) {
	t := tc.tab
	if t == nil {
		fireCmd(tc.sess, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		return
	}
	s.mu.Lock()
	accept := t.dialogMode == "accept" || (ev.Type == page.DialogTypeBeforeunload && t.navigating)
	prompt := t.promptText
	d := Dialog{Type: string(ev.Type), Message: clipString(ev.Message, 2000), Accepted: accept}
	t.dialogs = append(t.dialogs, d)
	s.notifyLocked()
	s.mu.Unlock()
	p := page.HandleJavaScriptDialogParams{Accept: accept}
	if accept && ev.Type == page.DialogTypePrompt {
		p.PromptText = prompt
	}
	fireCmd(tc.sess, page.HandleJavaScriptDialog, p)
	s.emit(Event{Type: EventDialogHandled, ContextID: t.id, URL: redactURL(ev.URL), Data: map[string]any{
		"dialog_type": d.Type, "message": d.Message, "accepted": d.Accepted, // the spelling of DialogHandledData
	}})
}

// lose marks the session lost (its browser or renderer crashed).
func (s *Session) lose(why string) {
	s.mu.Lock()
	if s.lost != "" || s.closed {
		s.mu.Unlock()
		return
	}
	s.lost = why
	s.notifyLocked()
	s.mu.Unlock()
	s.endLife()
	s.b.log.Warn("browser session lost", "session", s.ID(), "reason", why)
	s.emit(Event{Type: EventSessionLost, Data: map[string]any{"reason": why}})
}

// disposeLost frees the browser context of a lost session (its renderer
// crashed; the browser lives on). The session stays listed until Close.
func (b *Browser) disposeLost(s *Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = call(ctx, s.ps.p.conn.root, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: s.bctx})
}

// Close closes the session: its browser context and every tab in it.
// Closing a closed session does nothing.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	s.b.forget(s)
	s.markClosed()
	s.dispose(ctx)
	return nil
}

// markClosed marks the session closed and stops its event delivery.
func (s *Session) markClosed() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.notifyLocked()
	s.mu.Unlock()
	s.endLife()
	close(s.evStop)
}

// dispose removes the browser context and the session's files.
func (s *Session) dispose(ctx context.Context) {
	s.markClosed()
	s.b.forget(s)
	select {
	case <-s.ps.p.conn.done:
	default:
		if _, err := call(ctx, s.ps.p.conn.root, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: s.bctx}); err != nil {
			s.b.log.Debug("disposing a browser context", "err", err)
		}
	}
	s.cleanupFiles()
}

// cleanupFiles removes the session's files and stops its egress proxy (which ends any tunnel a
// page kept open).
func (s *Session) cleanupFiles() {
	if s.proxy != nil {
		_ = s.proxy.Close()
	}
	_ = os.RemoveAll(filepath.Dir(s.dlDir))
}

// ---- events to the caller ----

// emit queues an event for the caller's onEvent.
func (s *Session) emit(ev Event) {
	s.evMu.Lock()
	if s.muted && ev.Type != EventSessionLost {
		s.evMu.Unlock()
		return
	}
	if ev.Type == EventRequestBlocked && !s.admitBlockedLocked(&ev) {
		s.evMu.Unlock()
		return
	}
	if s.held != nil && ev.Type != EventSessionLost {
		*s.held = append(*s.held, ev)
		s.evMu.Unlock()
		return
	}
	s.evQueue = append(s.evQueue, ev)
	s.evMu.Unlock()
	select {
	case s.evWake <- struct{}{}:
	default:
	}
}

// A hostile page can try thousands of refused requests a second; each would be a row in the
// task's history. At most blockedBurst request.blocked events per blockedWindow are reported; the
// next one reported after a window says how many were left out (data.suppressed).
const (
	blockedBurst  = 100
	blockedWindow = 10 * time.Second
)

// admitBlockedLocked tells whether a request.blocked event is reported; s.evMu is held.
func (s *Session) admitBlockedLocked(ev *Event) bool {
	now := time.Now()
	if now.Sub(s.blkStart) >= blockedWindow {
		if s.blkDropped > 0 {
			if ev.Data == nil {
				ev.Data = map[string]any{}
			}
			ev.Data["suppressed"] = s.blkDropped
		}
		s.blkStart, s.blkN, s.blkDropped = now, 0, 0
	}
	if s.blkN >= blockedBurst {
		s.blkDropped++
		return false
	}
	s.blkN++
	return true
}

func (s *Session) eventLoop() {
	for {
		select {
		case <-s.evWake:
		case <-s.evStop:
			s.flushEvents()
			return
		}
		s.flushEvents()
	}
}

func (s *Session) flushEvents() {
	for {
		s.evMu.Lock()
		q := s.evQueue
		s.evQueue = nil
		s.evMu.Unlock()
		if len(q) == 0 {
			return
		}
		s.mu.Lock()
		fn := s.onEvent
		s.mu.Unlock()
		if fn == nil {
			continue
		}
		for _, ev := range q {
			func() {
				defer func() {
					if r := recover(); r != nil {
						s.b.log.Error("browser event callback panicked", "panic", fmt.Sprint(r))
					}
				}()
				fn(ev)
			}()
		}
	}
}

// ---- helpers ----

func clipString(s string, n int) string { return pagekit.Clip(s, n) }

// redactURL returns u without userinfo, query and fragment, for events and
// errors (a query string may carry secrets).
func redactURL(u string) string { return pagekit.RedactURL(u) }
