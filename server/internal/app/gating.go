package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/task"
)

// An act that a task's approval rules mark is held: it is recorded with a pending approval and
// the task waits; resolve_approval with approve runs it exactly once (against the handle's epoch:
// a page that changed meanwhile answers stale_node_handle) and deny never runs it.
//
// The held action lives in this node's memory only, so protected input (fill values) is never
// written to the database. Browser sessions live in memory too: a node that restarts loses both,
// and approving then answers browser_session_lost.

// held is an action waiting for its approval.
type held struct {
	tenant, taskID, sessionID string
	req                       page.ActRequest
	timeoutMs                 int
	expiresAt                 time.Time // its approval's: then it is forgotten (approvals.go)
	holdID                    string    // the request the browser holds for it; "" for an act held before it ran
}

// HeldResult is the result of an act held for approval (202).
type HeldResult struct {
	Approval *Approval
	Receipt  *Receipt
}

// ActOutcome is the result of an act: exactly one of Done (it ran, 200) and Held (held for a
// person's approval, 202).
type ActOutcome struct {
	Done *ActResult
	Held *HeldResult
}

func (s *Service) heldAction(approvalID string) (held, bool) {
	v, ok := s.held.Load(approvalID)
	if !ok {
		return held{}, false
	}
	return v.(held), true
}

// approvalRule reports whether an act must wait for approval: the effect the browser gives the
// action (before dispatch, without acting) matched against the task's rules. spec is the rule that
// matched (its ttl and channel shape the approval).
func (s *Service) approvalRule(ctx context.Context, actor Actor, rec *SessionRecord, req page.ActRequest) (effect string, rule int, spec *ApprovalRuleSpec, err error) {
	t, err := s.store.GetTask(ctx, actor.Tenant, rec.TaskID)
	if err != nil {
		return "", 0, nil, err
	}
	if len(t.Policy.ApprovalRules) == 0 {
		return "", 0, nil, nil
	}
	pol, err := taskPolicy(t)
	if err != nil {
		return "", 0, nil, err
	}
	sess, err := s.liveSession(ctx, rec)
	if err != nil {
		return "", 0, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, timeoutOf(0))
	defer cancel()
	effect, origin, err := sess.ClassifyAction(cctx, req)
	if err != nil {
		return "", 0, nil, err
	}
	u, _ := url.Parse(origin) // an unparsable origin is nil: NeedsApproval then applies every rule of the effect
	// A form_submission rule judges the requests the act sends, in the browser (heldrequest.go):
	// before the act only any_action rules can hold a submission.
	judged := policy.Effect(effect)
	if judged == policy.EffectFormSubmission {
		judged = policy.EffectAnyAction
	}
	rule, needs := pol.NeedsApproval(judged, u)
	if !needs {
		return effect, rule, nil, nil
	}
	if rule < 0 || rule >= len(t.Policy.ApprovalRules) {
		return "", 0, nil, fmt.Errorf("approval rule %d of task %s does not exist", rule, t.ID)
	}
	return effect, rule, &t.Policy.ApprovalRules[rule], nil
}

// actionDigest binds an approval to the exact action: operation, target, arguments (values
// included, never stored) and context. It is an HMAC under the server key (ADR 0015): an
// unkeyed hash of an action that types a 4-digit PIN is reversed offline by trying every PIN.
func (s *Service) actionDigest(sessionID string, req page.ActRequest) []byte {
	b, _ := json.Marshal(struct {
		Op, Session, Context, Action, Node, Value, Key string
		Values                                         []string
		Query                                          *page.Query
	}{"act", sessionID, req.ContextID, req.Action, req.NodeID, req.Value, req.Key, req.Values, req.Query})
	m := s.keys.actionMAC()
	m.Write(b)
	return m.Sum(nil)
}

// holdAction records a held act: its command with outcome pending_approval, a pending approval
// (shaped by rule; nil for a safety hold: the defaults), and the task waiting for it.
func (s *Service) holdAction(ctx context.Context, call Call, rec *SessionRecord, req page.ActRequest, timeoutMs int, effect, reason string, rule *ApprovalRuleSpec, r Responder[*ActOutcome]) (Response, error) {
	return runCommand(ctx, s, call, r, func(ctx context.Context, tx Tx, cmd *Command) (*ActOutcome, *refusal, error) {
		c, err := s.beginOnTask(ctx, tx, cmd, rec.TaskID, true)
		if err != nil {
			return nil, nil, err
		}
		if _, err := c.prepareOnSession(ctx, rec.ID); err != nil {
			var e *Error
			if errors.As(err, &e) {
				return refused[*ActOutcome](c.reject(ctx, e))
			}
			return nil, nil, err
		}
		if err := c.hold(ctx, "approval_rule"); err != nil {
			return nil, nil, err
		}
		a := c.newApproval(call, reason, effect, rule)
		a.Digest = s.actionDigest(rec.ID, req)
		data := map[string]any{"session_id": rec.ID, "action": req.Action, "command_id": cmd.ID}
		if effect != "" {
			data["effect"] = effect
		}
		if err := c.insertApproval(ctx, a, "act", data); err != nil {
			return nil, nil, err
		}
		rc, err := c.receipt(ctx, task.PendingApproval, "", "")
		if err != nil {
			return nil, nil, err
		}
		s.held.Store(a.ID, held{tenant: c.t.Tenant, taskID: c.t.ID, sessionID: rec.ID, req: req, timeoutMs: timeoutMs, expiresAt: a.ExpiresAt})
		return &ActOutcome{Held: &HeldResult{Approval: a, Receipt: rc}}, nil, nil
	})
}

// holdActForSafety holds an act for a person's approval whatever the task's approval rules say:
// the autonomous loop's safety role asked for it (a model can only make a task stricter, never
// permit what policy forbids). Approving runs it once, denying never runs it — exactly as an act
// an approval rule holds.
func (s *Service) holdActForSafety(ctx context.Context, call Call, sessionID string, req page.ActRequest, artifactID string, timeoutMs int, reason string, r Responder[*ActOutcome]) (Response, error) {
	if _, err := s.browserOrUnavailable(); err != nil {
		return Response{}, err
	}
	rec, err := s.actSession(ctx, call, sessionID, &req, artifactID)
	if err != nil {
		return Response{}, err
	}
	effect := ""
	if rec.State == SessionOpen {
		if sess, err := s.liveSession(ctx, rec); err == nil {
			cctx, cancel := context.WithTimeout(ctx, timeoutOf(0))
			e, _, cerr := sess.ClassifyAction(cctx, req)
			cancel()
			if cerr == nil && policy.Effect(e).Valid() {
				effect = e
			}
		}
	}
	return s.holdAction(ctx, call, rec, req, timeoutMs, effect, reason, nil, r)
}

// approveHeldAction records the approval and runs the held action, once: phase 1 records the
// decision (a second resolve finds the approval no longer pending and never dispatches), phase 2
// acts, phase 3 records its receipt, which the response carries as action_receipt.
func (s *Service) approveHeldAction(ctx context.Context, call Call, approvalID, reason string, h held, r Responder[*ApprovalResult]) (Response, error) {
	if h.tenant != call.Actor.Tenant {
		return Response{}, ErrNotFound
	}
	var approval *Approval
	// A recording task's released act is a step a replay repeats (record.step): its target is
	// traced before the release (the page still shows it: the request it sent waits), what
	// followed after.
	var tr *stepTrace
	return runTwoPhase(ctx, s, call, h.taskID, r, twoPhase[*sessionPlan, *page.ActResult, *ApprovalResult]{
		sideEffecting: true,
		prepare: func(ctx context.Context, c *commandCtx) (*sessionPlan, error) {
			a, err := c.decide(ctx, call, approvalID, "approve", reason)
			if err != nil {
				return nil, err
			}
			approval = a
			rec, err := c.tx.LockSession(ctx, c.cmd.Tenant, h.sessionID)
			if err != nil {
				return nil, err
			}
			return &sessionPlan{rec: rec, timeout: timeoutOf(h.timeoutMs), record: c.t.Policy.Record}, nil
		},
		dispatch: func(ctx context.Context, p *sessionPlan) (*page.ActResult, error) {
			s.held.Delete(approvalID)
			if p.rec.State != SessionOpen {
				return nil, page.ErrSessionLost
			}
			sess, err := s.liveSession(ctx, p.rec)
			if err != nil {
				return nil, err
			}
			ctx, cancel := context.WithTimeout(ctx, p.timeout+5*time.Second)
			defer cancel()
			if p.record {
				tr = s.traceActBefore(ctx, sess, h.req)
			}
			var res *page.ActResult
			if h.holdID != "" {
				res, err = sess.Release(ctx, h.holdID) // exactly the request that was held, once
			} else {
				req := h.req
				req.Timeout = p.timeout
				req.Approved = true // a person approved this act: the requests it sends are not held again
				res, err = sess.Act(ctx, req)
			}
			if err == nil && tr != nil {
				effect := ""
				if h.holdID != "" {
					effect = page.EffectFormSubmission // a held request is one (holdRequest)
				}
				s.traceActAfter(ctx, sess, res, effect, tr)
			}
			return res, err
		},
		finish: func(ctx context.Context, c *commandCtx, plan *sessionPlan, res *page.ActResult, dispatchErr error) (*ApprovalResult, task.Outcome, error) {
			// Dispatch forgets the held action; a cancel_task that stopped this command before its
			// dispatch leaves that to here, so the action never lingers in memory.
			s.forgetHeld(ctx, approvalID)
			rec := plan.rec
			if dispatchErr != nil {
				return finishFailed[*ApprovalResult](ctx, c, rec, dispatchErr, true)
			}
			if _, err := s.recordAction(ctx, c, rec, h.req, res, "resolve_approval", map[string]any{"approval_id": approvalID}); err != nil {
				return nil, "", err
			}
			if tr != nil {
				if err := c.emit(ctx, c.t, "record.step", "resolve_approval", stepData(rec.ID, c.cmd.ID, "act", nil, &h.req, tr)); err != nil {
					return nil, "", err
				}
			}
			arc, err := c.releasedActReceipt(ctx, approval)
			if err != nil {
				return nil, "", err
			}
			rc, err := c.receipt(ctx, task.Applied, "", "")
			if err != nil {
				return nil, "", err
			}
			return &ApprovalResult{Approval: approval, Receipt: rc, ActionReceipt: arc}, "", nil
		},
	})
}

// releasedActReceipt records the held action that the approval released and ran as a command of
// its own (operation act, on behalf of whoever asked for it) with its receipt: the held command
// keeps its final pending_approval receipt, the resolve command gets its own, and the action's
// outcome is this one's.
func (c *commandCtx) releasedActReceipt(ctx context.Context, a *Approval) (*Receipt, error) {
	act := &Command{
		ID: ids.New(ids.Command), Tenant: c.t.Tenant, TaskID: c.t.ID, Operation: "act", Actor: a.RequestedBy,
		SideEffecting: true, NodeID: c.s.cfg.NodeID, RecordedAt: c.now,
	}
	ac := &commandCtx{s: c.s, tx: c.tx, cmd: act, t: c.t, now: c.now}
	if err := ac.tx.RecordCommand(ctx, act); err != nil {
		return nil, fmt.Errorf("recording the released action: %w", err)
	}
	if err := ac.emit(ctx, c.t, "command.recorded", "resolve_approval", map[string]any{
		"command_id": act.ID, "operation": act.Operation, "approval_id": a.ID, "held_command_id": a.CommandID,
	}); err != nil {
		return nil, err
	}
	return ac.receipt(ctx, task.Applied, "", "")
}
