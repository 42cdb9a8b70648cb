package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/task"
)

// Approvals are resolved out of band (issue #24, docs/threat-model.md "Approvers"):
//
//   - Separation of duties is always on: whoever requested or caused an approval never resolves
//     it. "Caused" is the subject whose act was held or who called request_approval, the OAuth
//     client it came through, and — for a hold the task's own worker raised (a delegated or
//     autonomous task) — the task's creator and its client; a worker never resolves anything.
//   - Every approval expires (its rule's ttl, default 15 minutes). The upkeep expires due
//     approvals even when nobody calls, and a resolve finds a due one expired first: an expired
//     approval is never revived and its held action never runs.
//   - A decision records how it reached the server (Call.Via). Only a rule with channel
//     "elicitation" lets the requester's MCP client answer through an elicitation; that is the
//     one answer separation of duties does not refuse, by the rule's explicit choice.

// Approval and decision channels (schemas ApprovalChannel and DecisionChannel).
const (
	// ApprovalChannelApprover: only a separate approver resolves the approval (the default).
	ApprovalChannelApprover = "approver"
	// ApprovalChannelElicitation: the person at the requesting MCP client may answer its
	// elicitation too.
	ApprovalChannelElicitation = "elicitation"

	// ViaAPI is a call of the BAP HTTP API over TCP.
	ViaAPI = "api"
	// ViaSocket is a call of the BAP HTTP API on the local profile's Unix socket (the operator).
	ViaSocket = "socket"
	// ViaMCP is a call of an MCP tool.
	ViaMCP = "mcp"
	// ViaElicitation is an answer to the MCP elicitation of a held action.
	ViaElicitation = "elicitation"
)

// The workloads of callers without an OAuth client (ADR 0031). In the local profile reaching a
// listener is the credential, so the listener names the workload as the OAuth client does in the
// remote profile (the console's is its client, console.ClientID); the admin CLI works on the
// database itself. Each belongs to one subject, so separation of duties decides as before.
const (
	// WorkloadLocalSocket is a process of the operator's OS user on the local profile's Unix
	// socket (the bap CLI).
	WorkloadLocalSocket = "local:socket"
	// WorkloadLocalAgent is a caller on the local profile's TCP loopback: the HTTP API and /mcp.
	WorkloadLocalAgent = "local:agent"
	// WorkloadAdminCLI is the operator's admin CLI on the database (bap correct).
	WorkloadAdminCLI = "admin:cli"
	// WorkloadWorker is the runtime's own worker running a delegated or autonomous task (its
	// actor, worker:<node>, names the node); it never resolves an approval.
	WorkloadWorker = "bap:worker"
)

// ApprovalResult is the result of request_approval and resolve_approval. ActionReceipt is the
// receipt of a held action that an approval released (none until browser actions can be held).
type ApprovalResult struct {
	Approval      *Approval
	Receipt       *Receipt
	ActionReceipt *Receipt
}

// ApprovalRef names an approval due to expire.
type ApprovalRef struct {
	Tenant, TaskID, ApprovalID string
}

// RequestApproval asks a person to approve the task's next step; the task waits in
// waiting_for_approval until every pending approval is resolved.
func (s *Service) RequestApproval(ctx context.Context, call Call, taskID, reason string, r Responder[*ApprovalResult]) (Response, error) {
	return runCommand(ctx, s, call, r, func(ctx context.Context, tx Tx, cmd *Command) (*ApprovalResult, *refusal, error) {
		c, err := s.beginOnTask(ctx, tx, cmd, taskID, false)
		if err != nil {
			return nil, nil, err
		}
		if rf, err := c.rejectHandedOff(ctx); rf != nil || err != nil {
			return nil, rf, err
		}
		switch c.t.State {
		case task.Admitted:
			// request_approval is the task's first command: it starts running, then waits.
			if err := c.transition(ctx, c.t, task.Start, "request_approval"); err != nil {
				return nil, nil, err
			}
			if err := c.transition(ctx, c.t, task.AwaitApproval, "request_approval"); err != nil {
				return nil, nil, err
			}
		default:
			// Already waiting (for approval, or for the person who took the task over): one more
			// approval joins the pending set; a running task waits for it.
			if err := c.hold(ctx, "request_approval"); err != nil {
				return refused[*ApprovalResult](c.reject(ctx, AsError(err)))
			}
		}
		a := c.newApproval(call, reason, "", nil)
		if err := c.insertApproval(ctx, a, "request_approval", nil); err != nil {
			return nil, nil, err
		}
		rc, err := c.receipt(ctx, task.Applied, "", "")
		if err != nil {
			return nil, nil, err
		}
		return &ApprovalResult{Approval: a, Receipt: rc}, nil, nil
	})
}

// newApproval is a pending approval of the command's task asked for by call, under rule (nil:
// request_approval or a safety hold, with the defaults).
func (c *commandCtx) newApproval(call Call, reason, effect string, rule *ApprovalRuleSpec) *Approval {
	ttl, channel := policy.DefaultApprovalTTL, ApprovalChannelApprover
	if rule != nil {
		if rule.TTL > 0 {
			ttl = rule.TTL
		}
		if rule.Channel != "" {
			channel = rule.Channel
		}
	}
	a := &Approval{
		ID: ids.New(ids.Approval), TaskID: c.t.ID, Tenant: c.t.Tenant, CommandID: c.cmd.ID, State: task.ApprovalPending,
		Reason: reason, Effect: effect, RequestedBy: call.Actor.Subject, RequestedClient: call.ClientID,
		RequestedAt: c.now, ExpiresAt: c.now.Add(ttl), Channel: channel,
	}
	if call.Lease != nil {
		// The task's own worker raised it: whoever created the task caused it as much.
		a.OnBehalfOf, a.OnBehalfClient = c.t.CreatedBy, c.t.CreatedClient
	}
	return a
}

// insertApproval records a and its approval.requested event (data: more fields of the event).
func (c *commandCtx) insertApproval(ctx context.Context, a *Approval, cause string, data map[string]any) error {
	if err := c.tx.InsertApproval(ctx, a); err != nil {
		return fmt.Errorf("inserting approval: %w", err)
	}
	c.cmd.note.approval, c.cmd.note.approvalState = a.ID, a.State
	if a.HeldURL != "" {
		c.cmd.note.origin = originOf(a.HeldURL)
	}
	if data == nil {
		data = map[string]any{}
	}
	data["approval_id"], data["reason"] = a.ID, a.Reason
	data["expires_at"], data["channel"] = a.ExpiresAt.UTC().Format(time.RFC3339Nano), a.Channel
	return c.emit(ctx, c.t, "approval.requested", cause, data)
}

// ResolveApproval records the authenticated caller's decision on a pending approval. When it was
// the task's last pending approval, the task runs again.
func (s *Service) ResolveApproval(ctx context.Context, call Call, approvalID, decision, reason string, r Responder[*ApprovalResult]) (Response, error) {
	if decision != "approve" && decision != "deny" {
		return Response{}, Errorf(CodeInvalidRequest, "decision must be approve or deny")
	}
	if resp, ok, err := s.replayFirst(ctx, call); ok || err != nil {
		return resp, err // the first answer, wherever the approval's action runs now
	}
	if held, ok := s.heldAction(approvalID); ok && decision == "approve" {
		return s.approveHeldAction(ctx, call, approvalID, reason, held, r)
	}
	if err := s.checkApprovalHere(ctx, call.Actor, approvalID); err != nil {
		return Response{}, err // its held action waits on another live node (ownership.go)
	}
	defer func() {
		// Denied (or found closed): whatever it held never runs.
		if a, err := s.store.GetApproval(context.WithoutCancel(ctx), call.Actor.Tenant, approvalID); err == nil && a.State != task.ApprovalPending {
			s.denyHeld(ctx, approvalID)
		}
	}()
	return runCommand(ctx, s, call, r, func(ctx context.Context, tx Tx, cmd *Command) (*ApprovalResult, *refusal, error) {
		// Lock the task before the approval: the same order as cancel_task, so the two never deadlock.
		peek, err := tx.GetApproval(ctx, call.Actor.Tenant, approvalID)
		if err != nil {
			return nil, nil, err
		}
		c, err := s.beginOnTask(ctx, tx, cmd, peek.TaskID, false)
		if err != nil {
			return nil, nil, err
		}
		a, err := c.decide(ctx, call, approvalID, decision, reason)
		var e *Error
		if errors.As(err, &e) {
			return refused[*ApprovalResult](c.reject(ctx, e)) // recorded, with whatever decide wrote (an expiry)
		}
		if err != nil {
			return nil, nil, err
		}
		rc, err := c.receipt(ctx, task.Applied, "", "")
		if err != nil {
			return nil, nil, err
		}
		return &ApprovalResult{Approval: a, Receipt: rc}, nil, nil
	})
}

// decide records the caller's decision on a pending approval and lets the task run again when
// none is left pending. A refusal is an *Error for the caller to record as rejected; an approval
// found past its expiry is expired first (that is written even though the decision is refused).
func (c *commandCtx) decide(ctx context.Context, call Call, approvalID, decision, reason string) (*Approval, error) {
	a, err := c.tx.LockApproval(ctx, call.Actor.Tenant, approvalID)
	if err != nil {
		return nil, err
	}
	defer func() { c.cmd.note.approval, c.cmd.note.approvalState = a.ID, a.State }() // its state after the decision
	if a.State == task.ApprovalPending && !c.now.Before(a.ExpiresAt) {
		if err := c.asSystem("expire").expireApproval(ctx, a); err != nil {
			return nil, err
		}
	}
	if e := mayResolve(call, a); e != nil {
		return nil, e
	}
	next, err := a.State.Resolve(task.Decision(decision))
	if err != nil {
		return nil, Errorf(CodeApprovalNotPending, "approval is %s, not pending", a.State)
	}
	via := call.Via
	if via == "" {
		via = ViaAPI
	}
	a.State = next
	closed := c.now
	a.ClosedAt = &closed
	a.Decision = &Decision{Decision: decision, DecidedBy: call.Actor.Subject, Workload: call.ClientID, Via: via, Reason: reason, DecidedAt: c.now}
	if err := c.tx.CloseApproval(ctx, a, c.cmd.ID); err != nil {
		return nil, fmt.Errorf("closing approval: %w", err)
	}
	data := map[string]any{
		"approval_id": a.ID, "state": string(a.State), "decision": decision,
		"resolved_by": call.Actor.Subject, "resolved_via": via,
		"decided_by": call.Actor.Subject, // the name before resolved_by; kept for existing readers
	}
	if call.ClientID != "" {
		data["resolved_workload"] = call.ClientID // always, for a decision the database accepts (0021)
	}
	if err := c.emit(ctx, c.t, "approval.resolved", "resolve_approval", data); err != nil {
		return nil, err
	}
	return a, c.resumeIfNonePending(ctx, "resolve_approval")
}

// mayResolve refuses a caller that may not resolve a (403 approver_not_permitted). The detail
// names the caller, never what the approval holds.
func mayResolve(call Call, a *Approval) *Error {
	subject := call.Actor.Subject
	if call.Via == ViaElicitation {
		// The rule's explicit choice: the person at the requesting MCP client answers it.
		if a.Channel != ApprovalChannelElicitation {
			return Errorf(CodeApproverNotPermitted, "this approval's rule does not let an MCP elicitation answer it (channel %s): a separate approver resolves it", a.Channel)
		}
		if subject != a.RequestedBy {
			return Errorf(CodeApproverNotPermitted, "an approval's elicitation is answered by the MCP client that requested it")
		}
		return nil
	}
	if strings.HasPrefix(subject, workerSubjectPrefix) || strings.HasPrefix(subject, "system:") {
		return Errorf(CodeApproverNotPermitted, "a task's worker never resolves an approval")
	}
	caused := subject == a.RequestedBy || (a.OnBehalfOf != "" && subject == a.OnBehalfOf)
	if id := call.ClientID; id != "" && (id == a.RequestedClient || id == a.OnBehalfClient) {
		caused = true // the same client: another identity of whoever caused it
	}
	if caused {
		return Errorf(CodeApproverNotPermitted, "separation of duties: %s requested or caused this approval and may not resolve it; a separate approver must (in the local profile, the operator: bap approvals approve|deny)", subject)
	}
	return nil
}

// workerSubjectPrefix starts the subject of a delegated or autonomous task's worker (worker.go).
const workerSubjectPrefix = "worker:"

// asSystem is a context for state changes the runtime makes itself within c's transaction
// (events with the system actor and no command).
func (c *commandCtx) asSystem(op string) *commandCtx {
	return &commandCtx{s: c.s, tx: c.tx, cmd: &Command{Actor: systemActor, Operation: op, Tenant: c.t.Tenant}, t: c.t, now: c.now}
}

// expireApproval closes a pending approval as expired (approval.resolved, state expired): its held
// action is forgotten and never runs, and the task runs again when nothing else is pending.
func (c *commandCtx) expireApproval(ctx context.Context, a *Approval) error {
	next, err := a.State.Expire()
	if err != nil {
		return nil // already closed
	}
	c.s.forgetHeld(ctx, a.ID)
	a.State = next
	closed := c.now
	a.ClosedAt = &closed
	if err := c.tx.CloseApproval(ctx, a, ""); err != nil {
		return fmt.Errorf("expiring approval: %w", err)
	}
	if err := c.emit(ctx, c.t, "approval.resolved", "approval_expired", map[string]any{
		"approval_id": a.ID, "state": string(a.State),
	}); err != nil {
		return err
	}
	return c.resumeIfNonePending(ctx, "approval_expired")
}

// resumeIfNonePending lets a task waiting for approval run again once none is pending.
func (c *commandCtx) resumeIfNonePending(ctx context.Context, cause string) error {
	if c.t.State != task.WaitingForApproval {
		return nil
	}
	pending, err := c.tx.PendingApprovals(ctx, c.t.Tenant, c.t.ID)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return nil
	}
	if err := c.transition(ctx, c.t, task.ApprovalResolved, cause); err != nil {
		return err
	}
	// A side effect interrupted while it waited (another command's, a crash) opened a
	// reconciliation without moving it: it waits for the operator now, not runs (task.AfterWaits).
	if err := c.followWaits(ctx, cause); err != nil {
		return err
	}
	// Its sessions may have been lost while it waited (a node died with the held action): a
	// task with a checkpoint then waits in checkpointed for resume_task, as if they had been
	// lost while it ran. Resuming restores the browser, never the approval (issue #23 item 3).
	return c.afterSessionLost(ctx, c.t, cause)
}

// ExpireApprovals expires every pending approval whose expires_at has passed, in batches, and
// reports how many it expired. The daemon's upkeep calls it, so an approval expires even when
// nobody calls; resolve_approval also expires a due one before it decides.
func (s *Service) ExpireApprovals(ctx context.Context) (int, error) {
	n := 0
	for {
		due, err := s.store.DueApprovals(ctx, s.cfg.Now(), 100)
		if err != nil {
			return n, fmt.Errorf("listing approvals past their expiry: %w", err)
		}
		for _, ref := range due {
			if err := s.expireApprovalRef(ctx, ref); err != nil {
				return n, fmt.Errorf("expiring approval %s: %w", ref.ApprovalID, err)
			}
			n++
		}
		s.forgetExpiredHeld(ctx)
		if len(due) < 100 {
			return n, nil
		}
	}
}

// expireApprovalRef expires one approval in its own transaction (task locked first, as every
// command does); one that was resolved or whose expiry moved meanwhile is left alone.
func (s *Service) expireApprovalRef(ctx context.Context, ref ApprovalRef) error {
	return s.store.InTx(ctx, func(tx Tx) error {
		t, err := tx.LockTask(ctx, ref.Tenant, ref.TaskID)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		a, err := tx.LockApproval(ctx, ref.Tenant, ref.ApprovalID)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		now := s.cfg.Now()
		if a.State != task.ApprovalPending || now.Before(a.ExpiresAt) {
			return nil
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: systemActor, Operation: "expire", Tenant: ref.Tenant}, t: t, now: now}
		if err := c.expireApproval(ctx, a); err != nil {
			return err
		}
		return tx.UpdateTask(ctx, t)
	})
}

// forgetExpiredHeld drops this node's held actions whose approval expired (another node's upkeep
// may have expired it): their approval can never be approved.
func (s *Service) forgetExpiredHeld(ctx context.Context) {
	now := s.cfg.Now()
	s.held.Range(func(k, v any) bool {
		if h, ok := v.(held); ok && !h.expiresAt.IsZero() && !now.Before(h.expiresAt) {
			s.forgetHeld(ctx, k.(string))
		}
		return true
	})
}

// ListApprovals lists the approvals of the actor's tenant in state (default pending), oldest
// request first, at most limit (1–1000, default 100). Due approvals are expired first, so a
// pending one listed is still resolvable.
func (s *Service) ListApprovals(ctx context.Context, actor Actor, state string, limit int) ([]*Approval, error) {
	if state == "" {
		state = string(task.ApprovalPending)
	}
	st, err := task.ParseApprovalState(state)
	if err != nil {
		return nil, Errorf(CodeInvalidRequest, "state must be one of pending, approved, denied, cancelled, expired")
	}
	if limit <= 0 {
		limit = 100
	}
	if limit > 1000 {
		return nil, Errorf(CodeInvalidRequest, "limit must be at most 1000")
	}
	if _, err := s.ExpireApprovals(ctx); err != nil {
		return nil, err
	}
	return s.store.ListApprovals(ctx, actor.Tenant, st, limit)
}
