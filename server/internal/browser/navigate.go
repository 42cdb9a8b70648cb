package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chromedp/cdproto/page"
)

// lifecycleName maps wait_until to Chromium's lifecycle event.
func lifecycleName(waitUntil string) (string, error) {
	switch waitUntil {
	case "", WaitLoad:
		return "load", nil
	case WaitDOMContentLoaded:
		return "DOMContentLoaded", nil
	case WaitNetworkIdle:
		return "networkIdle", nil
	}
	return "", fmt.Errorf("%w: wait_until must be load, domcontentloaded or network_idle", ErrInvalidRequest)
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
	if err != nil {
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
		s.mu.Unlock()
	}()

	res, err := call(ctx, t.page.sess, page.Navigate, page.NavigateParams{URL: u.String()})
	if err != nil {
		if derr := s.deadErr(); derr != nil {
			return nil, derr
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
	// Read URL and title as soon as the document is parsed, while the wait
	// for load goes on.
	type info struct {
		u, t string
		doc  uint64
		err  error
	}
	early := make(chan info, 1)
	go func() {
		var doc uint64
		err := s.waitFor(ctx, func() bool {
			m := t.main
			doc = m.doc
			return t.closed || (m.loader == res.LoaderID && (m.life[res.LoaderID]["DOMContentLoaded"] || m.life[res.LoaderID]["load"]))
		})
		if err != nil {
			early <- info{err: err}
			return
		}
		var inf struct {
			U string `json:"u"`
			T string `json:"t"`
		}
		err = s.inFrame(ctx, t, t.main, func(w *world) error { return s.eval(ctx, w, agentCall("info"), false, &inf) })
		early <- info{u: inf.U, t: inf.T, doc: doc, err: err}
	}()
	err = s.waitFor(ctx, func() bool {
		if t.closed {
			return true
		}
		if t.blocked != blocked0 && t.commits == commits0 {
			return true
		}
		m := t.main
		return m.loader == res.LoaderID && m.life[res.LoaderID][life]
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, &ActionTimeoutError{Reason: fmt.Sprintf("the page did not reach %s within %s", waitName(req.WaitUntil), timeout)}
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
	select {
	case inf := <-early:
		s.mu.Lock()
		out := &NavigateResult{ContextID: t.id, EpochID: t.epoch, URL: inf.u, Title: inf.t, Status: t.main.status}
		same := inf.err == nil && inf.doc == t.main.doc
		s.mu.Unlock()
		if same {
			return out, nil
		}
	case <-ctx.Done():
	}
	return s.navResult(ctx, t)
}

func waitName(w string) string {
	if w == "" {
		return WaitLoad
	}
	return w
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
