package api

import (
	"net/http"
	"time"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// Human handoff (ADR 0023): take_over_task and hand_back_task, an operator's or approver's
// operations (bap:approvals.resolve; not MCP tools).

func toHandoff(h *app.Handoff) apigen.Handoff {
	out := apigen.Handoff{
		HandoffId: h.ID, TaskId: h.TaskID, SessionId: h.SessionID, Holder: h.Holder, Via: apigen.HandoffVia(h.Via),
		State: apigen.HandoffState(h.State), StartedAt: h.StartedAt, LeaseExpiresAt: h.LeaseExpiresAt,
		EndedAt: h.EndedAt, EndedBy: nonEmpty(h.EndedBy), CheckpointId: nonEmpty(h.CheckpointID),
	}
	return out
}

var takeOverResponder = responder[*app.HandoffResult]{status: 200, render: func(res *app.HandoffResult) (any, error) {
	t, err := toTask(res.Task)
	if err != nil {
		return nil, err
	}
	return apigen.TakeOverTaskResponse{Task: t, Handoff: toHandoff(res.Handoff), Receipt: toReceipt(res.Receipt)}, nil
}}

var handBackResponder = responder[*app.HandoffResult]{status: 200, render: func(res *app.HandoffResult) (any, error) {
	t, err := toTask(res.Task)
	if err != nil {
		return nil, err
	}
	return apigen.HandBackTaskResponse{Task: t, Handoff: toHandoff(res.Handoff), EpochId: nonEmpty(res.EpochID), Receipt: toReceipt(res.Receipt)}, nil
}}

// TakeOverTask implements apigen.ServerInterface.
func (s *server) TakeOverTask(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.TakeOverTaskParams) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	var body apigen.TakeOverTaskRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	var lease time.Duration
	if body.LeaseSeconds != nil {
		lease = time.Duration(*body.LeaseSeconds) * time.Second
	}
	resp, err := s.svc.TakeOverTask(r.Context(), req.call, taskID, body.SessionId, lease, takeOverResponder)
	s.reply(w, r, resp, err)
}

// HandBackTask implements apigen.ServerInterface.
func (s *server) HandBackTask(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.HandBackTaskParams) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	if len(req.body) > 0 {
		var body apigen.HandBackTaskRequest
		if !s.decodeBody(w, req, &body) {
			return
		}
	}
	resp, err := s.svc.HandBackTask(r.Context(), req.call, taskID, handBackResponder)
	s.reply(w, r, resp, err)
}
