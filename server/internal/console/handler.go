package console

import (
	"embed"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/task"
)

// dist is the built app (scripts/build-console.sh writes it from console/; committed, and
// freshness-checked by scripts/check-generated.sh).
//
//go:embed dist
var dist embed.FS

// Policy is the Content-Security-Policy of every console response: the app's own script and
// style only (no inline script, no eval), images from itself and the blob: URLs it makes of
// evidence it fetched, requests to itself, never framed.
const Policy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; " +
	"font-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Profiles of the console's sign-in.
const (
	ProfileLocal  = "local"
	ProfileRemote = "remote"
)

// Options configures the console.
type Options struct {
	// Profile is ProfileLocal (login links, cookie sessions) or ProfileRemote (OAuth + PKCE).
	Profile string
	// Service lists tasks.
	Service *app.Service
	// Auth authenticates the console's own routes: the same Authenticator the API uses.
	Auth Authenticator
	// PublicURL is the base of the login URLs (local profile: the TCP listener's http://host:port);
	// called per request, since the port is known only once the server listens.
	PublicURL func() string
	// Issuer and Resource are the remote profile's authorization server and resource URLs.
	Issuer, Resource string
	Logger           *slog.Logger
}

// Handler serves /console.
type Handler struct {
	o   Options
	mux *http.ServeMux
}

// New builds the console's handler. Mount it at "/console" and "/console/".
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &Handler{o: o, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
	})
	h.mux.HandleFunc("GET /console/{$}", h.index)
	h.mux.HandleFunc("GET /console/assets/{file}", h.asset)
	h.mux.HandleFunc("GET /console/config", h.config)
	h.mux.HandleFunc("GET /console/session", h.session)
	h.mux.HandleFunc("POST /console/logout", h.logout)
	h.mux.HandleFunc("GET /console/login", h.login)
	h.mux.HandleFunc("POST /console/login-links", h.loginLink)
	h.mux.HandleFunc("GET /console/api/tasks", h.tasks)
	h.mux.HandleFunc("GET /console/api/reconciliations", h.reconciliations)
	h.mux.HandleFunc("GET /console/api/dead-letters", h.deadLetters)
	h.mux.HandleFunc("GET /console/api/sessions/{id}/live", h.live)
	h.mux.HandleFunc("POST /console/api/reconciliations/{id}/resolve", h.resolveReconciliation)
	h.mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		api.WriteProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "no such console route"})
	})
	return h
}

// ServeHTTP implements http.Handler: every answer carries the console's security headers.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", Policy)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	hd.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) index(w http.ResponseWriter, _ *http.Request) {
	b, err := dist.ReadFile("dist/index.html")
	if err != nil {
		api.WriteProblem(w, &app.Error{Code: app.CodeInternal, Detail: "the console is not built into this binary"})
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

func (h *Handler) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		api.WriteProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "no such console asset"})
		return
	}
	b, err := fs.ReadFile(dist, "dist/assets/"+name)
	if err != nil {
		api.WriteProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "no such console asset"})
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// configDoc tells the app how to sign in.
type configDoc struct {
	Profile      string   `json:"profile"`
	Issuer       string   `json:"issuer,omitempty"`
	Resource     string   `json:"resource,omitempty"`
	Scopes       []string `json:"scopes,omitempty"`
	ClientPrefix string   `json:"client_id_prefix,omitempty"`
	CSRFHeader   string   `json:"csrf_header,omitempty"`
}

func (h *Handler) config(w http.ResponseWriter, _ *http.Request) {
	d := configDoc{Profile: h.o.Profile}
	if h.o.Profile == ProfileRemote {
		d.Issuer, d.Resource, d.Scopes, d.ClientPrefix = h.o.Issuer, h.o.Resource, Scopes, ClientPrefix
	} else {
		d.CSRFHeader = CSRFHeader
	}
	api.WriteJSON(w, http.StatusOK, d)
}

// sessionDoc is the local session as the app sees it: who, until when, and its CSRF token
// (readable only by this origin: no CORS header is ever sent).
type sessionDoc struct {
	Tenant    string    `json:"tenant"`
	Subject   string    `json:"subject"`
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (h *Handler) session(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(CookieName)
	if h.o.Auth.Sessions == nil || err != nil {
		api.WriteProblem(w, &app.Error{Code: app.CodeUnauthenticated, Detail: "no console session: run `bap console` for a one-time login URL"})
		return
	}
	sess, err := h.o.Auth.session(r, c.Value, false)
	if err != nil {
		api.WriteProblem(w, app.AsError(err))
		return
	}
	api.WriteJSON(w, http.StatusOK, sessionDoc{Tenant: sess.Actor.Tenant, Subject: sess.Actor.Subject, CSRFToken: sess.CSRF, ExpiresAt: sess.Expires.UTC()})
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(CookieName)
	if h.o.Auth.Sessions == nil || err != nil {
		api.WriteProblem(w, &app.Error{Code: app.CodeUnauthenticated, Detail: "no console session"})
		return
	}
	if _, err := h.o.Auth.session(r, c.Value, true); err != nil {
		api.WriteProblem(w, app.AsError(err))
		return
	}
	h.o.Auth.Sessions.End(c.Value)
	http.SetCookie(w, h.cookie(r, "", -1))
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

// login trades a one-time login token for a session cookie and sends the browser to the app.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.o.Auth.Sessions == nil {
		api.WriteProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "the remote profile signs in with OAuth: open /console/"})
		return
	}
	cookie, _, ok := h.o.Auth.Sessions.Redeem(r.URL.Query().Get("token"))
	if !ok {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte("<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><title>Login link used or expired — BAP console</title>" +
			"<main><h1>This login link is used or expired</h1><p>A login link works once, for 5 minutes. Run <code>bap console</code> for a new one.</p></main></html>"))
		return
	}
	http.SetCookie(w, h.cookie(r, cookie, int(SessionTTL/time.Second)))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, "/console/", http.StatusSeeOther)
}

// loginLinkDoc is the answer to `bap console`.
type loginLinkDoc struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// loginLink mints a one-time login URL: for the operator on the Unix socket only.
func (h *Handler) loginLink(w http.ResponseWriter, r *http.Request) {
	if h.o.Auth.Sessions == nil {
		api.WriteProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "the remote profile signs in with OAuth: open /console/"})
		return
	}
	p, err := h.o.Auth.Next.Authenticate(r)
	if err != nil {
		api.WriteProblem(w, app.AsError(err))
		return
	}
	if p.Via != app.ViaSocket {
		api.WriteProblem(w, &app.Error{Code: app.CodeInsufficientScope, Detail: "only the operator, on the Unix socket, opens console sessions (bap console)"})
		return
	}
	tok, exp := h.o.Auth.Sessions.NewLink(p.Actor)
	base := strings.TrimSuffix(h.o.PublicURL(), "/")
	api.WriteJSON(w, http.StatusCreated, loginLinkDoc{URL: base + "/console/login?token=" + tok, ExpiresAt: exp.UTC()})
}

// taskDoc is one row of the operator's task list.
type taskDoc struct {
	TaskID       string    `json:"task_id"`
	State        string    `json:"state"`
	Goal         string    `json:"goal"`
	Origin       string    `json:"origin"`
	Verification string    `json:"verification,omitempty"`
	CreatedBy    string    `json:"created_by"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

type tasksDoc struct {
	Tasks []taskDoc `json:"tasks"`
	// NextBefore is the cursor of the next page (?before=), absent on the last.
	NextBefore *time.Time `json:"next_before,omitempty"`
}

// tasks is the operator's task list: GET /console/api/tasks?state=&origin=&created_after=&before=&limit=.
func (h *Handler) tasks(w http.ResponseWriter, r *http.Request) {
	p, ok := h.reader(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	f := app.TaskFilter{State: task.State(q.Get("state")), Origin: q.Get("origin")}
	for name, dst := range map[string]*time.Time{"created_after": &f.CreatedAfter, "before": &f.Before} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				api.WriteProblem(w, app.Errorf(app.CodeInvalidRequest, "%s must be an RFC 3339 time", name))
				return
			}
			*dst = t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			api.WriteProblem(w, app.Errorf(app.CodeInvalidRequest, "limit must be an integer"))
			return
		}
		f.Limit = n
	}
	ts, err := h.o.Service.ListTasks(r.Context(), p.Actor, f)
	if err != nil {
		if e := app.AsError(err); e != nil {
			api.WriteProblem(w, e)
			return
		}
		h.o.Logger.Error("listing tasks", "err", err)
		api.WriteProblem(w, &app.Error{Code: app.CodeInternal, Detail: "the server failed while listing tasks"})
		return
	}
	out := tasksDoc{Tasks: make([]taskDoc, 0, len(ts))}
	for _, t := range ts {
		out.Tasks = append(out.Tasks, taskDoc{TaskID: t.ID, State: string(t.State), Goal: t.Goal, Origin: t.Origin(),
			Verification: t.Verification, CreatedBy: t.CreatedBy, CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC()})
	}
	limit := f.Limit
	if limit == 0 {
		limit = 100
	}
	if len(ts) == limit {
		last := ts[len(ts)-1].CreatedAt.UTC()
		out.NextBefore = &last
	}
	api.WriteJSON(w, http.StatusOK, out)
}
