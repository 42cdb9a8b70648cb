package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
)

// The live view's WebSocket (issue #18): GET /console/api/sessions/{id}/live upgrades to a stream
// of binary messages, each one JPEG frame of the session's viewport, at most one per
// page.LiveFrameInterval (2 fps). It is read-only: what the client sends is discarded. The stream
// ends with a close frame whose reason says why: the session closed (1000) or was lost (1001).
//
// A browser's WebSocket cannot send headers, so the credential travels as a subprotocol next to
// LiveProtocol: "bap.csrf.<token>" with the session cookie (local profile), "bap.bearer.<token>"
// (remote profile). The upgrade is refused (before it happens) unless the request comes from the
// console's own origin: the cookie alone never opens a stream, so another site cannot hijack one.

// LiveProtocol is the live view's WebSocket subprotocol, the one the server selects.
const LiveProtocol = "bap.live.v1"

// Subprotocol prefixes that carry the credential of a live-view upgrade.
const (
	liveCSRFPrefix   = "bap.csrf."
	liveBearerPrefix = "bap.bearer."
)

// liveWriteTimeout bounds one frame's write: a watcher that does not read for that long is dropped.
const liveWriteTimeout = 10 * time.Second

// liveRequest is r with the credential its subprotocols carry moved to the headers the
// authenticator reads. Any other subprotocol than LiveProtocol and the credential is refused.
func liveRequest(r *http.Request) (*http.Request, bool) {
	var live bool
	hd := r.Header.Clone()
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			switch {
			case p == LiveProtocol:
				live = true
			case strings.HasPrefix(p, liveCSRFPrefix):
				hd.Set(CSRFHeader, strings.TrimPrefix(p, liveCSRFPrefix))
			case strings.HasPrefix(p, liveBearerPrefix):
				hd.Set("Authorization", "Bearer "+strings.TrimPrefix(p, liveBearerPrefix))
			default:
				return nil, false
			}
		}
	}
	r2 := r.Clone(r.Context())
	r2.Header = hd
	return r2, live
}

func (h *Handler) live(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		api.WriteProblem(w, &app.Error{Code: app.CodeUnauthenticated, Detail: "the live view is open only to the console's own origin"})
		return
	}
	ar, ok := liveRequest(r)
	if !ok {
		api.WriteProblem(w, app.Errorf(app.CodeInvalidRequest, "the live view speaks the %s WebSocket subprotocol", LiveProtocol))
		return
	}
	p, err := h.o.Auth.Authenticate(ar)
	if err != nil {
		api.WriteProblem(w, app.AsError(err))
		return
	}
	if !p.Scopes["bap:browser.observe"] {
		api.WriteProblem(w, &app.Error{Code: app.CodeInsufficientScope, Detail: "the live view needs the bap:browser.observe capability"})
		return
	}
	if h.o.Service == nil {
		api.WriteProblem(w, &app.Error{Code: app.CodeBrowserUnavailable, Detail: "this console serves no browser sessions"})
		return
	}
	sessionID := r.PathValue("id")
	// Origin was checked above against the Host; Accept checks it again (same host only).
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{LiveProtocol}})
	if err != nil {
		return // Accept answered the request
	}
	defer func() { _ = c.CloseNow() }()
	c.SetReadLimit(1024)
	ctx := c.CloseRead(context.WithoutCancel(r.Context()))
	err = h.o.Service.WatchSession(ctx, p.Actor, sessionID, func(f page.LiveFrame) error {
		wctx, cancel := context.WithTimeout(ctx, liveWriteTimeout)
		defer cancel()
		return c.Write(wctx, websocket.MessageBinary, f.JPEG)
	})
	if ctx.Err() != nil {
		return // the watcher left
	}
	code, reason := websocket.StatusNormalClosure, "the browser session closed"
	var e *app.Error
	switch {
	case err == nil:
	case errors.As(err, &e) && e.Code == app.CodeBrowserSessionLost:
		code, reason = websocket.StatusGoingAway, "the browser session was lost"
	case errors.As(err, &e):
		code, reason = websocket.StatusPolicyViolation, string(e.Code)
	default:
		h.o.Logger.Error("live view", "session_id", sessionID, "err", err)
		code, reason = websocket.StatusInternalError, "the live view failed"
	}
	_ = c.Close(code, reason)
}
