package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/storage"
	"github.com/chromedp/cdproto/target"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
)

// Checkpoints: the session's restorable state.
//
// ExportState reads the cookies of the session's browser context, the local
// storage of every http(s) origin its frames show, and per tab the URL,
// session storage and viewport. RestoreState writes that into a fresh
// session: cookies through the Storage domain; Web Storage by loading each
// origin once in the primary tab with a document fulfilled by the session
// itself (an empty page: nothing reaches the network, no page script runs)
// and writing the items there; then it navigates the primary tab to the
// checkpoint's URL, which is a real navigation under the policy with a new
// epoch. The other tabs (popups) are reopened after it, in their order, each
// with its own session storage and a real navigation to its URL; they get
// new context ids and no opener (the old ids die with the old session). A
// tab whose URL the policy refuses, or whose page cannot be loaded, is left
// out and counted. Storage of origins that no frame showed when the
// checkpoint was taken (IndexedDB, Cache Storage, service workers) is not
// kept.

// seedBody is the document that stands in for an origin while its storage
// is written.
const seedBody = "<!doctype html><title></title>"

// storageRead is the expression that reads a frame's Web Storage (null for
// an area the document may not use, such as an opaque origin's).
const storageRead = `(function(){function r(a){try{var s=a();var o={};for(var i=0;i<s.length;i++){var k=s.key(i);o[k]=s.getItem(k)}return o}catch(e){return null}}` +
	`return {l:r(function(){return localStorage}),s:r(function(){return sessionStorage})}})()`

// ExportState returns the session's restorable state (see StorageState:
// it holds credentials).
func (s *Session) ExportState(ctx context.Context) (*page.StorageState, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	ctx, cancel := withDefaultTimeout(ctx, 30*time.Second)
	defer cancel()
	s.actMu.Lock()
	defer s.actMu.Unlock()

	st := &page.StorageState{Cookies: []page.Cookie{}, LocalStorage: []page.OriginStorage{}, Contexts: []page.ContextState{}}
	cs, err := call(ctx, s.ps.p.conn.root, storage.GetCookies, storage.GetCookiesParams{BrowserContextID: s.bctx})
	if err != nil {
		return nil, s.mapErr(fmt.Errorf("reading cookies: %w", err))
	}
	for _, c := range cs.Cookies {
		pc := page.Cookie{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path,
			HTTPOnly: c.HTTPOnly, Secure: c.Secure, SameSite: string(c.SameSite)}
		if !c.Session && c.Expires > 0 {
			pc.Expires = c.Expires
		}
		st.Cookies = append(st.Cookies, pc)
	}
	sort.Slice(st.Cookies, func(i, j int) bool {
		a, b := st.Cookies[i], st.Cookies[j]
		return a.Domain+"\x00"+a.Path+"\x00"+a.Name < b.Domain+"\x00"+b.Path+"\x00"+b.Name
	})

	if err := s.awaitOpeningPopups(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	tabs := make([]*tab, 0, len(s.tabOrder))
	for _, t := range s.tabOrder {
		if !t.closed && t.main != nil {
			tabs = append(tabs, t)
		}
	}
	primary := s.defaultCtx
	s.mu.Unlock()

	local := map[string]map[string]string{}
	for _, t := range tabs {
		s.mu.Lock()
		cst := page.ContextState{ContextID: t.id, Primary: t.id == primary, URL: t.main.url, EpochID: t.epoch}
		frames := t.subtreeLocked(t.main)
		s.mu.Unlock()

		if m, err := call(ctx, t.page.sess, cdppage.GetLayoutMetrics, cdp.Empty{}); err == nil && m.CSSLayoutViewport != nil {
			cst.Width, cst.Height = int(m.CSSLayoutViewport.ClientWidth), int(m.CSSLayoutViewport.ClientHeight)
		}
		session := map[string]map[string]string{}
		for _, f := range frames {
			s.mu.Lock()
			origin := originOf(f.url)
			s.mu.Unlock()
			if !strings.HasPrefix(origin, "http://") && !strings.HasPrefix(origin, "https://") {
				continue
			}
			if _, ok := session[origin]; ok {
				continue
			}
			var r struct {
				L map[string]string `json:"l"`
				S map[string]string `json:"s"`
			}
			if err := s.inFrame(ctx, t, f, func(w *world) error { return s.eval(ctx, w, storageRead, false, &r) }); err != nil {
				if derr := s.deadErr(); derr != nil {
					return nil, derr
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				continue // a frame that went away while reading
			}
			session[origin] = r.S
			if len(r.L) > 0 && local[origin] == nil {
				local[origin] = r.L
			}
		}
		for _, o := range sortedKeys(session) {
			if len(session[o]) > 0 {
				cst.SessionStorage = append(cst.SessionStorage, page.OriginStorage{Origin: o, Items: session[o]})
			}
		}
		st.Contexts = append(st.Contexts, cst)
	}
	for _, o := range sortedKeys(local) {
		st.LocalStorage = append(st.LocalStorage, page.OriginStorage{Origin: o, Items: local[o]})
	}
	return st, nil
}

// popupOpeningWait bounds how long ExportState waits for popups still loading their first page.
const popupOpeningWait = 10 * time.Second

// awaitOpeningPopups waits, at most popupOpeningWait, until no popup of the session is still
// opening. An act reports a popup once its tab is attached, before the popup's first document
// commits; a checkpoint taken right after would read the tab's URL while it is still empty or
// about:blank, and the restore would leave the tab out (its URL is not an allowed http(s) URL).
// A popup is opening while its main frame shows no http(s) document and has not stopped loading
// once. When the wait runs out the export goes on with what the tabs show.
func (s *Session) awaitOpeningPopups(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, popupOpeningWait)
	defer cancel()
	err := s.waitFor(wctx, func() bool {
		for _, t := range s.tabOrder {
			if !t.closed && t.openingLocked() {
				return false
			}
		}
		return true
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case wctx.Err() != nil:
		return nil // still opening: exported as it is
	default:
		return err // the session closed or was lost
	}
}

// openingLocked tells whether t is a popup whose first page is still loading.
func (t *tab) openingLocked() bool {
	if t.opener == "" || t.stops > 0 {
		return false
	}
	return t.main == nil || !strings.HasPrefix(t.main.url, "http://") && !strings.HasPrefix(t.main.url, "https://")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// RestoreState writes st into this session, which must be fresh (opened
// and not yet used), and navigates its primary tab to the checkpoint's URL.
// Its cookies were set under the same policy (the caller checks the
// policy digest); storage of origins the policy does not allow is skipped
// and the final navigation is checked like any other. The events of the
// restore (its navigations, what they blocked) are not reported to the
// session's callback but returned in the result, to be recorded with the
// session.
func (s *Session) RestoreState(ctx context.Context, st *page.StorageState) (*page.RestoreResult, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	ctx, cancel := withDefaultTimeout(ctx, 60*time.Second)
	defer cancel()
	s.mu.Lock()
	pol := s.pol
	primaryID := s.defaultCtx
	s.mu.Unlock()
	var held []Event
	s.evMu.Lock()
	s.held = &held
	s.evMu.Unlock()
	defer func() {
		s.evMu.Lock()
		s.held = nil
		s.evMu.Unlock()
	}()

	out := &page.RestoreResult{}
	// The primary tab is the one marked so (else the first); the others are reopened after it.
	var primary page.ContextState
	var others []page.ContextState
	if len(st.Contexts) > 0 {
		p := 0
		for i, c := range st.Contexts {
			if c.Primary {
				p = i
				break
			}
		}
		primary = st.Contexts[p]
		others = append(append(others, st.Contexts[:p]...), st.Contexts[p+1:]...)
	}

	cookies := make([]*network.CookieParam, 0, len(st.Cookies))
	for _, c := range st.Cookies {
		p := &network.CookieParam{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path,
			Secure: c.Secure, HTTPOnly: c.HTTPOnly, SameSite: network.CookieSameSite(c.SameSite)}
		if c.Expires > 0 {
			p.Expires = cdp.TimeSinceEpoch(c.Expires)
		}
		cookies = append(cookies, p)
	}
	if len(cookies) > 0 {
		if _, err := call(ctx, s.ps.p.conn.root, storage.SetCookies, storage.SetCookiesParams{Cookies: cookies, BrowserContextID: s.bctx}); err != nil {
			return nil, s.mapErr(fmt.Errorf("setting cookies: %w", err))
		}
	}
	out.Cookies = len(cookies)

	t, err := s.readyTab(ctx, primaryID)
	if err != nil {
		return nil, err
	}
	if primary.Width > 0 && primary.Height > 0 {
		m, err := call(ctx, t.page.sess, cdppage.GetLayoutMetrics, cdp.Empty{})
		if err == nil && m.CSSLayoutViewport != nil &&
			(int(m.CSSLayoutViewport.ClientWidth) != primary.Width || int(m.CSSLayoutViewport.ClientHeight) != primary.Height) {
			if _, err := call(ctx, t.page.sess, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
				Width: int64(primary.Width), Height: int64(primary.Height), DeviceScaleFactor: 1,
			}); err != nil {
				return nil, s.mapErr(fmt.Errorf("setting the viewport: %w", err))
			}
		}
	}

	// Web Storage, one origin at a time, in a stand-in document of that origin.
	items := map[string][2]map[string]string{}
	for _, o := range st.LocalStorage {
		e := items[o.Origin]
		e[0] = o.Items
		items[o.Origin] = e
	}
	for _, o := range primary.SessionStorage {
		e := items[o.Origin]
		e[1] = o.Items
		items[o.Origin] = e
	}
	if out.Origins, err = s.seedOrigins(ctx, primaryID, pol, items); err != nil {
		return nil, err
	}

	target := primary.URL
	if target == "" || !strings.HasPrefix(target, "http") {
		target = "about:blank"
	}
	nav, err := s.Navigate(ctx, NavigateRequest{URL: target, ContextID: primaryID})
	if err != nil {
		return nil, err
	}
	out.NavigateResult = *nav
	for _, c := range others {
		nav, err := s.reopenTab(ctx, pol, c)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			s.b.log.Info("a tab of the checkpoint was not reopened", "session", s.id, "url", redactURL(c.URL), "err", err)
			out.ContextsSkipped++
		default:
			out.Contexts = append(out.Contexts, *nav)
		}
	}
	s.evMu.Lock()
	out.Events, s.held = held, nil
	s.evMu.Unlock()
	return out, nil
}

// reopenTab opens a new tab in the session for c: its session storage, then
// its URL. A tab that fails is closed again.
func (s *Session) reopenTab(ctx context.Context, pol *policy.Policy, c page.ContextState) (*NavigateResult, error) {
	if _, ok := allowedHTTP(pol, c.URL); !ok {
		return nil, fmt.Errorf("%w: the tab's URL is not an allowed http(s) URL", ErrInvalidRequest)
	}
	tr, err := call(ctx, s.ps.p.conn.root, target.CreateTarget, target.CreateTargetParams{URL: "about:blank", BrowserContextID: s.bctx})
	if err != nil {
		return nil, s.mapErr(fmt.Errorf("opening a tab: %w", err))
	}
	t, err := s.waitTab(ctx, tr.TargetID)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*NavigateResult, error) {
		fireCmd(s.ps.p.conn.root, target.CloseTarget, target.CloseTargetParams(tr))
		return nil, err
	}
	items := map[string][2]map[string]string{}
	for _, o := range c.SessionStorage {
		if len(o.Items) > 0 {
			items[o.Origin] = [2]map[string]string{nil, o.Items}
		}
	}
	if _, err := s.seedOrigins(ctx, t.id, pol, items); err != nil {
		return fail(err)
	}
	nav, err := s.Navigate(ctx, NavigateRequest{URL: c.URL, ContextID: t.id})
	if err != nil {
		return fail(err)
	}
	return nav, nil
}

// allowedHTTP parses raw and reports whether it is an http(s) URL the policy allows.
func allowedHTTP(pol *policy.Policy, raw string) (*url.URL, bool) {
	u, err := url.Parse(raw)
	return u, err == nil && (u.Scheme == "http" || u.Scheme == "https") && pol.AllowsURL(u)
}

// seedOrigins writes the local ([0]) and session ([1]) storage items of
// each origin the policy allows, in the tab, with the session's events muted;
// it returns how many origins it wrote.
func (s *Session) seedOrigins(ctx context.Context, ctxID string, pol *policy.Policy, items map[string][2]map[string]string) (int, error) {
	if len(items) == 0 {
		return 0, nil
	}
	s.setSeeding(true)
	defer s.setSeeding(false)
	n := 0
	for _, origin := range sortedKeys(items) {
		u, ok := allowedHTTP(pol, origin+"/")
		if !ok {
			continue
		}
		if err := s.seedOrigin(ctx, ctxID, u.String(), items[origin]); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// seedOrigin loads the stand-in document at seedURL in the tab and writes
// the local ([0]) and session ([1]) storage items there.
func (s *Session) seedOrigin(ctx context.Context, ctxID, seedURL string, areas [2]map[string]string) error {
	s.mu.Lock()
	s.seedURL = seedURL
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.seedURL = ""
		s.mu.Unlock()
	}()
	if _, err := s.Navigate(ctx, NavigateRequest{URL: seedURL, ContextID: ctxID}); err != nil {
		return fmt.Errorf("opening %s to restore its storage: %w", redactURL(seedURL), err)
	}
	t, err := s.readyTab(ctx, ctxID)
	if err != nil {
		return err
	}
	l, _ := json.Marshal(nonNil(areas[0]))
	ss, _ := json.Marshal(nonNil(areas[1]))
	expr := `(function(l,s){try{for(var k in l)localStorage.setItem(k,l[k]);for(var k in s)sessionStorage.setItem(k,s[k]);return true}catch(e){return false}})(` +
		string(l) + "," + string(ss) + ")"
	var ok bool
	s.actMu.Lock()
	defer s.actMu.Unlock()
	s.mu.Lock()
	main := t.main
	s.mu.Unlock()
	if err := s.inFrame(ctx, t, main, func(w *world) error { return s.eval(ctx, w, expr, false, &ok) }); err != nil {
		return s.mapErr(fmt.Errorf("writing storage: %w", err))
	}
	if !ok {
		return fmt.Errorf("the browser refused to write the storage of %s", redactURL(seedURL))
	}
	return nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// setSeeding mutes the session's events while stand-in documents load: they
// are the runtime's own doing, not the page's, and belong in no history.
func (s *Session) setSeeding(on bool) {
	s.evMu.Lock()
	s.muted = on
	s.evMu.Unlock()
}

// fulfillSeed answers the stand-in document request of a restore; it
// reports whether the request was one.
func (s *Session) fulfillSeed(tc *targetConn, ev *fetch.EventRequestPaused, raw string) bool {
	if ev.ResourceType != network.ResourceTypeDocument {
		return false
	}
	s.mu.Lock()
	seed := s.seedURL
	s.mu.Unlock()
	if seed == "" || raw != seed {
		return false
	}
	fireCmd(tc.sess, fetch.FulfillRequest, fetch.FulfillRequestParams{
		RequestID: ev.RequestID, ResponseCode: 200,
		ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "text/html; charset=utf-8"}, {Name: "Cache-Control", Value: "no-store"}},
		Body:            []byte(seedBody),
	})
	return true
}
