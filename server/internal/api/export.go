package api

import (
	"net/http"

	"github.com/originweave/bap/server/internal/app"
)

// WriteProblem answers e as an RFC 9457 problem (application/problem+json), as every route of
// the transport does; for routes served beside it (the operator console).
func WriteProblem(w http.ResponseWriter, e *app.Error) { writeProblem(w, e) }

// WriteJSON answers v as application/json with status (Cache-Control: no-store).
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }
