package api

import (
	"net/http"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// CreateTask implements apigen.ServerInterface.
func (s *server) CreateTask(w http.ResponseWriter, r *http.Request, _ apigen.CreateTaskParams) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	var body apigen.CreateTaskRequest
	if err := decode(req.body, &body); err != nil {
		writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body does not match the specification"})
		return
	}
	in, err := fromCreateTask(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !s.allowUpload(w, r, req.principal, planUploads(in.Plan)) { // the plan's worker sends it later (upload.go)
		return
	}
	resp, err := s.svc.CreateTask(r.Context(), req.call, in, createTaskResponder)
	s.reply(w, r, resp, err)
}

// GetTask implements apigen.ServerInterface.
func (s *server) GetTask(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	t, err := s.svc.GetTask(r.Context(), req.principal.Actor, taskID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	wt, err := toTask(t)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apigen.GetTaskResponse{Task: wt})
}

// ListTaskEvents implements apigen.ServerInterface.
func (s *server) ListTaskEvents(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, params apigen.ListTaskEventsParams) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	after, limit := int64(0), 100
	if params.After != nil {
		after = int64(*params.After)
	}
	if params.Limit != nil {
		limit = *params.Limit
	}
	evs, next, err := s.svc.ListTaskEvents(r.Context(), req.principal.Actor, taskID, after, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apigen.ListTaskEventsResponse{Events: make([]apigen.Event, 0, len(evs))}
	for i := range evs {
		out.Events = append(out.Events, toEvent(&evs[i]))
	}
	if next != nil {
		out.NextAfter = ptr(int(*next))
	}
	writeJSON(w, http.StatusOK, out)
}

// CancelTask implements apigen.ServerInterface.
func (s *server) CancelTask(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.CancelTaskParams) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	var body apigen.CancelTaskRequest
	if err := decode(req.body, &body); err != nil {
		writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body does not match the specification"})
		return
	}
	reason := ""
	if body.Reason != nil {
		reason = *body.Reason
	}
	resp, err := s.svc.CancelTask(r.Context(), req.call, taskID, reason, cancelTaskResponder)
	s.reply(w, r, resp, err)
}

// ReplayTask implements apigen.ServerInterface.
func (s *server) ReplayTask(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.ReplayTaskParams) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	var body apigen.ReplayTaskRequest
	if err := decode(req.body, &body); err != nil {
		writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body does not match the specification"})
		return
	}
	mode := app.ReplayArchive
	if body.Mode != nil {
		mode = string(*body.Mode)
	}
	resp, err := s.svc.ReplayTask(r.Context(), req.call, taskID, mode, replayTaskResponder)
	s.reply(w, r, resp, err)
}

// CloseTask implements apigen.ServerInterface.
func (s *server) CloseTask(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.CloseTaskParams) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	resp, err := s.svc.CloseTask(r.Context(), req.call, taskID, closeTaskResponder)
	s.reply(w, r, resp, err)
}

// ResumeTask implements apigen.ServerInterface.
func (s *server) ResumeTask(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.ResumeTaskParams) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	var body apigen.ResumeTaskRequest
	if err := decode(req.body, &body); err != nil {
		writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body does not match the specification"})
		return
	}
	resp, err := s.svc.ResumeTask(r.Context(), req.call, taskID, body.CheckpointId, resumeTaskResponder)
	s.reply(w, r, resp, err)
}

// RequestApproval implements apigen.ServerInterface.
func (s *server) RequestApproval(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.RequestApprovalParams) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	var body apigen.RequestApprovalRequest
	if err := decode(req.body, &body); err != nil {
		writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body does not match the specification"})
		return
	}
	resp, err := s.svc.RequestApproval(r.Context(), req.call, taskID, body.Reason, requestApprovalResponder)
	s.reply(w, r, resp, err)
}

// ListApprovals implements apigen.ServerInterface.
func (s *server) ListApprovals(w http.ResponseWriter, r *http.Request, params apigen.ListApprovalsParams) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	state, limit := "", 100
	if params.State != nil {
		state = string(*params.State)
	}
	if params.Limit != nil {
		limit = *params.Limit
	}
	as, err := s.svc.ListApprovals(r.Context(), req.principal.Actor, state, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apigen.ListApprovalsResponse{Approvals: make([]apigen.Approval, 0, len(as))}
	for _, a := range as {
		out.Approvals = append(out.Approvals, toApproval(a))
	}
	writeJSON(w, http.StatusOK, out)
}

// ResolveApproval implements apigen.ServerInterface.
func (s *server) ResolveApproval(w http.ResponseWriter, r *http.Request, approvalID apigen.ApprovalId, _ apigen.ResolveApprovalParams) {
	req, ok := s.begin(w, r, approvalID)
	if !ok {
		return
	}
	var body apigen.ResolveApprovalRequest
	if err := decode(req.body, &body); err != nil {
		writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body does not match the specification"})
		return
	}
	reason := ""
	if body.Reason != nil {
		reason = *body.Reason
	}
	resp, err := s.svc.ResolveApproval(r.Context(), req.call, approvalID, string(body.Decision), reason, resolveApprovalResponder)
	s.reply(w, r, resp, err)
}
