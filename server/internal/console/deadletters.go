package console

import (
	"net/http"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
)

// Dead letters: plan steps that failed for good (their retries spent, or a problem no retry
// mends), each the end of its task. The page lists the caller's tenant's, newest first, with
// what failed and why; nothing here retries them.

type deadLettersDoc struct {
	DeadLetters []app.DeadLetterRecord `json:"dead_letters"`
}

// deadLetters is GET /console/api/dead-letters (bap:tasks.read, the caller's tenant only).
func (h *Handler) deadLetters(w http.ResponseWriter, r *http.Request) {
	p, ok := h.reader(w, r)
	if !ok {
		return
	}
	ds, err := h.o.Service.ListDeadLetters(r.Context(), p.Actor)
	if err != nil {
		h.internal(w, "listing dead letters", err)
		return
	}
	api.WriteJSON(w, http.StatusOK, deadLettersDoc{DeadLetters: ds})
}

// reader authenticates a read of the console's lists and requires bap:tasks.read.
func (h *Handler) reader(w http.ResponseWriter, r *http.Request) (api.Principal, bool) {
	p, err := h.o.Auth.Authenticate(r)
	if err != nil {
		api.WriteProblem(w, app.AsError(err))
		return p, false
	}
	if !p.Scopes["bap:tasks.read"] {
		api.WriteProblem(w, &app.Error{Code: app.CodeInsufficientScope, Detail: "this operation needs the bap:tasks.read capability"})
		return p, false
	}
	return p, true
}
