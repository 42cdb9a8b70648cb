package app

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// Side effects judged by what leaves the browser (issue #24, CONTRACT "Policy and approvals").
//
// A form_submission rule is not decided before an act from the DOM's shape: the act runs, and the
// browser holds, unsent, the first request with a non-safe method it causes (page.HeldRequest).
// The act then answers 202 with an approval that names that request (method, URL, a keyed digest
// of its body) and a screenshot taken at hold time; the task waits in waiting_for_approval.
// Approve releases exactly that request, once (BrowserSession.Release), and answers only after the
// site did, with the action's receipt; deny, expiry, cancellation and a task that ends fail it
// (BrowserSession.Deny). any_action and file_upload rules still hold the act itself before it runs.

// heldAct is what an act's dispatch returns when the browser held a request: the result, and the
// page as it was then.
type heldAct struct {
	res  *page.ActResult
	shot []byte // PNG; nil when the screenshot failed (the hold stands without it)
}

// holdScreenshot takes the page's picture for the approver once a request is held.
func holdScreenshot(ctx context.Context, sess BrowserSession, res *page.ActResult) *heldAct {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	shot, err := sess.Screenshot(sctx, page.ScreenshotRequest{ContextID: res.ContextID})
	if err != nil {
		shot = nil
	}
	return &heldAct{res: res, shot: shot}
}

// requestDigest binds an approval to the exact request it holds: method, URL and body (which may
// hold what a person typed, so only its HMAC under the server key is kept).
func (s *Service) requestDigest(sessionID string, h *page.HeldRequest) []byte {
	b, _ := json.Marshal(struct {
		Op, Session, Method, URL string
		Body                     []byte
		BodyKnown                bool
	}{"request", sessionID, h.Method, h.URL, h.Body, h.BodyKnown})
	m := s.keys.actionMAC()
	m.Write(b)
	return m.Sum(nil)
}

// holdRequest records, in an act's phase 3, the request the browser held: the screenshot as an
// artifact, a pending approval shaped by the rule that holds it, the task waiting for it, and the
// act's receipt (pending_approval). The response is 202 with the approval.
func (s *Service) holdRequest(ctx context.Context, c *commandCtx, call Call, rec *SessionRecord, req page.ActRequest, timeoutMs int, h *heldAct) (*HeldResult, task.Outcome, error) {
	hr := h.res.Held
	var spec *ApprovalRuleSpec
	if hr.Rule >= 0 && hr.Rule < len(c.t.Policy.ApprovalRules) {
		spec = &c.t.Policy.ApprovalRules[hr.Rule]
	}
	if err := c.hold(ctx, "approval_rule"); err != nil {
		return nil, "", err
	}
	reason := fmt.Sprintf("approval rule %d holds the %s request to %s that this %s sent", hr.Rule, hr.Method, hr.URL, req.Action)
	a := c.newApproval(call, reason, "form_submission", spec)
	a.Digest = s.requestDigest(rec.ID, hr)
	a.HeldMethod, a.HeldURL = hr.Method, hr.URL
	data := map[string]any{
		"session_id": rec.ID, "action": req.Action, "command_id": c.cmd.ID, "effect": "form_submission",
		"method": hr.Method, "url": hr.URL,
	}
	if q := req.Query; q != nil && q.Role != "" {
		// What the act aimed at, as its query named it: the approver sees which button sent it.
		data["target"] = map[string]any{"role": clipRunes(q.Role, 64), "name": clipRunes(q.Name, 512)}
	}
	if len(h.shot) > 0 {
		art := &Artifact{
			ID: ids.New(ids.Artifact), Tenant: c.t.Tenant, SHA256: sha256Hex(h.shot), Size: int64(len(h.shot)),
			MediaType: "image/png", Kind: "screenshot", TaskID: c.t.ID, SessionID: rec.ID, ContextID: h.res.ContextID,
			EpochID: h.res.EpochID, CommandID: c.cmd.ID, SourceURL: h.res.URL, CreatedAt: c.now,
		}
		if err := c.tx.InsertArtifact(ctx, art, h.shot); err != nil {
			return nil, "", err
		}
		a.ScreenshotArtifactID = art.ID
		data["screenshot_artifact_id"] = art.ID
	}
	if err := c.insertApproval(ctx, a, "act", data); err != nil {
		return nil, "", err
	}
	rc, err := c.receipt(ctx, task.PendingApproval, "", "")
	if err != nil {
		return nil, "", err
	}
	s.held.Store(a.ID, held{tenant: c.t.Tenant, taskID: c.t.ID, sessionID: rec.ID, req: req, timeoutMs: timeoutMs,
		expiresAt: a.ExpiresAt, holdID: hr.ID})
	return &HeldResult{Approval: a, Receipt: rc}, "", nil
}

// forgetHeld drops a held action or request whose approval closed without approve (denied,
// expired, cancelled, its task ended): a request held inside the browser is failed there, so the
// page learns it will never be sent. The failing runs after the caller's command (in the
// background: callers inside a transaction must not wait on the browser), so it keeps ctx's
// values (its trace) but not its cancellation.
func (s *Service) forgetHeld(ctx context.Context, approvalID string) {
	if h, ok := s.takeHeld(approvalID); ok {
		go s.failHeld(ctx, approvalID, h)
	}
}

// denyHeld is forgetHeld for resolve_approval's deny: the held request is failed in the browser
// before the decision is answered. Failed in the background, it could still be pending when the
// client's next act began, and that act's settle window would then find a non-safe request it
// never sent and hold it as its own (seen on a busy machine).
func (s *Service) denyHeld(ctx context.Context, approvalID string) {
	if h, ok := s.takeHeld(approvalID); ok {
		s.failHeld(ctx, approvalID, h)
	}
}

// takeHeld removes and returns a held request (not a held action: it has no browser hold).
func (s *Service) takeHeld(approvalID string) (held, bool) {
	v, ok := s.held.LoadAndDelete(approvalID)
	if !ok {
		return held{}, false
	}
	h := v.(held)
	return h, h.holdID != ""
}

// failHeld fails h's request inside its session's browser, if the session is still open.
func (s *Service) failHeld(ctx context.Context, approvalID string, h held) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	rec, err := s.store.GetSession(ctx, h.tenant, h.sessionID)
	if err != nil || rec.State != SessionOpen {
		return // the session is gone, and its held request with it
	}
	sess, err := s.liveSession(ctx, rec)
	if err != nil {
		return
	}
	if err := sess.Deny(ctx, h.holdID); err != nil {
		s.cfg.Logger.Debug("failing a held request", "approval_id", approvalID, "err", err)
	}
}
