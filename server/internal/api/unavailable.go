package api

import (
	"net/http"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// Checkpoints, evidence and artifacts are validated and authorised like every other operation,
// then answered honestly until the governance issue lands: no artifact exists yet (404), and a
// session cannot be checkpointed or evidenced yet (501). The event streams are in stream.go, the
// browser operations in browser.go.

func (s *server) notYet(w http.ResponseWriter, r *http.Request, id string) {
	if _, ok := s.begin(w, r, id); ok {
		writeProblem(w, &app.Error{Code: app.CodeNotImplemented, Detail: "checkpoints and evidence are not implemented yet"})
	}
}

func (s *server) unknownArtifact(w http.ResponseWriter, r *http.Request, id string) {
	if _, ok := s.begin(w, r, id); ok {
		writeProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "no such artifact"})
	}
}

// CheckpointBrowserSession implements apigen.ServerInterface.
func (s *server) CheckpointBrowserSession(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.CheckpointBrowserSessionParams) {
	s.notYet(w, r, id)
}

// CaptureEvidence implements apigen.ServerInterface.
func (s *server) CaptureEvidence(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.CaptureEvidenceParams) {
	s.notYet(w, r, id)
}

// GetArtifact implements apigen.ServerInterface.
func (s *server) GetArtifact(w http.ResponseWriter, r *http.Request, id apigen.ArtifactId) {
	s.unknownArtifact(w, r, id)
}

// VerifyArtifact implements apigen.ServerInterface.
func (s *server) VerifyArtifact(w http.ResponseWriter, r *http.Request, id apigen.ArtifactId) {
	s.unknownArtifact(w, r, id)
}
