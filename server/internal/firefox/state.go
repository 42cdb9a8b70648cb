package firefox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/originweave/bap/server/internal/bidi"
	"github.com/originweave/bap/server/internal/page"
)

// sameSiteToPage and sameSiteToBiDi translate SameSite between BiDi's spelling and the one
// page.Cookie shares with the CDP adapter ("Strict", "Lax", "None", "" for the browser's default).
var (
	sameSiteToPage = map[bidi.NetworkSameSite]string{
		bidi.NetworkSameSiteStrict: "Strict", bidi.NetworkSameSiteLax: "Lax", bidi.NetworkSameSiteNone: "None",
	}
	sameSiteToBiDi = map[string]bidi.NetworkSameSite{
		"Strict": bidi.NetworkSameSiteStrict, "Lax": bidi.NetworkSameSiteLax, "None": bidi.NetworkSameSiteNone,
	}
)

// partition is the session's cookie store: its user context's.
func (s *Session) partition() *bidi.StoragePartitionDescriptor {
	return &bidi.StoragePartitionDescriptor{Type: "storageKey", UserContext: string(s.uc)}
}

// Cookies returns the cookies of the session's user context, sorted by domain, path and name.
// They are credentials: never for a client, a log or an event.
func (s *Session) Cookies(ctx context.Context) ([]page.Cookie, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	res, err := s.e.c.StorageGetCookies(ctx, bidi.StorageGetCookiesParameters{Partition: s.partition()})
	if err != nil {
		return nil, fmt.Errorf("firefox: reading cookies: %w", err)
	}
	out := make([]page.Cookie, 0, len(res.Cookies))
	for _, c := range res.Cookies {
		v := c.Value.Value
		if c.Value.Type == "base64" {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return nil, fmt.Errorf("firefox: cookie %q: %w", c.Name, err)
			}
			v = string(b)
		}
		pc := page.Cookie{Name: c.Name, Value: v, Domain: c.Domain, Path: c.Path, HTTPOnly: c.HttpOnly, Secure: c.Secure, SameSite: sameSiteToPage[c.SameSite]}
		if c.Expiry != nil && *c.Expiry > 0 {
			pc.Expires = float64(*c.Expiry)
		}
		out = append(out, pc)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.Domain+"\x00"+a.Path+"\x00"+a.Name < b.Domain+"\x00"+b.Path+"\x00"+b.Name
	})
	return out, nil
}

// SetCookies sets cookies in the session's user context and returns how many it set.
func (s *Session) SetCookies(ctx context.Context, cookies []page.Cookie) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	for i, c := range cookies {
		pc := bidi.StoragePartialCookie{
			Name: c.Name, Value: bidi.NetworkBytesValue{Type: "string", Value: c.Value}, Domain: c.Domain, Path: c.Path,
			HttpOnly: &c.HTTPOnly, Secure: &c.Secure, SameSite: sameSiteToBiDi[c.SameSite],
		}
		if c.Expires > 0 {
			exp := int64(c.Expires)
			pc.Expiry = &exp
		}
		if _, err := s.e.c.StorageSetCookie(ctx, bidi.StorageSetCookieParameters{Cookie: pc, Partition: s.partition()}); err != nil {
			return i, fmt.Errorf("firefox: setting cookie %d of %d: %w", i+1, len(cookies), err)
		}
	}
	return len(cookies), nil
}

// storageRead reads the document's Web Storage (in the sandbox, which sees the page's storage).
const storageRead = `(() => { const r = (a) => { try { const s = a(); const o = {}; for (let i = 0; i < s.length; i++) { const k = s.key(i); o[k] = s.getItem(k); } return o; } catch (e) { return null; } };` +
	` return JSON.stringify({o: location.origin, l: r(() => localStorage), s: r(() => sessionStorage)}); })()`

// ExportState returns the session's restorable state: its cookies, the Web Storage of the
// document its tab shows, its URL and viewport. It holds credentials: never for a client, a log
// or an event.
func (s *Session) ExportState(ctx context.Context) (*page.StorageState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx, commandTimeout)
	defer cancel()
	s.actMu.Lock()
	defer s.actMu.Unlock()
	cookies, err := s.Cookies(ctx)
	if err != nil {
		return nil, s.mapErr(err)
	}
	st := &page.StorageState{Cookies: cookies, LocalStorage: []page.OriginStorage{}, Contexts: []page.ContextState{}}
	cur, err := s.current(ctx)
	if err != nil {
		return nil, err
	}
	cst := page.ContextState{ContextID: s.ctxID, Primary: true, URL: cur.URL, EpochID: cur.EpochID}
	if v, err := s.evaluate(ctx, "JSON.stringify([window.innerWidth, window.innerHeight])", false); err == nil {
		var wh [2]int
		if json.Unmarshal([]byte(v), &wh) == nil {
			cst.Width, cst.Height = wh[0], wh[1]
		}
	}
	if strings.HasPrefix(cur.URL, "http://") || strings.HasPrefix(cur.URL, "https://") {
		v, err := s.evaluate(ctx, storageRead, false)
		if err != nil {
			return nil, err
		}
		var r struct {
			O string            `json:"o"`
			L map[string]string `json:"l"`
			S map[string]string `json:"s"`
		}
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return nil, fmt.Errorf("firefox: reading web storage: %w", err)
		}
		if len(r.L) > 0 {
			st.LocalStorage = append(st.LocalStorage, page.OriginStorage{Origin: r.O, Items: r.L})
		}
		if len(r.S) > 0 {
			cst.SessionStorage = append(cst.SessionStorage, page.OriginStorage{Origin: r.O, Items: r.S})
		}
	}
	st.Contexts = append(st.Contexts, cst)
	// The popups, which a restore counts out (ContextsSkipped): their URLs as last seen.
	for _, t := range s.tabs()[1:] {
		t.mu.Lock()
		st.Contexts = append(st.Contexts, page.ContextState{ContextID: t.ctxID, URL: t.docs.url, EpochID: t.docs.epoch})
		t.mu.Unlock()
	}
	return st, nil
}

// RestoreState writes a state into this fresh session: its cookies, its viewport, then its
// primary URL (when the policy allows it) with the Web Storage of that URL's origin written into
// the document and the page loaded again, a new epoch. Storage of other origins and other tabs
// are counted out (RestoreResult.Origins, ContextsSkipped), not written.
func (s *Session) RestoreState(ctx context.Context, st *page.StorageState) (*page.RestoreResult, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, cancel := withTimeout(ctx, 2*commandTimeout)
	defer cancel()
	out := &page.RestoreResult{}
	n, err := s.SetCookies(ctx, st.Cookies)
	if err != nil {
		return nil, s.mapErr(err)
	}
	out.Cookies = n
	var primary page.ContextState
	for i, c := range st.Contexts {
		if c.Primary || i == 0 {
			primary = c
		}
		if c.Primary {
			break
		}
	}
	out.ContextsSkipped = max(len(st.Contexts)-1, 0)
	if primary.Width > 0 && primary.Height > 0 {
		if err := s.e.c.BrowsingContextSetViewport(ctx, bidi.BrowsingContextSetViewportParameters{Context: s.top,
			Viewport: &bidi.BrowsingContextViewport{Width: int64(primary.Width), Height: int64(primary.Height)}}); err != nil {
			return nil, s.mapErr(fmt.Errorf("firefox: setting the viewport: %w", err))
		}
	}
	target := primary.URL
	if !strings.HasPrefix(target, "http://") && !strings.HasPrefix(target, "https://") {
		cur, err := s.current(ctx)
		if err != nil {
			return nil, err
		}
		out.NavigateResult = *cur
		return out, nil
	}
	nav, err := s.Navigate(ctx, page.NavigateRequest{URL: target})
	if err != nil {
		return nil, err
	}
	origin := ""
	var local, session map[string]string
	var inf struct {
		O string `json:"o"`
	}
	if err := s.Agent(ctx, &inf, "info"); err == nil {
		origin = inf.O
	}
	for _, o := range st.LocalStorage {
		if o.Origin == origin {
			local = o.Items
		}
	}
	for _, o := range primary.SessionStorage {
		if o.Origin == origin {
			session = o.Items
		}
	}
	if len(local) > 0 || len(session) > 0 {
		args, _ := json.Marshal([2]map[string]string{local, session})
		write := "(() => { const a = " + string(args) + "; for (const [k, v] of Object.entries(a[0] || {})) localStorage.setItem(k, v);" +
			" for (const [k, v] of Object.entries(a[1] || {})) sessionStorage.setItem(k, v); return \"\"; })()"
		if _, err := s.evaluate(ctx, write, false); err != nil {
			return nil, err
		}
		out.Origins = 1
		if nav, err = s.Navigate(ctx, page.NavigateRequest{URL: target}); err != nil {
			return nil, err
		}
	}
	out.NavigateResult = *nav
	return out, nil
}
