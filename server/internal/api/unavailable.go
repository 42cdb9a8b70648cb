package api

import (
	"net/http"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// Checkpoints are validated and authorised like every other operation, then answered honestly
// until the governance issue lands: a session cannot be checkpointed yet (501). Evidence and
// artifacts are in evidence.go, the event streams in stream.go, the browser operations in
// browser.go.

func (s *server) notYet(w http.ResponseWriter, r *http.Request, id string) {
	if _, ok := s.begin(w, r, id); ok {
		writeProblem(w, &app.Error{Code: app.CodeNotImplemented, Detail: "checkpoints are not implemented yet"})
	}
}

// CheckpointBrowserSession implements apigen.ServerInterface.
func (s *server) CheckpointBrowserSession(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.CheckpointBrowserSessionParams) {
	s.notYet(w, r, id)
}
