package api

import (
	"net/http"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// The browser, artifact and event-stream operations are validated and authorised like every other
// operation, then answered honestly: no browser session, artifact or stream can exist in this
// build, so session and artifact ids are unknown (404), opening a session on an existing task needs
// the browser adapter (503 browser_unavailable), and streams are not implemented yet (501).

func (s *server) unknownSession(w http.ResponseWriter, r *http.Request, id string) {
	if _, ok := s.begin(w, r, id); ok {
		writeProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "no such browser session"})
	}
}

func (s *server) unknownArtifact(w http.ResponseWriter, r *http.Request, id string) {
	if _, ok := s.begin(w, r, id); ok {
		writeProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "no such artifact"})
	}
}

// CreateBrowserSession implements apigen.ServerInterface.
func (s *server) CreateBrowserSession(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.CreateBrowserSessionParams) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	if _, err := s.svc.GetTask(r.Context(), req.principal.Actor, taskID); err != nil {
		s.fail(w, r, err)
		return
	}
	writeProblem(w, &app.Error{Code: app.CodeBrowserUnavailable,
		Detail: "this build has no browser adapter yet; browser sessions cannot be opened (the browser itself comes from the Debian package `chromium`)"})
}

// CheckpointBrowserSession implements apigen.ServerInterface.
func (s *server) CheckpointBrowserSession(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.CheckpointBrowserSessionParams) {
	s.unknownSession(w, r, id)
}

// CloseBrowserSession implements apigen.ServerInterface.
func (s *server) CloseBrowserSession(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.CloseBrowserSessionParams) {
	s.unknownSession(w, r, id)
}

// Navigate implements apigen.ServerInterface.
func (s *server) Navigate(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.NavigateParams) {
	s.unknownSession(w, r, id)
}

// Observe implements apigen.ServerInterface.
func (s *server) Observe(w http.ResponseWriter, r *http.Request, id apigen.SessionId) {
	s.unknownSession(w, r, id)
}

// QueryNodes implements apigen.ServerInterface.
func (s *server) QueryNodes(w http.ResponseWriter, r *http.Request, id apigen.SessionId) {
	s.unknownSession(w, r, id)
}

// Act implements apigen.ServerInterface.
func (s *server) Act(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.ActParams) {
	s.unknownSession(w, r, id)
}

// Extract implements apigen.ServerInterface.
func (s *server) Extract(w http.ResponseWriter, r *http.Request, id apigen.SessionId) {
	s.unknownSession(w, r, id)
}

// CaptureEvidence implements apigen.ServerInterface.
func (s *server) CaptureEvidence(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.CaptureEvidenceParams) {
	s.unknownSession(w, r, id)
}

// GetArtifact implements apigen.ServerInterface.
func (s *server) GetArtifact(w http.ResponseWriter, r *http.Request, id apigen.ArtifactId) {
	s.unknownArtifact(w, r, id)
}

// VerifyArtifact implements apigen.ServerInterface.
func (s *server) VerifyArtifact(w http.ResponseWriter, r *http.Request, id apigen.ArtifactId) {
	s.unknownArtifact(w, r, id)
}

// StreamEvents implements apigen.ServerInterface.
func (s *server) StreamEvents(w http.ResponseWriter, r *http.Request, _ apigen.StreamEventsParams) {
	if _, ok := s.begin(w, r); ok {
		writeProblem(w, &app.Error{Code: app.CodeNotImplemented, Detail: "event streams are not implemented yet; page list_task_events instead"})
	}
}

// StreamTaskEvents implements apigen.ServerInterface.
func (s *server) StreamTaskEvents(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.StreamTaskEventsParams) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	if _, err := s.svc.GetTask(r.Context(), req.principal.Actor, taskID); err != nil {
		s.fail(w, r, err)
		return
	}
	writeProblem(w, &app.Error{Code: app.CodeNotImplemented, Detail: "event streams are not implemented yet; page list_task_events instead"})
}
