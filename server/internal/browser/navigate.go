package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
)

// lifecycleCommit stands for "the new document committed": no lifecycle
// event is awaited after Page.navigate's commit.
const lifecycleCommit = "commit"

// lifecycleName maps wait_until to Chromium's lifecycle event.
func lifecycleName(waitUntil string) (string, error) {
	switch waitUntil {
	case WaitCommit:
		return lifecycleCommit, nil
	case "", WaitLoad:
		return "load", nil
	case WaitDOMContentLoaded:
		return "DOMContentLoaded", nil
	case WaitNetworkIdle:
		return "networkIdle", nil
	}
	return "", fmt.Errorf("%w: wait_until must be commit, domcontentloaded, load or networkidle", ErrInvalidRequest)
}

// Navigate loads the URL in the browsing context and returns once the new
// document reaches WaitUntil. A URL the policy does not allow (directly or
// by a redirect) is refused with *OriginNotAllowedError and nothing of it
// is loaded; the context keeps its document.
func (s *Session) Navigate(ctx context.Context, req NavigateRequest) (*NavigateResult, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	life, err := lifecycleName(req.WaitUntil)
	if err != nil {
		return nil, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	u, err := url.Parse(strings.TrimSpace(req.URL))
	if err != nil || (u.Scheme != "about" && (u.Host == "" || !u.IsAbs())) {
		return nil, fmt.Errorf("%w: url must be an absolute http(s) URL or about:blank", ErrInvalidRequest)
	}
	s.mu.Lock()
	pol := s.pol
	s.mu.Unlock()
	if !pol.AllowsURL(u) {
		return nil, &OriginNotAllowedError{URL: redactURL(u.String())}
	}

	s.actMu.Lock()
	defer s.actMu.Unlock()
	t, err := s.readyTab(ctx, req.ContextID)
	if err == nil && s.stopped(ctx) {
		err = ctx.Err()
	}
	if err != nil {
		if s.stopped(ctx) {
			return nil, &StoppedError{} // nothing was requested
		}
		return nil, err
	}
	s.mu.Lock()
	blocked0 := t.blocked
	commits0 := t.commits
	t.navigating = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		t.navigating = false
		main := t.main
		s.mu.Unlock()
		s.prepareWorld(t, main) // left to here by the commit (onFrameNavigated)
	}()

	// Page.navigate answers once the navigation commits or fails. Its reply is awaited apart from
	// ctx, so that a navigation stopped half-way (cancel_task, timeout) can still learn whether it
	// had committed.
	replied := make(chan navReply, 1)
	wctx, stopWaiting := context.WithCancel(s.life)
	defer stopWaiting()
	f := start(ctx, t.page.sess, page.Navigate, page.NavigateParams{URL: u.String()})
	go func() {
		var r page.NavigateResult
		err := f.wait(wctx, &r)
		replied <- navReply{res: r, err: err}
	}()
	var res page.NavigateResult
	select {
	case r := <-replied:
		res, err = r.res, r.err
	case <-ctx.Done():
		if derr := s.deadErr(); derr != nil {
			return nil, derr
		}
		return nil, s.stopNavigation(ctx, t, replied, commits0, timeout)
	}
	if err != nil {
		if derr := s.deadErr(); derr != nil {
			return nil, derr
		}
		if s.stopped(ctx) {
			// Stopped as the request was being sent: whether it reached the browser is unknown.
			fireCmd(t.page.sess, page.StopLoading, cdp.Empty{})
			return nil, &StoppedError{Started: true, Committed: true}
		}
		if ctx.Err() != nil {
			return nil, &ActionTimeoutError{Reason: fmt.Sprintf("navigation did not start within %s", timeout)}
		}
		return nil, s.mapErr(err)
	}
	if res.ErrorText != "" {
		s.mu.Lock()
		blocked, burl := t.blocked != blocked0, t.blockedURL
		s.mu.Unlock()
		if blocked {
			return nil, &OriginNotAllowedError{URL: burl}
		}
		return nil, &NavigationError{URL: redactURL(u.String()), Reason: res.ErrorText}
	}
	if res.LoaderID == "" {
		// A same-document navigation (fragment): no new document, no new epoch.
		return s.navResult(ctx, t)
	}
	// reached reports (under s.mu) whether the new document reached the lifecycle event name, or
	// the wait is over otherwise (the tab closed, the document was refused).
	reached := func(name string) bool {
		if t.closed || (t.blocked != blocked0 && t.commits == commits0) {
			return true
		}
		m := t.main
		return m.loader == res.LoaderID && (name == lifecycleCommit || m.life[res.LoaderID][name])
	}
	// Waiting for load, the title is asked for as the document is parsed (DOMContentLoaded): the
	// browser process answers a call made right after load 8-23 ms late (docs/benchmarks.md),
	// one made before it in the meantime.
	var history *future
	if life == "load" {
		err = s.waitFor(ctx, func() bool { return reached("DOMContentLoaded") || reached(life) })
		if err == nil {
			history = start(ctx, t.page.sess, page.GetNavigationHistory, cdp.Empty{})
		}
	}
	if err == nil {
		err = s.waitFor(ctx, func() bool { return reached(life) })
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, &ActionTimeoutError{Reason: fmt.Sprintf("the page did not reach %s within %s", waitName(req.WaitUntil), timeout)}
		}
		if s.stopped(ctx) {
			// The new document committed (Page.navigate answered without an error); what is
			// still loading stops.
			fireCmd(t.page.sess, page.StopLoading, cdp.Empty{})
			return nil, &StoppedError{Started: true, Committed: true}
		}
		return nil, err
	}
	s.mu.Lock()
	closed := t.closed
	blocked, burl := t.blocked != blocked0 && t.commits == commits0, t.blockedURL
	s.mu.Unlock()
	if closed {
		return nil, ErrNoSuchContext
	}
	if blocked {
		return nil, &OriginNotAllowedError{URL: burl}
	}
	if life == lifecycleCommit {
		return s.navResult(ctx, t) // the document may not be parsed yet
	}
	return s.loadedResult(ctx, t, history)
}

// navReply is the browser's answer to Page.navigate.
type navReply struct {
	res page.NavigateResult
	err error
}

// stopGrace bounds how long a stopped navigation waits for the browser to confirm that it was
// aborted before commit.
const stopGrace = time.Second

// stopNavigation stops a navigation whose context ended before Page.navigate answered:
// Page.stopLoading aborts it in the browser, so nothing of it goes on loading (and the server it
// was waiting for sees its connection closed). The browser then answers Page.navigate with
// net::ERR_ABORTED if the navigation had not committed.
func (s *Session) stopNavigation(ctx context.Context, t *tab, replied <-chan navReply, commits0 int, timeout time.Duration) error {
	fireCmd(t.page.sess, page.StopLoading, cdp.Empty{})
	if !s.stopped(ctx) {
		return &ActionTimeoutError{Reason: fmt.Sprintf("navigation did not start within %s", timeout)}
	}
	committed := true
	select {
	case r := <-replied:
		committed = r.err != nil || r.res.ErrorText != "net::ERR_ABORTED"
	case <-time.After(stopGrace):
	}
	s.mu.Lock()
	if t.commits != commits0 {
		committed = true
	}
	s.mu.Unlock()
	return &StoppedError{Started: true, Committed: committed}
}

// stopped reports whether ctx ended because the caller cancelled it (as cancel_task does) rather
// than by its deadline or because the session was lost or closed.
func (s *Session) stopped(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.Canceled) && s.deadErr() == nil
}

func waitName(w string) string {
	if w == "" {
		return WaitLoad
	}
	return w
}

// loadedResult answers a navigation that reached its load state from what the browser process
// knows: the frame's URL from its navigation events and the title of its navigation entry. A call
// into the page's renderer, still busy right after load, would be answered only once it is idle
// (about a third of the benchmark page's navigate). When the entry is not this document's, or
// has no title yet, the page agent is asked (navResult).
func (s *Session) loadedResult(ctx context.Context, t *tab, history *future) (*NavigateResult, error) {
	s.mu.Lock()
	out := &NavigateResult{ContextID: t.id, EpochID: t.epoch, URL: t.main.url, Status: t.main.status}
	doc := t.main.doc
	s.mu.Unlock()
	if history == nil {
		history = start(ctx, t.page.sess, page.GetNavigationHistory, cdp.Empty{})
	}
	h := new(page.GetNavigationHistoryResult)
	err := history.wait(ctx, h)
	if err != nil || h.CurrentIndex < 0 || int(h.CurrentIndex) >= len(h.Entries) {
		return s.navResult(ctx, t)
	}
	e := h.Entries[h.CurrentIndex]
	s.mu.Lock()
	same := t.main.doc == doc && t.main.url == out.URL && t.epoch == out.EpochID
	s.mu.Unlock()
	if !same || e.URL != out.URL || e.Title == "" {
		return s.navResult(ctx, t)
	}
	out.Title = e.Title
	return out, nil
}

func (s *Session) navResult(ctx context.Context, t *tab) (*NavigateResult, error) {
	s.mu.Lock()
	out := &NavigateResult{ContextID: t.id, EpochID: t.epoch, URL: t.main.url, Status: t.main.status}
	s.mu.Unlock()
	var inf struct {
		U string `json:"u"`
		T string `json:"t"`
	}
	err := s.inFrame(ctx, t, t.main, func(w *world) error { return s.eval(ctx, w, agentCall("info"), false, &inf) })
	if err == nil {
		out.URL, out.Title = inf.U, inf.T
	}
	s.mu.Lock()
	out.EpochID = t.epoch
	s.mu.Unlock()
	return out, nil
}
