package console

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
)

// The reconciliation queue: commands a crash interrupted after they may have had their effect
// (reconciliation_required), which wait for a person to say what happened (`bap reconcile` in a
// terminal). Only callers who may resolve approvals settle them — in the local profile the
// operator — and only their own tenant's.

type reconciliationsDoc struct {
	Reconciliations []app.Reconciliation `json:"reconciliations"`
}

// operator authenticates a request of the queue and requires bap:approvals.resolve.
func (h *Handler) operator(w http.ResponseWriter, r *http.Request) (api.Principal, bool) {
	p, err := h.o.Auth.Authenticate(r)
	if err != nil {
		api.WriteProblem(w, app.AsError(err))
		return p, false
	}
	if !p.Scopes[api.ResolveScope] {
		api.WriteProblem(w, &app.Error{Code: app.CodeInsufficientScope, Detail: "settling interrupted commands needs the " + api.ResolveScope + " capability (in the local profile: the operator)"})
		return p, false
	}
	return p, true
}

// reconciliations lists the caller's tenant's reconciliations (open ones; ?all=true: every one).
func (h *Handler) reconciliations(w http.ResponseWriter, r *http.Request) {
	p, ok := h.operator(w, r)
	if !ok {
		return
	}
	recs, err := h.o.Service.ListReconciliations(r.Context(), r.URL.Query().Get("all") == "true")
	if err != nil {
		h.internal(w, "listing reconciliations", err)
		return
	}
	out := reconciliationsDoc{Reconciliations: []app.Reconciliation{}}
	for _, rec := range recs {
		if rec.Tenant == p.Actor.Tenant {
			out.Reconciliations = append(out.Reconciliations, rec)
		}
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// resolveReconciliation settles one: POST {outcome: applied|no_side_effect, note}.
func (h *Handler) resolveReconciliation(w http.ResponseWriter, r *http.Request) {
	p, ok := h.operator(w, r)
	if !ok {
		return
	}
	if !api.IsJSONMediaType(r.Header.Get("Content-Type")) {
		api.WriteProblem(w, &app.Error{Code: app.CodeUnsupportedMediaType, Detail: "a request body must be sent as Content-Type: application/json"})
		return
	}
	var body struct {
		Outcome string `json:"outcome"`
		Note    string `json:"note"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		api.WriteProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the body must be {\"outcome\": \"applied\"|\"no_side_effect\", \"note\": text}"})
		return
	}
	if strings.TrimSpace(body.Note) == "" {
		api.WriteProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "say what you found: the note is required"})
		return
	}
	id := r.PathValue("id")
	// Another tenant's reconciliation is not found, as every object of another tenant.
	recs, err := h.o.Service.ListReconciliations(r.Context(), true)
	if err != nil {
		h.internal(w, "listing reconciliations", err)
		return
	}
	found := false
	for _, rec := range recs {
		found = found || (rec.ID == id && rec.Tenant == p.Actor.Tenant)
	}
	if !found {
		api.WriteProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "no such reconciliation"})
		return
	}
	rec, err := h.o.Service.ResolveReconciliation(r.Context(), p.Actor.Subject, id, body.Outcome, body.Note)
	if err != nil {
		if e := app.AsError(err); e != nil {
			api.WriteProblem(w, e)
			return
		}
		h.internal(w, "settling a reconciliation", err)
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]any{"reconciliation": rec})
}

func (h *Handler) internal(w http.ResponseWriter, what string, err error) {
	h.o.Logger.Error(what, "err", err)
	api.WriteProblem(w, &app.Error{Code: app.CodeInternal, Detail: "the server failed while " + what})
}
