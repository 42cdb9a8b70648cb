package console

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
)

// operatorOnSocket stands for api.Local: a request marked "socket" is the operator, any other
// the agent (the daemon's real authenticator is tested end to end in cmd/bap).
type operatorOnSocket struct{}

func (operatorOnSocket) Authenticate(r *http.Request) (api.Principal, error) {
	if r.Header.Get("X-Test-Socket") == "1" {
		return api.Principal{Actor: app.Actor{Tenant: "local", Subject: api.LocalOperator}, Via: app.ViaSocket,
			Scopes: map[string]bool{"bap:tasks.read": true, api.ResolveScope: true}}, nil
	}
	return api.Principal{Actor: app.Actor{Tenant: "local", Subject: api.LocalAgent}, Via: app.ViaAPI,
		Scopes: map[string]bool{"bap:tasks.read": true}}, nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestLoginLinksWorkOnceAndExpire(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	s := NewSessions(c.now)
	op := app.Actor{Tenant: "local", Subject: api.LocalOperator}

	tok, exp := s.NewLink(op)
	if !exp.Equal(c.t.Add(LoginLinkTTL)) || len(tok) < 40 {
		t.Fatalf("link %q expires %v", tok, exp)
	}
	cookie, sess, ok := s.Redeem(tok)
	if !ok || sess.Actor != op || cookie == "" || cookie == tok || sess.CSRF == "" || sess.CSRF == cookie {
		t.Fatalf("redeem: %v %v", ok, sess)
	}
	if _, _, ok := s.Redeem(tok); ok {
		t.Fatal("a login link worked twice")
	}
	if got, ok := s.Lookup(cookie); !ok || got != sess {
		t.Fatal("the session is not found by its cookie")
	}

	late, _ := s.NewLink(op)
	c.t = c.t.Add(LoginLinkTTL)
	if _, _, ok := s.Redeem(late); ok {
		t.Fatal("an expired login link worked")
	}
	if _, _, ok := s.Redeem("made-up"); ok {
		t.Fatal("an unknown token worked")
	}
	c.t = c.t.Add(SessionTTL)
	if _, ok := s.Lookup(cookie); ok {
		t.Fatal("a session outlived SessionTTL")
	}
	s2 := NewSessions(c.now)
	for i := 0; i < maxSessions+10; i++ {
		l, _ := s2.NewLink(op)
		s2.Redeem(l)
	}
	if n := len(s2.sessions); n > maxSessions {
		t.Fatalf("%d sessions kept, at most %d", n, maxSessions)
	}
}

func TestTheCookieAloneIsNoCredential(t *testing.T) {
	s := NewSessions(nil)
	tok, _ := s.NewLink(app.Actor{Tenant: "local", Subject: api.LocalOperator})
	cookie, sess, _ := s.Redeem(tok)
	a := Wrap(s, operatorOnSocket{})
	for _, tt := range []struct {
		name    string
		headers map[string]string
		subject string // "" : refused 401
		via     string
	}{
		{"no cookie: the agent, as before", map[string]string{}, api.LocalAgent, app.ViaAPI},
		{"cookie and CSRF token: the operator", map[string]string{"Cookie": CookieName + "=" + cookie, CSRFHeader: sess.CSRF, "Sec-Fetch-Site": "same-origin"}, api.LocalOperator, app.ViaSocket},
		{"cookie without the CSRF token", map[string]string{"Cookie": CookieName + "=" + cookie}, "", ""},
		{"cookie with a wrong CSRF token", map[string]string{"Cookie": CookieName + "=" + cookie, CSRFHeader: sess.CSRF + "x"}, "", ""},
		{"cookie from another site", map[string]string{"Cookie": CookieName + "=" + cookie, CSRFHeader: sess.CSRF, "Sec-Fetch-Site": "cross-site"}, "", ""},
		{"cookie from another origin", map[string]string{"Cookie": CookieName + "=" + cookie, CSRFHeader: sess.CSRF, "Origin": "http://evil.example"}, "", ""},
		{"cookie from a sibling port", map[string]string{"Cookie": CookieName + "=" + cookie, CSRFHeader: sess.CSRF, "Origin": "http://127.0.0.1:9999"}, "", ""},
		{"an unknown cookie", map[string]string{"Cookie": CookieName + "=forged", CSRFHeader: sess.CSRF}, "", ""},
		{"a bearer token goes to the next authenticator", map[string]string{"Cookie": CookieName + "=" + cookie, "Authorization": "Bearer x"}, api.LocalAgent, app.ViaAPI},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "http://127.0.0.1:7777/bap/v1/approvals", nil)
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			p, err := a.ForAPI().Authenticate(r)
			if tt.subject == "" {
				if e := app.AsError(err); e == nil || e.Code != app.CodeUnauthenticated {
					t.Fatalf("want 401 unauthenticated, got %v %v", p, err)
				}
				return
			}
			if err != nil || p.Actor.Subject != tt.subject || p.Via != tt.via {
				t.Fatalf("got %v %v", p, err)
			}
			if tt.via == app.ViaSocket && (!p.Scopes[api.ResolveScope] || p.Scopes["bap:secrets.write"] || len(p.Scopes) != len(Scopes)) {
				t.Fatalf("a console session's capabilities: %v", p.Scopes)
			}
		})
	}
}

func TestConsoleRoutes(t *testing.T) {
	s := NewSessions(nil)
	h := New(Options{Profile: ProfileLocal, Auth: Wrap(s, operatorOnSocket{}), PublicURL: func() string { return "http://127.0.0.1:7777" }})
	do := func(method, target string, hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, strings.NewReader("{}"))
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// Every answer carries the strict policy; the page has no inline script.
	w := do("GET", "http://127.0.0.1:7777/console/", nil)
	if w.Code != 200 || w.Header().Get("Content-Security-Policy") != Policy || w.Header().Get("X-Frame-Options") != "DENY" ||
		!strings.Contains(Policy, "frame-ancestors 'none'") || strings.Contains(Policy, "unsafe") {
		t.Fatalf("index: %d %v", w.Code, w.Header())
	}
	if body := w.Body.String(); strings.Contains(body, "<script>") || !strings.Contains(body, `src="/console/assets/app.js"`) {
		t.Fatalf("the page inlines script or lacks the app: %s", body)
	}
	for _, p := range []string{"/console/assets/app.js", "/console/assets/app.css"} {
		if w := do("GET", "http://127.0.0.1:7777"+p, nil); w.Code != 200 || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("%s: %d", p, w.Code)
		}
	}
	for _, p := range []string{"/console/assets/..%2fdoc.go", "/console/assets/.hidden", "/console/nosuch", "/console/assets/nosuch.js"} {
		if w := do("GET", "http://127.0.0.1:7777"+p, nil); w.Code != 404 || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s: %d %s", p, w.Code, w.Body)
		}
	}
	// Only the operator on the socket mints a login link; the agent on TCP gets 403.
	if w := do("POST", "http://127.0.0.1:7777/console/login-links", nil); w.Code != 403 {
		t.Fatalf("the agent's login link: %d %s", w.Code, w.Body)
	}
	w = do("POST", "http://localhost/console/login-links", map[string]string{"X-Test-Socket": "1"})
	var link struct{ URL string }
	_ = json.Unmarshal(w.Body.Bytes(), &link)
	if w.Code != 201 || !strings.HasPrefix(link.URL, "http://127.0.0.1:7777/console/login?token=") {
		t.Fatalf("the operator's login link: %d %s", w.Code, w.Body)
	}
	// The link sets the HttpOnly, SameSite=Strict session cookie once, then is spent.
	w = do("GET", link.URL, map[string]string{"Sec-Fetch-Site": "none"})
	ck := w.Result().Cookies()
	if w.Code != http.StatusSeeOther || len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/" {
		t.Fatalf("login: %d %v", w.Code, ck)
	}
	if w := do("GET", link.URL, nil); w.Code != 401 || len(w.Result().Cookies()) != 0 {
		t.Fatalf("login a second time: %d", w.Code)
	}
	// The session document carries the CSRF token, for this origin only.
	w = do("GET", "http://127.0.0.1:7777/console/session", map[string]string{"Cookie": ck[0].Name + "=" + ck[0].Value, "Sec-Fetch-Site": "same-origin"})
	var sd sessionDoc
	_ = json.Unmarshal(w.Body.Bytes(), &sd)
	if w.Code != 200 || sd.Subject != api.LocalOperator || sd.CSRFToken == "" {
		t.Fatalf("session: %d %s", w.Code, w.Body)
	}
	if w := do("GET", "http://127.0.0.1:7777/console/session", map[string]string{"Cookie": ck[0].Name + "=" + ck[0].Value, "Sec-Fetch-Site": "cross-site"}); w.Code != 401 {
		t.Fatalf("session from another site: %d", w.Code)
	}
	// Logout needs the token too, and ends the session.
	if w := do("POST", "http://127.0.0.1:7777/console/logout", map[string]string{"Cookie": ck[0].Name + "=" + ck[0].Value}); w.Code != 401 {
		t.Fatalf("logout without the token: %d", w.Code)
	}
	if w := do("POST", "http://127.0.0.1:7777/console/logout", map[string]string{"Cookie": ck[0].Name + "=" + ck[0].Value, CSRFHeader: sd.CSRFToken}); w.Code != 204 {
		t.Fatalf("logout: %d", w.Code)
	}
	if _, ok := s.Lookup(ck[0].Value); ok {
		t.Fatal("the session outlived its logout")
	}
	// The remote profile has no login links; its config names the authorization server.
	rh := New(Options{Profile: ProfileRemote, Auth: Wrap(nil, operatorOnSocket{}), Issuer: "https://bap.example", Resource: "https://bap.example"})
	w = httptest.NewRecorder()
	rh.ServeHTTP(w, httptest.NewRequest("GET", "https://bap.example/console/config", nil))
	var cfg configDoc
	_ = json.Unmarshal(w.Body.Bytes(), &cfg)
	if cfg.Profile != ProfileRemote || cfg.Issuer != "https://bap.example" || cfg.ClientPrefix != ClientPrefix || len(cfg.Scopes) != 8 {
		t.Fatalf("remote config: %s", w.Body)
	}
	w = httptest.NewRecorder()
	rh.ServeHTTP(w, httptest.NewRequest("POST", "https://bap.example/console/login-links", nil))
	if w.Code != 404 {
		t.Fatalf("a remote login link: %d", w.Code)
	}
}

// FuzzAuthenticate: whatever a request carries in the headers the console reads (cookie, CSRF
// token, Sec-Fetch-Site, Origin, Host), it is the operator only with the real cookie and token
// from this origin, and nothing panics.
func FuzzAuthenticate(f *testing.F) {
	s := NewSessions(nil)
	tok, _ := s.NewLink(app.Actor{Tenant: "local", Subject: api.LocalOperator})
	cookie, sess, _ := s.Redeem(tok)
	a := Wrap(s, operatorOnSocket{})
	f.Add(cookie, sess.CSRF, "same-origin", "", "127.0.0.1:7777")
	f.Add(cookie, "", "cross-site", "http://evil.example", "127.0.0.1:7777")
	f.Add("x", "y", "none", "null", "localhost")
	f.Add(cookie, sess.CSRF, "", "http://127.0.0.1:7777", "127.0.0.1:7777")
	f.Add("", "", "", "%zz", "[::1]:7777")
	f.Fuzz(func(t *testing.T, ck, csrf, site, origin, host string) {
		r := httptest.NewRequest("GET", "http://127.0.0.1:7777/bap/v1/approvals", nil)
		r.Host = host
		r.Header.Set("Cookie", CookieName+"="+ck)
		r.Header.Set(CSRFHeader, csrf)
		r.Header.Set("Sec-Fetch-Site", site)
		r.Header.Set("Origin", origin)
		p, err := a.Authenticate(r)
		if err != nil || p.Actor.Subject != api.LocalOperator {
			return
		}
		if ck != cookie || csrf != sess.CSRF || (site != "" && site != "same-origin" && site != "none") {
			t.Fatalf("the operator without the session's credential: cookie %q csrf %q site %q", ck, csrf, site)
		}
	})
}
