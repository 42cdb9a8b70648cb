package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/task"
)

// Human handoff (issue #18 item 5, ADR 0023). A person takes a running task over: the task
// waits in waiting_for_external_input with an open handoff (who, since when, a lease), and
// while it is open only that person's browser commands run on the task, through the same
// governed path as the agent's (origin policy, approval rules, receipts), recorded with the
// person as the actor; anyone else's answer 409 task_handed_off. Hand-back checkpoints the
// session, navigates its page again (a new document epoch: the agent's old node handles answer
// 409 stale_node_handle) and returns the task to running.
//
// Who may: an operator or approver, never the task's own agent — the rule of approvals'
// separation of duties (mayResolve): not a worker or the system, not the task's creator nor
// its OAuth client. The operations need bap:approvals.resolve and are not MCP tools.
//
// The lease: a person's commands stop when it lapses (task_handed_off, "lease expired"); the
// handoff stays open, so the agent keeps waiting, until someone hands back — hand-back needs the
// browser (a checkpoint, a new epoch), which no background sweep may drive on a person's page.
// The task's deadline still ends the task.

// Handoff states (task_handoff.state).
const (
	HandoffOpen     = "open"
	HandoffReturned = "returned"
)

// Lease bounds of a handoff.
const (
	DefaultHandoffLease = 15 * time.Minute
	MinHandoffLease     = 30 * time.Second
	MaxHandoffLease     = 4 * time.Hour
)

// Handoff is a person's takeover of a task, open or closed.
type Handoff struct {
	ID, Tenant, TaskID, SessionID string
	// Holder is the person's subject; Via how the takeover reached the server.
	Holder, Via    string
	State          string
	StartedAt      time.Time
	LeaseExpiresAt time.Time
	StartedCommand string
	EndedAt        *time.Time
	EndedBy        string
	EndedCommand   string
	CheckpointID   string
}

// HandoffResult is the result of take_over_task and hand_back_task.
type HandoffResult struct {
	Task       *Task
	Handoff    *Handoff
	Checkpoint *Checkpoint // hand_back_task's
	EpochID    string      // the new document epoch hand_back_task started
	Receipt    *Receipt
}

// mayHandOff refuses a caller that may not take over or hand back t: the task's own agent (its
// creator, its client, its worker) or the system.
func mayHandOff(call Call, t *Task) *Error {
	subject := call.Actor.Subject
	switch {
	case strings.HasPrefix(subject, workerSubjectPrefix) || strings.HasPrefix(subject, "system:"):
		return Errorf(CodeApproverNotPermitted, "a task's worker never takes over or hands back a task")
	case subject == t.CreatedBy || (call.ClientID != "" && call.ClientID == t.CreatedClient):
		return Errorf(CodeApproverNotPermitted, "%s created this task: its own agent never takes it over or hands it back; an operator or approver does (the console's Take over)", subject)
	}
	return nil
}

// handoffLease validates a requested lease (0: the default).
func handoffLease(d time.Duration) (time.Duration, error) {
	if d == 0 {
		return DefaultHandoffLease, nil
	}
	if d < MinHandoffLease || d > MaxHandoffLease {
		return 0, Errorf(CodeInvalidRequest, "lease_seconds must be between %d and %d", int(MinHandoffLease.Seconds()), int(MaxHandoffLease.Seconds()))
	}
	return d, nil
}

// TakeOverTask hands a running task over to the calling person on one of its open sessions.
func (s *Service) TakeOverTask(ctx context.Context, call Call, taskID, sessionID string, lease time.Duration, r Responder[*HandoffResult]) (Response, error) {
	lease, err := handoffLease(lease)
	if err != nil {
		return Response{}, err
	}
	return runCommand(ctx, s, call, r, func(ctx context.Context, tx Tx, cmd *Command) (*HandoffResult, *refusal, error) {
		c, err := s.beginOnTask(ctx, tx, cmd, taskID, false)
		if err != nil {
			return nil, nil, err
		}
		if e := mayHandOff(call, c.t); e != nil {
			return refused[*HandoffResult](c.reject(ctx, e))
		}
		if c.t.State != task.Running {
			return refused[*HandoffResult](c.reject(ctx, Errorf(CodeInvalidTransition, "task is %s; only a running task is taken over", c.t.State)))
		}
		rec, err := tx.LockSession(ctx, cmd.Tenant, sessionID)
		if errors.Is(err, ErrNotFound) || (err == nil && rec.TaskID != c.t.ID) {
			return refused[*HandoffResult](c.reject(ctx, &Error{Code: CodeNotFound, Detail: "the task has no such browser session"}))
		}
		if err != nil {
			return nil, nil, err
		}
		if rec.State != SessionOpen {
			return refused[*HandoffResult](c.reject(ctx, Errorf(CodeInvalidTransition, "the browser session is %s; a person takes over an open one", rec.State)))
		}
		via := call.Via
		if via == "" {
			via = ViaAPI
		}
		h := &Handoff{
			ID: ids.New(ids.Handoff), Tenant: cmd.Tenant, TaskID: c.t.ID, SessionID: rec.ID, Holder: cmd.Actor, Via: via,
			State: HandoffOpen, StartedAt: c.now, LeaseExpiresAt: c.now.Add(lease), StartedCommand: cmd.ID,
		}
		if err := tx.InsertHandoff(ctx, h); err != nil {
			return nil, nil, err
		}
		if err := c.transition(ctx, c.t, task.AwaitExternalInput, "take_over_task"); err != nil {
			return nil, nil, err
		}
		if err := c.emit(ctx, c.t, "handoff.started", "take_over_task", map[string]any{
			"handoff_id": h.ID, "session_id": h.SessionID, "holder": h.Holder, "via": h.Via,
			"lease_expires_at": h.LeaseExpiresAt.UTC().Format(time.RFC3339Nano),
		}); err != nil {
			return nil, nil, err
		}
		rc, err := c.receipt(ctx, task.Applied, "", "")
		if err != nil {
			return nil, nil, err
		}
		return &HandoffResult{Task: c.t, Handoff: h, Receipt: rc}, nil, nil
	})
}

// handBackPlan is what hand_back_task's phase 1 hands the browser.
type handBackPlan struct {
	sessionPlan
	handoff *Handoff
}

// handedBack is what the browser did for a hand-back: the state it checkpointed and the new
// document it loaded.
type handedBack struct {
	state *page.StorageState
	nav   *page.NavigateResult
}

// HandBackTask closes the task's open handoff: checkpoint, a new document epoch, running again.
func (s *Service) HandBackTask(ctx context.Context, call Call, taskID string, r Responder[*HandoffResult]) (Response, error) {
	if resp, ok, err := s.replayFirst(ctx, call); ok || err != nil {
		return resp, err
	}
	if _, err := s.browserOrUnavailable(); err != nil {
		return Response{}, err
	}
	return runTwoPhase(ctx, s, call, taskID, r, twoPhase[*handBackPlan, *handedBack, *HandoffResult]{
		prepare: func(ctx context.Context, c *commandCtx) (*handBackPlan, error) {
			if e := mayHandOff(call, c.t); e != nil {
				return nil, e
			}
			h, err := c.tx.OpenHandoff(ctx, c.t.Tenant, c.t.ID)
			if errors.Is(err, ErrNotFound) {
				return nil, Errorf(CodeInvalidTransition, "task is %s with no open handoff; there is nothing to hand back", c.t.State)
			}
			if err != nil {
				return nil, err
			}
			c.cmd.note.session = h.SessionID
			rec, err := c.tx.LockSession(ctx, c.t.Tenant, h.SessionID)
			if err != nil {
				return nil, err
			}
			return &handBackPlan{sessionPlan: sessionPlan{rec: rec, timeout: defaultCommandTimeout}, handoff: h}, nil
		},
		dispatch: func(ctx context.Context, p *handBackPlan) (*handedBack, error) {
			if p.rec.State != SessionOpen {
				return &handedBack{}, nil // nothing to checkpoint; the task runs again on a new session
			}
			return onLiveSession(s, 0, func(ctx context.Context, sess BrowserSession, sp *sessionPlan) (*handedBack, error) {
				st, err := sess.ExportState(ctx)
				if err != nil {
					return nil, err
				}
				url := ""
				for _, cs := range st.Contexts {
					if cs.Primary {
						url = cs.URL
					}
				}
				if url == "" {
					url = "about:blank"
				}
				// Loading the page again starts a new document epoch: every handle handed out
				// before (to the agent or the person) is stale.
				nav, err := sess.Navigate(ctx, page.NavigateRequest{URL: url, Timeout: sp.timeout})
				if err != nil {
					return nil, err
				}
				return &handedBack{state: st, nav: nav}, nil
			})(ctx, &p.sessionPlan)
		},
		finish: func(ctx context.Context, c *commandCtx, p *handBackPlan, out *handedBack, dispatchErr error) (*HandoffResult, task.Outcome, error) {
			if dispatchErr != nil {
				return finishFailed[*HandoffResult](ctx, c, p.rec, dispatchErr, false)
			}
			h := p.handoff
			res := &HandoffResult{Handoff: h}
			if out.state != nil {
				cp, err := c.storeCheckpoint(ctx, p.rec, out.state)
				if err != nil {
					return nil, "", err
				}
				res.Checkpoint, h.CheckpointID = cp, cp.ID
				if err := c.emit(ctx, c.t, "checkpoint.created", "hand_back_task", map[string]any{
					"checkpoint_id": cp.ID, "session_id": p.rec.ID,
				}); err != nil {
					return nil, "", err
				}
				if err := c.tx.RecordEpoch(ctx, c.t.Tenant, p.rec.ID, out.nav.ContextID, out.nav.EpochID, out.nav.URL); err != nil {
					return nil, "", err
				}
				s.noteUse(c.t.ID, p.rec.ID, out.nav.ContextID)
				res.EpochID = out.nav.EpochID
			}
			end := c.now
			h.State, h.EndedAt, h.EndedBy, h.EndedCommand = HandoffReturned, &end, c.cmd.Actor, c.cmd.ID
			if err := c.tx.CloseHandoff(ctx, h); err != nil {
				return nil, "", err
			}
			data := map[string]any{"handoff_id": h.ID, "session_id": h.SessionID, "returned_by": c.cmd.Actor}
			if res.Checkpoint != nil {
				data["checkpoint_id"], data["epoch_id"] = res.Checkpoint.ID, res.EpochID
			}
			if err := c.emit(ctx, c.t, "handoff.returned", "hand_back_task", data); err != nil {
				return nil, "", err
			}
			// An approval still pending holds a person's act on the page the reload just replaced:
			// it is cancelled (approval.resolved, state cancelled), and what it held never runs.
			if err := c.cancelPendingApprovals(ctx, c.t, task.ApprovalCancelled); err != nil {
				return nil, "", err
			}
			// Running again, unless a reconciliation is still open (a person's act interrupted
			// during the handoff): then the task waits for an operator to settle it.
			if err := c.followWaits(ctx, "hand_back_task"); err != nil {
				return nil, "", err
			}
			rc, err := c.receipt(ctx, task.Applied, "", "")
			if err != nil {
				return nil, "", err
			}
			res.Task, res.Receipt = c.t, rc
			return res, "", nil
		},
	})
}

// endHandoff closes the open handoff of t, which just ended another way than a hand-back (the
// holder's cancel_task, its deadline): returned, by whoever ended the task, with no checkpoint
// and no reload (the task's sessions close with it), and its handoff.returned event.
func (c *commandCtx) endHandoff(ctx context.Context, t *Task, cause string) error {
	h, err := c.tx.OpenHandoff(ctx, t.Tenant, t.ID)
	if errors.Is(err, ErrNotFound) {
		return nil // a reconciliation's wait
	}
	if err != nil {
		return err
	}
	end := c.now
	h.State, h.EndedAt, h.EndedBy, h.EndedCommand = HandoffReturned, &end, c.cmd.Actor, c.cmd.ID
	if err := c.tx.CloseHandoff(ctx, h); err != nil {
		return err
	}
	return c.emit(ctx, t, "handoff.returned", cause, map[string]any{
		"handoff_id": h.ID, "session_id": h.SessionID, "returned_by": c.cmd.Actor,
	})
}

// handedOff refuses a browser command on a task whose handoff is open, unless the person who
// holds it sends it within the lease (409 task_handed_off). It returns whether the command runs
// under the handoff (the task is then waiting_for_external_input, not running).
func (c *commandCtx) handedOff(ctx context.Context) (bool, error) {
	if c.t.State != task.WaitingForExternalInput {
		return false, nil // an open handoff always keeps the task there
	}
	h, err := c.tx.OpenHandoff(ctx, c.t.Tenant, c.t.ID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if e := handoffRefusal(h, c.cmd.Actor, c.now); e != nil {
		return false, e
	}
	return true, nil
}

// readHandedOff refuses a read (observe, query_nodes, extract) of a task handed off to someone
// else: the agent sees nothing of the person's page until it is handed back.
func (s *Service) readHandedOff(ctx context.Context, actor Actor, taskID string) error {
	h, err := s.store.OpenHandoff(ctx, actor.Tenant, taskID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if e := handoffRefusal(h, actor.Subject, s.cfg.Now()); e != nil {
		return e
	}
	return nil
}

// handoffRefusal is the 409 task_handed_off of a command by actor under the open handoff h (nil
// when actor holds it within its lease).
func handoffRefusal(h *Handoff, actor string, now time.Time) *Error {
	if h.Holder != actor {
		return &Error{Code: CodeTaskHandedOff, Detail: fmt.Sprintf(
			"a person took this task over (handoff %s, since %s); its commands answer 409 until they hand it back, which starts a new document epoch: observe again then",
			h.ID, h.StartedAt.UTC().Format(time.RFC3339))}
	}
	if !now.Before(h.LeaseExpiresAt) {
		return &Error{Code: CodeTaskHandedOff, Detail: fmt.Sprintf(
			"the lease of handoff %s expired at %s; hand the task back (or take it over again after handing back)",
			h.ID, h.LeaseExpiresAt.UTC().Format(time.RFC3339))}
	}
	return nil
}

// refuseHandedOff refuses a command on the task by anyone but the holder of its open handoff
// within the lease: 409 task_handed_off, whatever the command (close_task, request_approval,
// cancel_task, close_browser_session as much as a browser command). Nil when no handoff is open.
func (c *commandCtx) refuseHandedOff(ctx context.Context) error {
	_, err := c.handedOff(ctx)
	return err
}

// rejectHandedOff is refuseHandedOff for a command outside runTwoPhase: the refusal is recorded
// as the command's rejected receipt.
func (c *commandCtx) rejectHandedOff(ctx context.Context) (*refusal, error) {
	err := c.refuseHandedOff(ctx)
	var e *Error
	if errors.As(err, &e) {
		return c.reject(ctx, e)
	}
	return nil, err
}

// hold records what an approval's hold of an act does to c's task (task.Hold): a running task
// waits for approval; a task handed off to the acting person stays waiting for them, with the
// approval pending beside the handoff.
func (c *commandCtx) hold(ctx context.Context, cause string) error {
	handedOff, err := c.handedOff(ctx)
	if err != nil {
		return err
	}
	_, transition, err := task.Hold(c.t.State, handedOff)
	if err != nil {
		return Errorf(CodeInvalidTransition, "task is %s; an approval cannot hold its act", c.t.State)
	}
	if !transition {
		return nil
	}
	return c.transition(ctx, c.t, task.AwaitApproval, cause)
}

// requireRunning refuses a browser command on a task that does not run for its actor: a task
// that is not running, or one handed off to someone else.
func (c *commandCtx) requireRunning(ctx context.Context, what string) error {
	held, err := c.handedOff(ctx)
	if err != nil || held {
		return err
	}
	if c.t.State != task.Running {
		return Errorf(CodeInvalidTransition, "task is %s; %s need a running task", c.t.State, what)
	}
	return nil
}
