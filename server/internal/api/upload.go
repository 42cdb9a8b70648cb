package api

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/originweave/bap/server/internal/app"
)

// uploadScope is the capability an upload_file needs beside bap:browser.act: it sends an artifact
// into a page, and a caller must not send one it could not read with get_artifact (which needs
// this capability). The app applies get_artifact's other checks (tenant, kind).
const uploadScope = "bap:artifacts.read"

// allowUpload answers 403 insufficient_scope and returns false when an act (or, for a plan, any
// of its steps) is an upload_file and the caller lacks uploadScope.
func (s *server) allowUpload(w http.ResponseWriter, r *http.Request, p Principal, uploads bool) bool {
	if !uploads || p.Scopes[uploadScope] {
		return true
	}
	op, _ := r.Context().Value(opCtxKey{}).(*operation)
	if op != nil {
		s.refused(r, op, p, string(app.CodeInsufficientScope))
	}
	writeProblem(w, app.Errorf(app.CodeInsufficientScope,
		"upload_file sends an artifact into the page: it needs the %s capability too, as get_artifact does", uploadScope))
	return false
}

// planUploads reports whether a plan has an upload_file step.
func planUploads(plan []app.PlanStep) bool {
	for _, st := range plan {
		if st.Op != "act" || !bytes.Contains(st.Args, []byte("upload_file")) {
			continue
		}
		var a struct {
			Action string `json:"action"`
		}
		if json.Unmarshal(st.Args, &a) != nil || a.Action == "upload_file" {
			return true // unreadable args count as an upload: fail closed
		}
	}
	return false
}
