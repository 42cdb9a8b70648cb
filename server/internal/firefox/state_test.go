package firefox

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/page"
)

// TestCookiesMoveBetweenSessions exports the cookies of one session (a session cookie and a
// persistent, HttpOnly, SameSite one), sets them in a fresh session, and checks that the fresh
// session sends them: what a checkpoint restore needs from the engine.
func TestCookiesMoveBetweenSessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, reads := cookieServer(t,
		&http.Cookie{Name: "sid", Value: "s1", Path: "/"},
		&http.Cookie{Name: "keep", Value: "k1", Path: "/", MaxAge: 3600, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	e := engine(t, ctx)
	a, err := e.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(ctx) }()
	if _, err := a.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/set"}); err != nil {
		t.Fatal(err)
	}
	got, err := a.Cookies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("cookies = %+v, want keep and sid", got)
	}
	keep, sid := got[0], got[1]
	tests := []struct {
		name string
		ok   bool
	}{
		{"sorted by name within a domain and path", keep.Name == "keep" && sid.Name == "sid"},
		{"values", keep.Value == "k1" && sid.Value == "s1"},
		{"the host as domain", keep.Domain == "127.0.0.1" && keep.Path == "/"},
		{"HttpOnly", keep.HTTPOnly && !sid.HTTPOnly},
		{"SameSite in page's spelling", keep.SameSite == "Strict"},
		{"an expiry only for the persistent cookie", keep.Expires > float64(time.Now().Unix()) && sid.Expires == 0},
	}
	for _, tt := range tests {
		if !tt.ok {
			t.Errorf("%s: cookies = %+v", tt.name, got)
		}
	}

	b, err := e.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close(ctx) }()
	if before, err := b.Cookies(ctx); err != nil || len(before) != 0 {
		t.Fatalf("a fresh session has cookies %+v (%v)", before, err)
	}
	n, err := b.SetCookies(ctx, got)
	if err != nil || n != 2 {
		t.Fatalf("SetCookies = %d, %v", n, err)
	}
	again, err := b.Cookies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range again {
		again[i].Expires, got[i].Expires = 0, 0 // compared above; a restore may round it
	}
	if len(again) != 2 || again[0] != got[0] || again[1] != got[1] {
		t.Fatalf("restored cookies = %+v, want %+v", again, got)
	}
	if _, err := b.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/read"}); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-reads:
		if !strings.Contains(h, "keep=k1") || !strings.Contains(h, "sid=s1") {
			t.Fatalf("the restored session sent Cookie %q", h)
		}
	case <-ctx.Done():
		t.Fatal("no request")
	}

	shot, err := b.Screenshot(ctx, page.ScreenshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if img, err := png.Decode(bytes.NewReader(shot)); err != nil || img.Bounds().Empty() {
		t.Fatalf("the screenshot is not a PNG image: %v", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SetCookies(ctx, []page.Cookie{{Name: "x", Value: "y", Domain: "127.0.0.1"}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetCookies after Close = %v, want ErrClosed", err)
	}
}
