package api

import (
	"net/http"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// Checkpoints: checkpoint_browser_session stores a session's restorable state; resume_task and
// create_browser_session {from_checkpoint} (browser.go, handlers.go) restore it.

func toCheckpoint(c *app.Checkpoint) apigen.Checkpoint {
	out := apigen.Checkpoint{
		CheckpointId: c.ID, TaskId: c.TaskID, SessionId: c.SessionID, CreatedAt: c.CreatedAt,
		Url: nonEmpty(c.URL), EpochId: nonEmpty(c.EpochID), ServerVersion: nonEmpty(c.SoftwareVersion),
		ProtocolVersion: nonEmpty(c.ProtocolVersion), PolicySha256: nonEmpty(c.PolicyDigest),
	}
	if c.Engine != "" {
		out.Engine = ptr(apigen.BrowserEngine(c.Engine))
	}
	return out
}

var checkpointResponder = responder[*app.CheckpointResult]{status: 200, render: func(res *app.CheckpointResult) (any, error) {
	return apigen.CheckpointBrowserSessionResponse{Checkpoint: toCheckpoint(res.Checkpoint), Receipt: toReceipt(res.Receipt)}, nil
}}

// CheckpointBrowserSession implements apigen.ServerInterface.
func (s *server) CheckpointBrowserSession(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.CheckpointBrowserSessionParams) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	if len(req.body) > 0 {
		var body apigen.CheckpointBrowserSessionRequest
		if !s.decodeBody(w, req, &body) {
			return
		}
	}
	resp, err := s.svc.CheckpointBrowserSession(r.Context(), req.call, id, checkpointResponder)
	s.reply(w, r, resp, err)
}
