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
	p, err := h.o.Auth.Authenticate(r)
	if err != nil {
		api.WriteProblem(w, app.AsError(err))
		return
	}
	if !p.Scopes["bap:tasks.read"] {
		api.WriteProblem(w, &app.Error{Code: app.CodeInsufficientScope, Detail: "this operation needs the bap:tasks.read capability"})
		return
	}
	ds, err := h.o.Service.ListDeadLetters(r.Context(), p.Actor)
	if err != nil {
		h.internal(w, "listing dead letters", err)
		return
	}
	api.WriteJSON(w, http.StatusOK, deadLettersDoc{DeadLetters: ds})
}
