package firefox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// The operations of the use-cases' browser session (app.BrowserSession, adapted in the
// composition root as the CDP adapter's are), with the CDP adapter's semantics on the session's
// one tab: the same page agent, snapshot shape and node handles (pagekit), a new epoch and stale
// handles after every navigation, actionability checks before input, and input sent as a user's
// through input.performActions. What this adapter does not do yet is refused, never substituted:
// the capabilities it lacks answer 501 before they reach it (daemon's registry), and the rest
// answers ErrUnsupported, an invalid_request naming what (docs/engines.md lists them).

// ErrUnsupported is returned for a request this adapter cannot carry out (it names what).
var ErrUnsupported = fmt.Errorf("%w: not supported on the firefox engine yet", page.ErrInvalidRequest)

// commandTimeout bounds a command whose context has no deadline (CONTRACT: 30 s).
const commandTimeout = 30 * time.Second

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// DefaultContext is the ctx_ id of the session's tab.
func (s *Session) DefaultContext() string { return s.ctxID }

// checkContext refuses a context id that is not the session's tab.
func (s *Session) checkContext(id string) error {
	if id != "" && id != s.ctxID {
		return fmt.Errorf("%w: %s", page.ErrNoSuchContext, id)
	}
	return nil
}

// mapErr turns a lost connection into page.ErrSessionLost.
func (s *Session) mapErr(err error) error {
	if errors.Is(err, bidi.ErrClosed) {
		return fmt.Errorf("%w: the browser connection closed", page.ErrSessionLost)
	}
	var be *bidi.Error
	if errors.As(err, &be) && be.Code == "no such frame" {
		return fmt.Errorf("%w: the session's tab is gone", page.ErrSessionLost)
	}
	return err
}

// readiness is the BiDi wait of a navigation's wait_until: BiDi has no commit wait, so commit
// waits for the document to be parsed (a stronger wait, never a weaker one).
func readiness(waitUntil string) (bidi.BrowsingContextReadinessState, error) {
	switch waitUntil {
	case page.WaitCommit, page.WaitDOMContentLoaded:
		return bidi.BrowsingContextReadinessStateInteractive, nil
	case "", page.WaitLoad, page.WaitNetworkIdle:
		return bidi.BrowsingContextReadinessStateComplete, nil
	}
	return "", fmt.Errorf("%w: wait_until must be commit, domcontentloaded, load or networkidle", page.ErrInvalidRequest)
}

// networkIdle waits (within ctx) until the document has started no resource load for 500 ms.
const networkIdleJS = `(async () => { let n = -1, since = Date.now();
  while (Date.now() - since < 500) { const m = performance.getEntriesByType('resource').length;
    if (m !== n) { n = m; since = Date.now(); } await new Promise(r => setTimeout(r, 50)); } return ""; })()`

// Navigate loads the URL in the session's tab. A URL the policy does not allow is refused with
// *page.OriginNotAllowedError before anything loads; the egress proxy refuses what a redirect or
// the page itself asks for elsewhere.
func (s *Session) Navigate(ctx context.Context, req page.NavigateRequest) (*page.NavigateResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if t, err := s.route(req.ContextID, ""); err != nil {
		return nil, err
	} else if t != s {
		return t.Navigate(ctx, req)
	}
	s.setFront(s)
	wait, err := readiness(req.WaitUntil)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%w: url must be an absolute http or https URL", page.ErrInvalidRequest)
	}
	if s.pol != nil && !s.pol.AllowsURL(u) {
		// No request.blocked event, as on Chromium: nothing was requested, and the refusal is the
		// command's recorded answer (RequestBlockedData has no layer for it).
		return nil, &page.OriginNotAllowedError{URL: pagekit.RedactURL(req.URL)}
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = commandTimeout
	}
	ctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	s.actMu.Lock()
	defer s.actMu.Unlock()
	reached, err := s.load(ctx, req.URL, wait)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &page.ActionTimeoutError{Reason: "the page did not load in time"}
		}
		if err := s.check(); err != nil {
			return nil, err
		}
		var be *bidi.Error
		if errors.As(err, &be) {
			return nil, &page.NavigationError{URL: pagekit.RedactURL(req.URL), Reason: navReason(be.Message)}
		}
		return nil, s.mapErr(err)
	}
	s.mu.Lock()
	s.docs.url = pagekit.RedactURL(reached)
	s.mu.Unlock()
	// A redirect elsewhere: the egress proxy refused the hop and Firefox shows its error page at
	// the refused URL, which BiDi reports as loaded. Refused, as the CDP adapter answers it.
	if ru, err := url.Parse(reached); err == nil && s.pol != nil && !s.pol.AllowsURL(ru) {
		return nil, &page.OriginNotAllowedError{URL: pagekit.RedactURL(reached)}
	}
	if req.WaitUntil == page.WaitNetworkIdle {
		if _, err := s.evaluate(ctx, networkIdleJS, true); err != nil && ctx.Err() != nil {
			return nil, &page.ActionTimeoutError{Reason: "the network did not become idle in time"}
		}
	}
	return s.current(ctx)
}

// navReason is the browser's reason for a failed navigation, without anything of the page.
func navReason(msg string) string {
	if i := strings.Index(msg, "NS_"); i >= 0 {
		end := strings.IndexAny(msg[i:], " \n:,)")
		if end < 0 {
			end = len(msg) - i
		}
		return msg[i : i+end]
	}
	return "the page could not be loaded"
}

// current is the tab's document now: its epoch, URL and title.
func (s *Session) current(ctx context.Context) (*page.NavigateResult, error) {
	var inf struct {
		U string `json:"u"`
		T string `json:"t"`
	}
	if err := s.Agent(ctx, &inf, "info"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs.url = pagekit.RedactURL(inf.U)
	return &page.NavigateResult{ContextID: s.ctxID, EpochID: s.docs.epoch, URL: inf.U, Title: inf.T}, nil
}

// contexts lists the session's browsing contexts: its tabs, the first one first; this tab's
// URL and title are res's.
func (s *Session) contexts(res *page.NavigateResult) []page.ContextInfo {
	tabs := s.tabs()
	out := make([]page.ContextInfo, 0, len(tabs))
	for _, t := range tabs {
		if t == s {
			out = append(out, page.ContextInfo{ContextID: s.ctxID, URL: res.URL, Title: res.Title, Opener: s.opener})
			continue
		}
		t.mu.Lock()
		u := t.docs.url
		t.mu.Unlock()
		out = append(out, page.ContextInfo{ContextID: t.ctxID, URL: u, Opener: t.opener})
	}
	return out
}

// snapResult is the agent's snapshot.
type snapResult struct {
	U     string           `json:"u"`
	T     string           `json:"t"`
	N     []pagekit.Record `json:"n"`
	Tr    bool             `json:"tr"`
	Stale bool             `json:"stale"`
	Wf    int              `json:"wf"` // the within node is an iframe: its frame's nodes are the snapshot
}

const defaultMaxNodes = 5000

// Observe returns a snapshot of the tab's document: the same nodes, handles and shape the CDP
// adapter answers. Budgets, cursors and deltas are the observation keeper's, which the engine
// registry puts in front of every engine's sessions (ADR 0028): the adapter refuses them itself.
func (s *Session) Observe(ctx context.Context, req page.ObserveRequest) (*page.Snapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if t, err := s.route(req.ContextID, req.Within); err != nil {
		return nil, err
	} else if t != s {
		return t.Observe(ctx, req)
	}
	mode := req.Mode
	switch mode {
	case "":
		mode = page.ModeInteractive
	case page.ModeInteractive, page.ModeFull:
	default:
		return nil, fmt.Errorf("%w: mode must be interactive or full", page.ErrInvalidRequest)
	}
	if req.Since != "" || req.Cursor != "" || req.MaxBytes != 0 {
		return nil, fmt.Errorf("%w: observe with since, cursor or max_bytes", ErrUnsupported)
	}
	maxNodes := req.MaxNodes
	if maxNodes <= 0 {
		maxNodes = defaultMaxNodes
	}
	ctx, cancel := withTimeout(ctx, commandTimeout)
	defer cancel()
	opts := map[string]any{"mode": mode, "max": maxNodes}
	doc := ""
	if req.Within != "" {
		h, err := s.lookup(req.Within)
		if err != nil {
			return nil, err
		}
		opts["within"], doc = h.idx, h.doc
	}
	tree, err := s.tree(ctx)
	if err != nil {
		return nil, err
	}
	frame := s.frameOf(doc)
	nodes, res, ran, err := s.snapFrame(ctx, tree, frame, doc, opts)
	if err != nil {
		return nil, err
	}
	if frame != s.top {
		// Within a frame's node: the URL and title are still the tab's.
		var inf struct {
			U string `json:"u"`
			T string `json:"t"`
		}
		if ran, err = s.agentIn(ctx, "", &inf, "info"); err != nil {
			return nil, err
		}
		res.U, res.T = inf.U, inf.T
	}
	s.mu.Lock()
	if ran != s.docs.doc {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the document changed during observe", page.ErrStaleNodeHandle)
	}
	epoch := s.docs.epoch
	s.docs.url = pagekit.RedactURL(res.U)
	s.mu.Unlock()
	n := 0
	nodes, truncated := pagekit.TrimNodes(nodes, maxNodes, &n, res.Tr)
	if nodes == nil {
		nodes = []page.Node{}
	}
	wire, _ := json.Marshal(nodes)
	snap := &page.Snapshot{ContextID: s.ctxID, EpochID: epoch, URL: res.U, Title: res.T, Nodes: nodes,
		ObservationID: pagekit.ObservationID(), ApproxTokens: (len(wire) + 3) / 4, Truncated: truncated}
	snap.Contexts = s.contexts(&page.NavigateResult{URL: res.U, Title: res.T})
	return snap, nil
}

// lookup finds a handle of the session.
func (s *Session) lookup(h string) (handle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.docs.lookup(h)
}

func validQuery(q page.Query) error { return pagekit.ValidQuery(q) }

// QueryNodes finds the nodes matching the query, best match first (the agent's ranking).
func (s *Session) QueryNodes(ctx context.Context, req page.QueryRequest) (*page.QueryResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if t, err := s.route(req.ContextID, req.Query.Within); err != nil {
		return nil, err
	} else if t != s {
		return t.QueryNodes(ctx, req)
	}
	if err := validQuery(req.Query); err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx, commandTimeout)
	defer cancel()
	limit := req.Limit
	if limit <= 0 {
		limit = 50
	}
	nodes, epoch, err := s.query(ctx, req.Query, limit)
	if err != nil {
		return nil, err
	}
	return &page.QueryResult{EpochID: epoch, Nodes: nodes}, nil
}

// query runs the query in the tab's document and in its frames' (within a node: in its document
// and the frames inside it) and ranks the matches as the CDP adapter does: by score, then frame
// order, then document order.
func (s *Session) query(ctx context.Context, q page.Query, limit int) ([]page.Node, string, error) {
	a := pagekit.NewQueryArgs(q, limit)
	doc := ""
	if q.Within != "" {
		h, err := s.lookup(q.Within)
		if err != nil {
			return nil, "", err
		}
		a.Within, doc = h.idx, h.doc
	}
	tree, err := s.tree(ctx)
	if err != nil {
		return nil, "", err
	}
	first := s.frameOf(doc)
	type match struct {
		node  page.Node
		score float64
		order int
	}
	type result struct {
		N     []pagekit.Record `json:"n"`
		Stale bool             `json:"stale"`
	}
	run := func(frame bidi.BrowsingContextBrowsingContext, doc string, a pagekit.QueryArgs) (result, string, error) {
		var res result
		ran, err := s.agentAt(ctx, frame, doc, &res, "query", a)
		if err == nil && res.Stale {
			err = fmt.Errorf("%w: the within node is no longer in the document", page.ErrStaleNodeHandle)
		}
		return res, ran, err
	}
	res0, ran0, err := run(first, doc, a)
	if err != nil {
		return nil, "", err
	}
	frames := s.framesFor(ctx, tree, first, ran0, a.Within)
	results := make([]result, len(frames))
	rans := make([]string, len(frames))
	results[0], rans[0] = res0, ran0
	// In turn, as a snapshot reads frames (frames.go): faster on Firefox than in parallel.
	for i, f := range frames[1:] {
		sub := a
		sub.Within = 0
		res, ran, err := run(f, "", sub)
		if err != nil {
			s.debug("query in a frame", err)
			continue
		}
		results[i+1], rans[i+1] = res, ran
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []match
	for fi, res := range results {
		for i, r := range res.N {
			r.C = nil
			n := pagekit.Nodes([]pagekit.Record{r}, func(idx int) string { return s.docs.issue(rans[fi], idx) }, nil)[0]
			all = append(all, match{node: n, score: r.Sc, order: fi<<20 | i})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].score != all[j].score {
			return all[i].score > all[j].score
		}
		return all[i].order < all[j].order
	})
	if len(all) > limit {
		all = all[:limit]
	}
	top := ran0
	if first != s.top {
		top = s.docs.doc // within a frame's node: the tab's document is the one it was issued under
	}
	if top != s.docs.doc {
		return nil, "", fmt.Errorf("%w: the document changed during the query", page.ErrStaleNodeHandle)
	}
	out := make([]page.Node, 0, len(all))
	for _, m := range all {
		out = append(out, m.node)
	}
	return out, s.docs.epoch, nil
}

// Screenshot returns a PNG of the tab: its viewport, the whole page, or one node's box.
func (s *Session) Screenshot(ctx context.Context, req page.ScreenshotRequest) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if t, err := s.route(req.ContextID, req.NodeID); err != nil {
		return nil, err
	} else if t != s {
		return t.Screenshot(ctx, req)
	}
	if req.FullPage && req.NodeID != "" {
		return nil, fmt.Errorf("%w: give full_page or node_id, not both", page.ErrInvalidRequest)
	}
	ctx, cancel := withTimeout(ctx, commandTimeout)
	defer cancel()
	p := bidi.BrowsingContextCaptureScreenshotParameters{Context: s.top}
	switch {
	case req.FullPage:
		p.Origin = "document"
	case req.NodeID != "":
		h, err := s.lookup(req.NodeID)
		if err != nil {
			return nil, err
		}
		var box struct {
			St string  `json:"st"`
			X  float64 `json:"x"`
			Y  float64 `json:"y"`
			W  float64 `json:"w"`
			H  float64 `json:"h"`
		}
		if _, err := s.agentIn(ctx, h.doc, &box, "box", h.idx); err != nil {
			return nil, err
		}
		switch box.St {
		case "ok":
		case "hidden":
			return nil, &page.ActionTimeoutError{Reason: "the node has no visible box"}
		default:
			return nil, fmt.Errorf("%w: the node is no longer in the document", page.ErrStaleNodeHandle)
		}
		bx, by, _, err := s.toTop(ctx, h.doc, box.X, box.Y, false)
		if err != nil {
			return nil, err
		}
		x, y, w, hh := math.Floor(bx), math.Floor(by), math.Ceil(box.W), math.Ceil(box.H)
		p.Clip = &bidi.BrowsingContextClipRectangle{Type: "box", X: &x, Y: &y, Width: &w, Height: &hh}
	}
	res, err := s.e.c.BrowsingContextCaptureScreenshot(ctx, p)
	if err != nil {
		return nil, s.mapErr(fmt.Errorf("firefox: screenshot: %w", err))
	}
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		return nil, fmt.Errorf("firefox: screenshot: %w", err)
	}
	return png, nil
}

// CaptureMHTML is not something Firefox can do (no MHTML writer): the registry leaves
// mhtml_evidence out of this engine's capabilities, so the use-cases answer 501 before this.
func (s *Session) CaptureMHTML(context.Context, string) ([]byte, error) {
	return nil, fmt.Errorf("%w: MHTML evidence", ErrUnsupported)
}
