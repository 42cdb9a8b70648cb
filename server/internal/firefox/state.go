package firefox

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"

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

// Screenshot returns a PNG of the session tab's viewport.
func (s *Session) Screenshot(ctx context.Context) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	res, err := s.e.c.BrowsingContextCaptureScreenshot(ctx, bidi.BrowsingContextCaptureScreenshotParameters{Context: s.top})
	if err != nil {
		return nil, fmt.Errorf("firefox: screenshot: %w", err)
	}
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		return nil, fmt.Errorf("firefox: screenshot: %w", err)
	}
	return png, nil
}
