package app

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/task"
)

// Browser is the browser port as the use-cases need it: isolated sessions on the node's browser
// engines, addressed by the bs_ ids the runtime chooses. Nothing of an engine's protocol crosses
// it (requests, results and errors are package page's); which engine runs is only a name and its
// capabilities (engines.go). Implementations are safe for concurrent use.
type Browser interface {
	// Engines lists the engines this node is configured to run, its default first.
	Engines() []Engine
	// OpenSession opens an isolated session (own cookies and storage) on engine, governed by pol;
	// onEvent receives what happens in it (navigations, blocked requests, popups, dialogs, loss).
	OpenSession(ctx context.Context, engine, sessionID string, pol *policy.Policy, onEvent func(page.Event)) (BrowserSession, error)
	// Session finds an open session of this node.
	Session(sessionID string) (BrowserSession, bool)
}

// BrowserSession is one open session. Its methods return the page package's typed errors.
type BrowserSession interface {
	DefaultContext() string
	Navigate(ctx context.Context, req page.NavigateRequest) (*page.NavigateResult, error)
	Observe(ctx context.Context, req page.ObserveRequest) (*page.Snapshot, error)
	QueryNodes(ctx context.Context, req page.QueryRequest) (*page.QueryResult, error)
	Act(ctx context.Context, req page.ActRequest) (*page.ActResult, error)
	// Release sends the request the browser held (ActResult.Held), exactly once, and returns once
	// the site answered; Deny fails it (heldrequest.go).
	Release(ctx context.Context, holdID string) (*page.ActResult, error)
	Deny(ctx context.Context, holdID string) error
	ClassifyAction(ctx context.Context, req page.ActRequest) (effect, origin string, err error)
	Extract(ctx context.Context, req page.ExtractRequest) (*page.ExtractResult, error)
	// Screenshot returns a PNG of a browsing context ("" for the default context): its viewport,
	// the whole page, or one node's box.
	Screenshot(ctx context.Context, req page.ScreenshotRequest) ([]byte, error)
	// CaptureMHTML returns an MHTML snapshot of a browsing context's document.
	CaptureMHTML(ctx context.Context, contextID string) ([]byte, error)
	// ExportState returns the session's restorable state (cookies, storage, URLs, viewport).
	ExportState(ctx context.Context) (*page.StorageState, error)
	// RestoreState writes a state into this fresh session and navigates its primary context to
	// the state's URL (a new epoch).
	RestoreState(ctx context.Context, st *page.StorageState) (*page.RestoreResult, error)
	// Record makes the session archive what it exchanges into rec (policy.record, recording.go),
	// from now until it closes; an engine that cannot answers an error.
	Record(rec page.Recorder) error
	// ServeFrom makes the session answer every request from a, its task's replayed archive
	// (replay.go), and never reach the network again; an engine that cannot answers an error.
	ServeFrom(a page.Archive) error
	// RefuseUnsafe makes the session send only plain-HTTP requests with a safe method from now
	// on (a live dry-run replay, replay.go); an engine that cannot answers an error.
	RefuseUnsafe() error
	// Watch calls onFrame with the session's live view (JPEG frames of the viewport the agent
	// works in, at most one per page.LiveFrameInterval, shared by every watcher, nothing captured
	// while nobody watches) until ctx ends, onFrame fails, or the session closes or is lost
	// (page.ErrSessionClosed, page.ErrSessionLost). Frames are not stored.
	Watch(ctx context.Context, onFrame func(page.LiveFrame) error) error
	Close(ctx context.Context) error
}

// Session states of browser_session.
const (
	SessionOpen   = "open"
	SessionClosed = "closed"
	SessionLost   = "lost"
)

// SessionRecord is a browser session as the runtime records it.
type SessionRecord struct {
	ID        string
	Tenant    string
	TaskID    string
	NodeID    string
	State     string
	ContextID string // the session's first browsing context
	// FromCheckpoint is the checkpoint the session was restored from ("" for a fresh one).
	FromCheckpoint string
	// Engine is the browser engine it runs on, EngineVersion its browser's version when it opened
	// ("" for a session recorded before engines were).
	Engine, EngineVersion string
	CreatedAt             time.Time
	EndedAt               *time.Time
}

// SessionResult is the result of create_browser_session and close_browser_session.
type SessionResult struct {
	Session *SessionRecord
	Receipt *Receipt
}

// NavigateResult is the result of navigate.
type NavigateResult struct {
	page.NavigateResult
	Receipt *Receipt
}

// ActResult is the result of an act that ran.
type ActResult struct {
	page.ActResult
	Receipt *Receipt
	// DownloadArtifacts holds, per entry of Downloads, the artifact its content was stored as
	// ("" when the browser kept no content: over the size limit, failed, cancelled).
	DownloadArtifacts []string
}

// defaultCommandTimeout bounds a browser command without timeout_ms (CONTRACT: 30 s).
const defaultCommandTimeout = 30 * time.Second

func (s *Service) browserOrUnavailable() (Browser, error) {
	if s.cfg.Browser != nil {
		for _, e := range s.cfg.Browser.Engines() {
			if e.Available {
				return s.cfg.Browser, nil
			}
		}
	}
	return nil, &Error{Code: CodeBrowserUnavailable,
		Detail: "no browser runs on this node: install the Debian package `chromium` (or set BAP_CHROMIUM) and restart"}
}

// browserProblem maps a browser error to the problem the client gets and the receipt outcome
// the command is recorded with.
func browserProblem(err error, sideEffecting bool) (*Error, task.Outcome) {
	if e, outcome, ok := cancelProblem(err, sideEffecting); ok {
		return e, outcome
	}
	var origin *page.OriginNotAllowedError
	var timeout *page.ActionTimeoutError
	var nav *page.NavigationError
	var secretOrigin *page.SecretOriginError
	var own *Error
	switch {
	case errors.As(err, &own) && own.Code == CodeReplayNotPossible:
		return own, task.Rejected // a replay's session that could not serve its archive (replay.go)
	case errors.As(err, &secretOrigin):
		return Errorf(CodeSecretOriginMismatch, "the field is in a document of %q, not one of the secret's origins; nothing was typed", secretOrigin.Origin), task.Rejected
	case errors.As(err, &origin):
		return Errorf(CodeOriginNotAllowed, "%s is outside the task's allowed origins; nothing was loaded", origin.URL), task.Rejected
	case errors.As(err, &timeout):
		return Errorf(CodeActionTimeout, "the action did not become possible in time: %s", timeout.Reason), task.Rejected
	case errors.As(err, &nav):
		return Errorf(CodeNavigationFailed, "navigation to %s failed: %s", nav.URL, nav.Reason), task.Rejected
	case errors.Is(err, page.ErrHoldAbandoned):
		// Reported, not hidden in a 500: the approval was recorded, but what it approved was gone.
		return Errorf(CodeActionTimeout, "the page gave up the held request while it waited for approval (it timed out, was aborted, or its document went away); nothing was sent"), task.Rejected
	case errors.Is(err, page.ErrStaleNodeHandle):
		return staleHandleProblem(err), task.Rejected // with its reason (handles.go)
	case errors.Is(err, page.ErrNoSuchContext):
		return &Error{Code: CodeNotFound, Detail: "no such browsing context in this session"}, task.Rejected
	case errors.Is(err, page.ErrObservationStale):
		return &Error{Code: CodeObservationStale, Detail: "the observation belongs to an earlier document epoch of this context; observe again without since or cursor"}, task.Rejected
	case errors.Is(err, page.ErrNoSuchObservation):
		return &Error{Code: CodeNotFound, Detail: "the session keeps no such observation of this context (it keeps the most recent few); observe again without since"}, task.Rejected
	case errors.Is(err, page.ErrNoSuchNode):
		return &Error{Code: CodeNotFound, Detail: "no such node (unknown handle, or the query matched nothing)"}, task.Rejected
	case errors.Is(err, page.ErrInvalidRequest):
		return &Error{Code: CodeInvalidRequest, Detail: err.Error()}, task.Rejected
	case errors.Is(err, errSessionElsewhere):
		return heldElsewhere(), task.Rejected
	case errors.Is(err, errSessionNotHeld):
		return &Error{Code: CodeBrowserSessionLost, Detail: "the browser session was lost; open a new session"}, task.Rejected
	case errors.Is(err, page.ErrSessionLost), errors.Is(err, page.ErrSessionClosed):
		return &Error{Code: CodeBrowserSessionLost, Detail: "the browser session was lost; open a new session"}, task.ClassifyInterrupted(sideEffecting)
	case errors.Is(err, errRecording):
		return &Error{Code: CodeBrowserUnavailable, Detail: "the task records its sessions (policy.record), and this node could not start the session's archive; the operator's log says why"}, task.Rejected
	case errors.Is(err, page.ErrUnavailable):
		// Not the engine's own words: they may name paths of this machine. The operator's log has them.
		return &Error{Code: CodeBrowserUnavailable, Detail: "the session's browser engine does not run on this node (not installed, failed to start, or restarting); GET /bap/v1 lists each engine and whether it is available"}, task.Rejected
	case errors.Is(err, page.ErrTooManySessions):
		return &Error{Code: CodeOverloaded, Detail: "this node runs as many browser sessions as it may", RetryAfter: 5 * time.Second}, task.Rejected
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeActionTimeout, Detail: "the command did not finish within its timeout"}, task.ClassifyInterrupted(sideEffecting)
	default:
		return nil, ""
	}
}

// sessionPlan is what phase 1 of a session command hands to dispatch.
type sessionPlan struct {
	rec     *SessionRecord
	timeout time.Duration
	// record is the task's policy.record (its steps leave what a replay needs, replaystep.go), or
	// the task is a replay (its steps leave what it compares, replay.go).
	record bool
}

// prepareSession is phase 1 of a command on an open session: the session (locked), checked
// usable, and the command's timeout.
func prepareSession(sessionID string, timeout time.Duration) func(context.Context, *commandCtx) (*sessionPlan, error) {
	return func(ctx context.Context, c *commandCtx) (*sessionPlan, error) {
		c.cmd.note.session = sessionID
		rec, err := c.prepareOnSession(ctx, sessionID)
		if err != nil {
			return nil, err
		}
		return &sessionPlan{rec: rec, timeout: timeout, record: c.t.Policy.Record || c.t.ReplayOf != ""}, nil
	}
}

// onLiveSession is phase 2 of a command on a session: fn runs on this node's live session,
// bounded by the plan's timeout plus margin.
func onLiveSession[O any](s *Service, margin time.Duration, fn func(ctx context.Context, sess BrowserSession, p *sessionPlan) (O, error)) func(context.Context, *sessionPlan) (O, error) {
	return func(ctx context.Context, p *sessionPlan) (O, error) {
		sess, err := s.liveSession(ctx, p.rec)
		if err != nil {
			var zero O
			return zero, err
		}
		ctx, cancel := context.WithTimeout(ctx, p.timeout+margin)
		defer cancel()
		return fn(ctx, sess, p)
	}
}

// prepareOnSession checks, inside phase 1, that the session is open and its task may act, and
// starts an admitted task.
func (c *commandCtx) prepareOnSession(ctx context.Context, sessionID string) (*SessionRecord, error) {
	rec, err := c.tx.LockSession(ctx, c.cmd.Tenant, sessionID)
	if err != nil {
		return nil, err
	}
	switch rec.State {
	case SessionLost:
		return nil, &Error{Code: CodeBrowserSessionLost, Detail: "the browser session was lost; open a new session"}
	case SessionClosed:
		return nil, &Error{Code: CodeInvalidTransition, Detail: "the browser session is closed"}
	}
	if err := c.startIfAdmitted(ctx); err != nil {
		return nil, err
	}
	if err := c.requireRunning(ctx, "browser commands"); err != nil {
		return nil, err
	}
	return rec, nil
}

func (c *commandCtx) startIfAdmitted(ctx context.Context) error {
	if c.t.State == task.Admitted {
		return c.transition(ctx, c.t, task.Start, c.cmd.Operation)
	}
	return nil
}

// liveSession finds the in-memory session of a record; a session this node no longer holds (it
// restarted, or the browser crashed) is marked lost.
func (s *Service) liveSession(ctx context.Context, rec *SessionRecord) (BrowserSession, error) {
	b, err := s.browserOrUnavailable()
	if err != nil {
		return nil, err
	}
	if sess, ok := b.Session(rec.ID); ok {
		return s.traced(sess, rec.ID), nil
	}
	if elsewhere, err := s.heldByOtherLiveNode(ctx, rec); err != nil || elsewhere {
		if err == nil {
			err = errSessionElsewhere // another live node holds it: not lost (ownership.go)
		}
		return nil, err
	}
	if err := s.markSessionLost(ctx, rec.Tenant, rec.ID, "not held by this node"); err != nil {
		s.cfg.Logger.Error("marking session lost", "session_id", rec.ID, "err", err)
	}
	return nil, errSessionNotHeld
}

// errSessionNotHeld reports a session found gone before anything was sent to it: the command had
// no effect, whatever it was.
var errSessionNotHeld = fmt.Errorf("%w: not held by this node", page.ErrSessionLost)

// sessionFor reads a session of the actor's tenant for a read operation.
func (s *Service) sessionFor(ctx context.Context, actor Actor, sessionID string) (*SessionRecord, BrowserSession, error) {
	rec, err := s.store.GetSession(ctx, actor.Tenant, sessionID)
	if err != nil {
		return nil, nil, err
	}
	switch rec.State {
	case SessionLost:
		return nil, nil, &Error{Code: CodeBrowserSessionLost, Detail: "the browser session was lost; open a new session"}
	case SessionClosed:
		return nil, nil, &Error{Code: CodeInvalidTransition, Detail: "the browser session is closed"}
	}
	if err := s.checkHeldHere(ctx, rec); err != nil {
		return nil, nil, err
	}
	sess, err := s.liveSession(ctx, rec)
	if err != nil {
		if e, _ := browserProblem(err, false); e != nil {
			return nil, nil, e
		}
		return nil, nil, err
	}
	return rec, sess, nil
}

func timeoutOf(ms int) time.Duration {
	if ms <= 0 {
		return defaultCommandTimeout
	}
	return time.Duration(ms) * time.Millisecond
}

// SessionRequest is the input of create_browser_session.
type SessionRequest struct {
	// FromCheckpoint restores the session from a checkpoint of the same (running) task
	// (checkpoint.go); "" opens a fresh one.
	FromCheckpoint string
	// Engine is the browser engine to open it on; "": the checkpoint's, else the node's default.
	Engine string
}

// CreateBrowserSession opens an isolated browser session for a task; the task's first session
// starts it.
func (s *Service) CreateBrowserSession(ctx context.Context, call Call, taskID string, req SessionRequest, r Responder[*SessionResult]) (Response, error) {
	return openSession(ctx, s, call, taskID, req.FromCheckpoint, req.Engine, false, r,
		func(_ *Task, rec *SessionRecord, rc *Receipt) *SessionResult {
			return &SessionResult{Session: rec, Receipt: rc}
		})
}

// openSession opens a session on engine ("" for the default), fresh or restored from a
// checkpoint; resume also moves a checkpointed task back to running (resume_task). result makes
// the command's result of the opened session.
func openSession[R any](ctx context.Context, s *Service, call Call, taskID, checkpointID, engine string, resume bool, r Responder[R],
	result func(t *Task, rec *SessionRecord, rc *Receipt) R,
) (Response, error) {
	if resp, ok, err := s.replayFirst(ctx, call); ok || err != nil {
		return resp, err // the first answer, whatever became of the checkpoint or the browser
	}
	var cp *Checkpoint
	var state *page.StorageState
	if checkpointID != "" {
		// An unknown checkpoint (or another tenant's) is refused before it becomes a command.
		var err error
		if cp, state, err = s.loadCheckpoint(ctx, call.Actor, checkpointID); err != nil {
			return Response{}, err
		}
	}
	// Restoring into another engine than the checkpoint's is refused as a command (phase 1);
	// an engine the node does not run (or no browser at all), before it becomes one.
	var cpEngine string
	if cp != nil {
		cpEngine = cp.Engine
	}
	mismatch := cp != nil && engine != "" && engine != cp.Engine
	eng, err := s.chooseEngine(engine, cpEngine)
	if err != nil && !mismatch {
		return Response{}, err
	}
	b := s.cfg.Browser
	adm := &sessionAdmission{} // held until the session's row is committed (limits.go)
	defer adm.done()
	resp, err := runTwoPhase(ctx, s, call, taskID, r, twoPhase[*openPlan, *opened, R]{
		prepare: func(ctx context.Context, c *commandCtx) (*openPlan, error) {
			if resume {
				if _, err := task.Next(c.t.State, task.Resume); err != nil {
					return nil, Errorf(CodeInvalidTransition, "task is %s; only a checkpointed task can be resumed", c.t.State)
				}
			} else {
				if err := c.startIfAdmitted(ctx); err != nil {
					return nil, err
				}
				if err := c.requireRunning(ctx, "browser sessions"); err != nil {
					return nil, err
				}
			}
			if cp != nil {
				if err := s.checkCheckpoint(cp, c.t, c.now); err != nil {
					return nil, err
				}
				if mismatch {
					return nil, Errorf(CodeCheckpointIncompatible, "the checkpoint was taken on %s; it restores only into a %s session", cp.Engine, cp.Engine)
				}
			}
			if err := s.admitSession(ctx, c, adm); err != nil {
				return nil, err // a capacity refusal rolls phase 1 back: not recorded (limits.go)
			}
			pol, err := taskPolicy(c.t)
			if err != nil {
				return nil, err
			}
			for _, need := range policyNeeds(pol) {
				if !eng.Has(need) {
					return nil, Errorf(CodeEngineCapabilityUnsupported, "the task's policy needs %s, which the browser engine %s cannot do; open the session on another engine", need, eng.Name)
				}
			}
			if c.t.Policy.Record && s.cfg.Recording == nil {
				return nil, Errorf(CodeBrowserUnavailable, "the task records its sessions (policy.record), which this node cannot do")
			}
			return &openPlan{id: ids.New(ids.BrowserSession), pol: pol, tenant: c.t.Tenant, taskID: c.t.ID, state: state, record: c.t.Policy.Record, task: c.t}, nil
		},
		dispatch: func(ctx context.Context, p *openPlan) (*opened, error) {
			defer adm.dispatched() // the browser counts the session (if it opened) from now on
			ctx, cancel := context.WithTimeout(ctx, defaultCommandTimeout)
			defer cancel()
			sess, err := s.openBrowserSession(ctx, b, eng.Name, p.id, p.pol, s.browserEventSink(p.tenant, p.taskID, p.id))
			if err == nil {
				err = s.readyOpened(ctx, sess, p)
			}
			if err != nil || p.state == nil {
				return &opened{sess: sess}, err
			}
			res, err := sess.RestoreState(ctx, p.state)
			if err != nil {
				// A half-restored session is of no use: close it, report why.
				cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer ccancel()
				_ = sess.Close(cctx)
				return nil, err
			}
			return &opened{sess: sess, restored: res}, nil
		},
		finish: func(ctx context.Context, c *commandCtx, p *openPlan, o *opened, dispatchErr error) (none R, _ task.Outcome, _ error) {
			if dispatchErr != nil {
				if errors.Is(dispatchErr, page.ErrUnavailable) {
					s.cfg.Logger.Warn("opening a browser session: the engine is unavailable", "engine", eng.Name, "err", dispatchErr)
				}
				if e, outcome := browserProblem(dispatchErr, false); e != nil {
					return none, outcome, e
				}
				if p.state != nil {
					return none, task.Rejected, Errorf(CodeBrowserUnavailable, "the checkpoint could not be restored: %v", dispatchErr)
				}
				return none, "", dispatchErr
			}
			rec := &SessionRecord{ID: p.id, Tenant: c.t.Tenant, TaskID: c.t.ID, NodeID: s.cfg.NodeID, State: SessionOpen,
				ContextID: o.sess.DefaultContext(), CreatedAt: c.now, Engine: eng.Name, EngineVersion: s.engineVersion(eng)}
			if cp != nil {
				rec.FromCheckpoint = cp.ID
			}
			if err := c.tx.InsertSession(ctx, rec); err != nil {
				return none, "", err
			}
			if err := c.tx.RecordContext(ctx, rec.Tenant, rec.ID, rec.ContextID, ""); err != nil {
				return none, "", err
			}
			data := map[string]any{"session_id": rec.ID, "context_id": rec.ContextID, "engine": rec.Engine}
			if rec.EngineVersion != "" {
				data["engine_version"] = rec.EngineVersion
			}
			if cp != nil {
				data["from_checkpoint"] = cp.ID
			}
			if err := c.emit(ctx, c.t, "browser_session.opened", c.cmd.Operation, data); err != nil {
				return none, "", err
			}
			if o.restored != nil {
				if err := c.tx.RecordEpoch(ctx, rec.Tenant, rec.ID, o.restored.ContextID, o.restored.EpochID, o.restored.URL); err != nil {
					return none, "", err
				}
				s.noteUse(c.t.ID, rec.ID, o.restored.ContextID)
				// The checkpoint's other tabs, reopened: recorded as opened from the primary one
				// (their old openers died with the old session), which stays the session's first.
				for _, r := range o.restored.Contexts {
					ev := page.Event{Type: page.EventContextOpened, ContextID: r.ContextID, Data: map[string]any{"opener": rec.ContextID}}
					if _, err := c.recordBrowserEvent(ctx, rec.ID, ev, c.cmd.Operation); err != nil {
						return none, "", err
					}
				}
				// What the restore's navigations reported: held back by the browser until the
				// session they belong to is recorded (now).
				for _, ev := range o.restored.Events {
					if _, err := c.recordBrowserEvent(ctx, rec.ID, ev, c.cmd.Operation); err != nil {
						return none, "", err
					}
				}
			}
			if resume {
				if err := c.transition(ctx, c.t, task.Resume, "resume_task"); err != nil {
					return none, "", err
				}
			}
			rc, err := c.receipt(ctx, task.Applied, "", "")
			if err != nil {
				return none, "", err
			}
			return result(c.t, rec, rc), "", nil
		},
	})
	return resp, refusalProblem(err)
}

type openPlan struct {
	id, tenant, taskID string
	record             bool  // policy.record: the session gets a recorder before anything loads
	task               *Task // for the secrets its recorder masks from the start
	pol                *policy.Policy
	state              *page.StorageState // restore this (from a checkpoint) when set
}

type opened struct {
	sess     BrowserSession
	restored *page.RestoreResult
}

func taskPolicy(t *Task) (*policy.Policy, error) {
	rules := make([]policy.ApprovalRule, 0, len(t.Policy.ApprovalRules))
	for _, r := range t.Policy.ApprovalRules {
		rules = append(rules, policy.ApprovalRule{Effect: policy.Effect(r.Effect), Origins: r.Origins})
	}
	p, err := policy.ParsePolicy(t.Policy.AllowedOrigins, rules)
	if err != nil {
		return nil, fmt.Errorf("task %s has an invalid stored policy: %w", t.ID, err)
	}
	return p, nil
}

// sessionTask finds the task of a session of the actor's tenant.
func (s *Service) sessionTask(ctx context.Context, actor Actor, sessionID string) (string, error) {
	rec, err := s.sessionOf(ctx, actor, sessionID)
	if err != nil {
		return "", err
	}
	return rec.TaskID, nil
}

// sessionOf reads a session of the actor's tenant that this node holds (or held).
func (s *Service) sessionOf(ctx context.Context, actor Actor, sessionID string) (*SessionRecord, error) {
	rec, err := s.store.GetSession(ctx, actor.Tenant, sessionID)
	if err != nil {
		return nil, err
	}
	if err := s.checkHeldHere(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// CloseBrowserSession closes a session and its browsing contexts.
func (s *Service) CloseBrowserSession(ctx context.Context, call Call, sessionID string, r Responder[*SessionResult]) (Response, error) {
	taskID, err := s.sessionTask(ctx, call.Actor, sessionID)
	if err != nil {
		return Response{}, err
	}
	return runTwoPhase(ctx, s, call, taskID, r, twoPhase[*SessionRecord, struct{}, *SessionResult]{
		prepare: func(ctx context.Context, c *commandCtx) (*SessionRecord, error) {
			if err := c.refuseHandedOff(ctx); err != nil {
				return nil, err
			}
			rec, err := c.tx.LockSession(ctx, c.cmd.Tenant, sessionID)
			if err != nil {
				return nil, err
			}
			if rec.State == SessionLost {
				return nil, Errorf(CodeInvalidTransition, "the browser session is %s", rec.State)
			}
			return rec, nil // a closed one (by its client, or because its task ended) stays closed
		},
		dispatch: func(ctx context.Context, plan *SessionRecord) (struct{}, error) {
			if s.cfg.Browser == nil || plan.State != SessionOpen {
				return struct{}{}, nil
			}
			if sess, ok := s.cfg.Browser.Session(sessionID); ok {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := sess.Close(ctx); err != nil && !errors.Is(err, page.ErrSessionClosed) {
					s.cfg.Logger.Warn("closing browser session", "session_id", sessionID, "err", err)
				}
			}
			return struct{}{}, nil
		},
		finish: func(ctx context.Context, c *commandCtx, plan *SessionRecord, _ struct{}, _ error) (*SessionResult, task.Outcome, error) {
			rec, err := c.tx.LockSession(ctx, c.cmd.Tenant, plan.ID)
			if err != nil {
				return nil, "", err
			}
			if rec.State != SessionOpen {
				// Closed already (before this command, or meanwhile because its task ended).
				rc, err := c.receipt(ctx, task.NoSideEffect, "", "the browser session was closed already")
				if err != nil {
					return nil, "", err
				}
				return &SessionResult{Session: rec, Receipt: rc}, "", nil
			}
			end := c.now
			rec.State, rec.EndedAt = SessionClosed, &end
			if err := c.tx.UpdateSession(ctx, rec); err != nil {
				return nil, "", err
			}
			if err := c.emit(ctx, c.t, "browser_session.closed", "close_browser_session", map[string]any{"session_id": rec.ID}); err != nil {
				return nil, "", err
			}
			rc, err := c.receipt(ctx, task.Applied, "", "")
			if err != nil {
				return nil, "", err
			}
			return &SessionResult{Session: rec, Receipt: rc}, "", nil
		},
	})
}

// Navigate loads a URL in a browsing context of the session. The origin policy is enforced by
// the browser for the navigation and everything it loads.
func (s *Service) Navigate(ctx context.Context, call Call, sessionID string, req page.NavigateRequest, timeoutMs int, r Responder[*NavigateResult]) (Response, error) {
	if resp, ok, err := s.replayFirst(ctx, call); ok || err != nil {
		return resp, err
	}
	if _, err := s.browserOrUnavailable(); err != nil {
		return Response{}, err
	}
	taskID, err := s.sessionTask(ctx, call.Actor, sessionID)
	if err != nil {
		return Response{}, err
	}
	return runTwoPhase(ctx, s, call, taskID, r, twoPhase[*sessionPlan, navOut, *NavigateResult]{
		sideEffecting: false, // a GET navigation is safe (CONTRACT "Mutating requests")
		prepare:       notingOrigin(req.URL, prepareSession(sessionID, timeoutOf(timeoutMs))),
		dispatch: onLiveSession(s, 0, func(ctx context.Context, sess BrowserSession, p *sessionPlan) (navOut, error) {
			req.Timeout = p.timeout
			res, err := sess.Navigate(ctx, req)
			var tr *stepTrace
			if err == nil && p.record {
				tr = &stepTrace{}
				s.traceAfter(ctx, sess, res.ContextID, tr)
			}
			return navOut{res: res, trace: tr}, err
		}),
		finish: func(ctx context.Context, c *commandCtx, plan *sessionPlan, out navOut, dispatchErr error) (*NavigateResult, task.Outcome, error) {
			if dispatchErr != nil {
				return finishFailed[*NavigateResult](ctx, c, plan.rec, dispatchErr, false)
			}
			res := out.res
			s.noteUse(c.t.ID, plan.rec.ID, res.ContextID)
			if err := c.tx.RecordEpoch(ctx, c.t.Tenant, plan.rec.ID, res.ContextID, res.EpochID, res.URL); err != nil {
				return nil, "", err
			}
			if out.trace != nil {
				if err := c.emit(ctx, c.t, "record.step", "navigate", stepData(plan.rec.ID, c.cmd.ID, "navigate", &req, nil, out.trace)); err != nil {
					return nil, "", err
				}
			}
			rc, err := c.receipt(ctx, task.Applied, "", "")
			if err != nil {
				return nil, "", err
			}
			return &NavigateResult{NavigateResult: *res, Receipt: rc}, "", nil
		},
	})
}

// readyOpened readies a fresh session before anything loads (a restore navigates): a recording
// task's archive starts with the session, and a replay's session answers from the replayed
// task's archive, never from the network (replay.go).
func (s *Service) readyOpened(ctx context.Context, sess BrowserSession, p *openPlan) error {
	if p.record {
		if err := s.recordSession(ctx, sess, p.task, p.id); err != nil {
			return err
		}
	}
	switch {
	case p.task.ReplayOf == "":
	case p.task.ReplayMode == ReplayLiveDryRun:
		if err := sess.RefuseUnsafe(); err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = sess.Close(cctx)
			return err
		}
	default: // an archive replay, whatever else the row says: fail closed
		return s.serveReplay(ctx, sess, p.task)
	}
	return nil
}

// finishFailed records a browser command that failed: its problem, the loss of the session, and
// for an interrupted side effect a reconciliation.
func finishFailed[R any](ctx context.Context, c *commandCtx, rec *SessionRecord, err error, sideEffecting bool) (none R, _ task.Outcome, _ error) {
	e, outcome := browserProblem(err, sideEffecting)
	if e == nil {
		return none, "", err
	}
	if e.Code == CodeBrowserSessionLost {
		// Read it again: the dispatch may have found it gone and recorded that already.
		cur, err := c.tx.LockSession(ctx, rec.Tenant, rec.ID)
		if err != nil {
			return none, "", err
		}
		rec = cur
	}
	if e.Code == CodeBrowserSessionLost && rec.State == SessionOpen {
		// An interrupted side effect leaves the task to the reconciliation (below), not to the
		// loss of its session.
		data := map[string]any{"session_id": rec.ID}
		if err := c.loseSession(ctx, rec, c.cmd.Operation, data, outcome != task.ReconciliationRequired); err != nil {
			return none, "", err
		}
	}
	if outcome == task.ReconciliationRequired {
		if err := c.openReconciliation(ctx, c.cmd.ID, c.cmd.Operation, c.cmd.Operation); err != nil {
			return none, "", err
		}
	}
	return none, outcome, e
}

// actSession reads the session an act targets (held by this node) and, for upload_file, attaches
// the artifact it sends: its bytes, its media type. The artifact passes the checks of
// get_artifact (the caller's tenant, a kind that is ever served; the transport checks the
// bap:artifacts.read capability), so nothing the caller could not read goes into a page.
func (s *Service) actSession(ctx context.Context, call Call, sessionID string, req *page.ActRequest, artifactID string) (*SessionRecord, error) {
	if artifactID != "" {
		a, content, err := s.store.GetArtifact(ctx, call.Actor.Tenant, artifactID)
		if err != nil {
			return nil, err
		}
		if err := servable(a); err != nil {
			return nil, err
		}
		req.Files = []page.File{{Name: artifactID + extensionOf(a.MediaType), MediaType: a.MediaType, Content: content}}
	}
	rec, err := s.store.GetSession(ctx, call.Actor.Tenant, sessionID)
	if err != nil {
		return nil, err
	}
	if err := s.checkHeldHere(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// Act performs an action on the page. It is recorded before it is dispatched and its receipt
// after, so a retry with the same key never acts twice.
func (s *Service) Act(ctx context.Context, call Call, sessionID string, req page.ActRequest, artifactID string, timeoutMs int, r Responder[*ActOutcome]) (Response, error) {
	if resp, ok, err := s.replayFirst(ctx, call); ok || err != nil {
		return resp, err
	}
	if _, err := s.browserOrUnavailable(); err != nil {
		return Response{}, err
	}
	rec, err := s.actSession(ctx, call, sessionID, &req, artifactID)
	if err != nil {
		return Response{}, err
	}
	if req.Action == "upload_file" { // refused before it becomes a command: the engine cannot
		if err := s.requireCapability(rec.Engine, CapFileUpload, "upload files"); err != nil {
			return Response{}, err
		}
	}
	secretName, err := s.resolveSecretFill(ctx, call.Actor, &req) // secrets.go
	if err != nil {
		return Response{}, err
	}
	taskID := rec.TaskID
	s.protectFill(rec.Tenant, taskID, req, secretName) // masked in the task's archive before it is typed
	if rec.State == SessionOpen {
		effect, rule, spec, err := s.approvalRule(ctx, call.Actor, rec, req)
		if err != nil {
			err = s.explainHandle(ctx, call.Actor.Tenant, sessionID, err, req.NodeID, actWithin(req))
			if e, _ := browserProblem(err, false); e != nil {
				return Response{}, e
			}
			return Response{}, err
		}
		if spec != nil {
			return s.holdAction(ctx, call, rec, req, timeoutMs, effect,
				fmt.Sprintf("approval rule %d holds this %s (%s)", rule, req.Action, effect), spec, r)
		}
	}
	return runTwoPhase(ctx, s, call, taskID, r, twoPhase[*sessionPlan, actOut, *ActOutcome]{
		sideEffecting: true,
		prepare:       prepareSession(sessionID, timeoutOf(timeoutMs)),
		// The action's own timeout bounds the actionability wait; the extra margin lets the
		// browser report what blocked before our deadline cuts it off.
		dispatch: onLiveSession(s, 5*time.Second, func(ctx context.Context, sess BrowserSession, p *sessionPlan) (actOut, error) {
			req.Timeout = p.timeout
			var tr *stepTrace
			if p.record {
				tr = s.traceActBefore(ctx, sess, req)
			}
			res, err := sess.Act(ctx, req)
			if err == nil && res.Held != nil {
				return actOut{held: holdScreenshot(ctx, sess, res)}, nil
			}
			if err != nil {
				return actOut{}, s.explainHandle(ctx, call.Actor.Tenant, sessionID, err, req.NodeID, actWithin(req))
			}
			if tr != nil {
				s.traceActAfter(ctx, sess, res, "", tr)
			}
			return actOut{res: res, trace: tr}, nil
		}),
		finish: func(ctx context.Context, c *commandCtx, plan *sessionPlan, out actOut, dispatchErr error) (*ActOutcome, task.Outcome, error) {
			rec := plan.rec
			if dispatchErr != nil {
				if so := (*page.SecretOriginError)(nil); errors.As(dispatchErr, &so) {
					s.recordSecretUse(ctx, call.Actor, req, "refuse", so.Origin, c.t.ID, c.cmd.ID, "origin")
				}
				return finishFailed[*ActOutcome](ctx, c, rec, dispatchErr, true)
			}
			if out.held != nil {
				h, outcome, err := s.holdRequest(ctx, c, call, rec, req, timeoutMs, out.held)
				if err != nil {
					return nil, outcome, err
				}
				return &ActOutcome{Held: h}, outcome, nil
			}
			res := out.res
			c.cmd.note.origin = res.Origin
			stored, err := s.recordAction(ctx, c, rec, req, res, "act", nil)
			if err != nil {
				return nil, "", err
			}
			if out.trace != nil {
				if err := c.emit(ctx, c.t, "record.step", "act", stepData(rec.ID, c.cmd.ID, "act", nil, &req, out.trace)); err != nil {
					return nil, "", err
				}
				if err := s.keepFill(ctx, c, req); err != nil {
					return nil, "", err
				}
			}
			rc, err := c.receipt(ctx, task.Applied, "", "")
			if err != nil {
				return nil, "", err
			}
			return &ActOutcome{Done: &ActResult{ActResult: *res, Receipt: rc, DownloadArtifacts: stored}}, "", nil
		},
	})
}

// actOut is what an act's effect hands phase 3: the action's result, or the request it sent that
// the browser held for approval.
type actOut struct {
	res   *page.ActResult
	held  *heldAct
	trace *stepTrace // a recording task's step (replaystep.go)
}

// navOut is what a navigation hands phase 3: its result and, for a recording task, what the
// page showed after it.
type navOut struct {
	res   *page.NavigateResult
	trace *stepTrace
}

// recordAction records an action that ran (directly, or released by its approval): where the
// task acted, its downloads as artifacts, the action.performed event (never the filled value),
// and a new document's epoch.
func (s *Service) recordAction(ctx context.Context, c *commandCtx, rec *SessionRecord, req page.ActRequest, res *page.ActResult,
	cause string, extra map[string]any,
) ([]string, error) {
	s.noteUse(c.t.ID, rec.ID, res.ContextID)
	data := map[string]any{
		"session_id": rec.ID, "command_id": c.cmd.ID, "action": req.Action, "context_id": res.ContextID,
		"epoch_id": res.EpochID, "navigated": res.Navigated, "effect": res.Effect,
	}
	for k, v := range extra {
		data[k] = v
	}
	if req.NodeID != "" {
		data["node_id"] = req.NodeID
	}
	if req.SecretRef != "" { // the use of a secret: which one and where, never the value
		data["secret_id"], data["origin"] = req.SecretRef, res.Origin
		s.recordSecretUse(ctx, Actor{Tenant: c.t.Tenant, Subject: c.cmd.Actor}, req, "use", res.Origin, c.t.ID, c.cmd.ID, "")
	}
	if len(res.NewContexts) > 0 {
		data["new_contexts"] = res.NewContexts
	}
	if len(res.Dialogs) > 0 {
		data["dialogs"] = len(res.Dialogs)
	}
	stored, err := s.storeDownloads(ctx, c, rec, res)
	if err != nil {
		return nil, err
	}
	if len(stored) > 0 {
		data["download_artifacts"] = stored
	}
	if err := c.emit(ctx, c.t, "action.performed", cause, data); err != nil {
		return nil, err
	}
	if res.Navigated {
		if err := c.tx.RecordEpoch(ctx, c.t.Tenant, rec.ID, res.ContextID, res.EpochID, res.URL); err != nil {
			return nil, err
		}
	}
	return stored, nil
}

// readTimeout bounds observe, query_nodes and extract.
const readTimeout = defaultCommandTimeout

// Observe returns a compact snapshot of a browsing context, with handles on every node an
// action can target. It is a read: no command, no receipt.
// Every handle it hands out is recorded (handles.go) before the snapshot is returned.
func (s *Service) Observe(ctx context.Context, actor Actor, sessionID string, req page.ObserveRequest) (*page.Snapshot, error) {
	return read(ctx, s, actor, sessionID, func(ctx context.Context, sess BrowserSession) (*page.Snapshot, error) {
		snap, err := sess.Observe(ctx, req)
		if err != nil {
			return nil, s.explainHandle(ctx, actor.Tenant, sessionID, err, req.Within)
		}
		b := HandleBatch{ContextID: snap.ContextID, EpochID: snap.EpochID, URL: snap.URL}
		for _, c := range snap.Contexts {
			if c.ContextID == snap.ContextID {
				b.Opener = c.Opener
			}
		}
		return snap, s.recordHandles(ctx, actor.Tenant, sessionID, b, snap.Nodes)
	})
}

// QueryNodes finds nodes by a typed query, best match first. The handles it hands out are
// recorded as observe's are.
func (s *Service) QueryNodes(ctx context.Context, actor Actor, sessionID string, req page.QueryRequest) (*page.QueryResult, error) {
	return read(ctx, s, actor, sessionID, func(ctx context.Context, sess BrowserSession) (*page.QueryResult, error) {
		res, err := sess.QueryNodes(ctx, req)
		if err != nil {
			return nil, s.explainHandle(ctx, actor.Tenant, sessionID, err, req.Query.Within)
		}
		contextID := req.ContextID
		if contextID == "" {
			contextID = sess.DefaultContext()
		}
		return res, s.recordHandles(ctx, actor.Tenant, sessionID, HandleBatch{ContextID: contextID, EpochID: res.EpochID}, res.Nodes)
	})
}

// Extract reads structured data from the page.
func (s *Service) Extract(ctx context.Context, actor Actor, sessionID string, req page.ExtractRequest) (*page.ExtractResult, error) {
	return read(ctx, s, actor, sessionID, func(ctx context.Context, sess BrowserSession) (*page.ExtractResult, error) {
		res, err := sess.Extract(ctx, req)
		if err != nil {
			within := ""
			if req.Query != nil {
				within = req.Query.Within
			}
			return nil, s.explainHandle(ctx, actor.Tenant, sessionID, err, req.NodeID, within)
		}
		return res, nil
	})
}

// read runs a read operation on an open session of the actor's tenant, within readTimeout.
func read[T any](ctx context.Context, s *Service, actor Actor, sessionID string, op func(context.Context, BrowserSession) (T, error)) (T, error) {
	var zero T
	rec, sess, err := s.sessionFor(ctx, actor, sessionID)
	if err != nil {
		return zero, err
	}
	if err := s.readHandedOff(ctx, actor, rec.TaskID); err != nil {
		return zero, err
	}
	// A read notes the session's first context only if the task has used none yet: navigations
	// and actions say precisely which context they used.
	s.lastUsed.LoadOrStore(rec.TaskID, lastUse{sessionID: rec.ID, contextID: sess.DefaultContext()})
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	res, err := op(ctx, sess)
	if err != nil {
		return zero, s.readError(ctx, actor, sessionID, err)
	}
	return res, nil
}

// readError maps the error of a read to its problem, marking a lost session.
func (s *Service) readError(ctx context.Context, actor Actor, sessionID string, err error) error {
	if err == nil {
		return nil
	}
	e, _ := browserProblem(err, false)
	if e == nil {
		return err
	}
	if e.Code == CodeBrowserSessionLost {
		if merr := s.markSessionLost(context.WithoutCancel(ctx), actor.Tenant, sessionID, "lost during a read"); merr != nil {
			s.cfg.Logger.Error("marking session lost", "session_id", sessionID, "err", merr)
		}
	}
	return e
}

// loseSession records that c's task's open session rec is gone, under cause: the session lost,
// the browser_session.lost event (data), and — with follow — what the loss does to the task
// (afterSessionLost). It is the one place a session is marked lost.
func (c *commandCtx) loseSession(ctx context.Context, rec *SessionRecord, cause string, data map[string]any, follow bool) error {
	end := c.now
	rec.State, rec.EndedAt = SessionLost, &end
	if err := c.tx.UpdateSession(ctx, rec); err != nil {
		return err
	}
	if err := c.emit(ctx, c.t, "browser_session.lost", cause, data); err != nil {
		return err
	}
	if !follow {
		return nil
	}
	return c.afterSessionLost(ctx, c.t, cause)
}

// openReconciliation opens a reconciliation of c's task for its interrupted side-effecting
// command commandID (operation), under cause, and moves the task as the reconciliation makes it
// wait: a running task waits for the operator; one a person holds stays with them, the
// reconciliation beside the handoff (task.AfterWaits). It is the one place a reconciliation is
// opened.
func (c *commandCtx) openReconciliation(ctx context.Context, commandID, operation, cause string) error {
	recID := ids.New(ids.Reconciliation)
	if err := c.tx.OpenReconciliation(ctx, c.t.Tenant, recID, c.t.ID, commandID); err != nil {
		return err
	}
	if err := c.emit(ctx, c.t, "reconciliation.opened", cause, map[string]any{
		"reconciliation_id": recID, "command_id": commandID, "operation": operation,
	}); err != nil {
		return err
	}
	return c.followWaits(ctx, "reconciliation")
}

// markSessionLost records that an open session is gone.
func (s *Service) markSessionLost(ctx context.Context, tenant, sessionID, why string) error {
	return s.store.InTx(ctx, func(tx Tx) error {
		peek, err := s.store.GetSession(ctx, tenant, sessionID)
		if err != nil {
			return err
		}
		t, err := tx.LockTask(ctx, tenant, peek.TaskID)
		if err != nil {
			return err
		}
		rec, err := tx.LockSession(ctx, tenant, sessionID)
		if err != nil || rec.State != SessionOpen {
			return err
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: systemActor, Tenant: tenant, Operation: "browser"}, t: t, now: s.cfg.Now()}
		if err := c.loseSession(ctx, rec, why, map[string]any{"session_id": sessionID}, true); err != nil {
			return err
		}
		return tx.UpdateTask(ctx, t)
	})
}

// storeDownloads keeps what an action downloaded as artifacts of the task (kind "other"), with the
// action's provenance; the action.performed event names them (the browser's own
// download.completed event reports the file).
func (s *Service) storeDownloads(ctx context.Context, c *commandCtx, rec *SessionRecord, res *page.ActResult) ([]string, error) {
	if len(res.Downloads) == 0 {
		return nil, nil
	}
	out := make([]string, len(res.Downloads))
	for i, d := range res.Downloads {
		if d.Content == nil {
			continue
		}
		mt := d.MediaType
		if mt == "" || !mediaTypeRE.MatchString(mt) {
			mt = "application/octet-stream"
		}
		a := &Artifact{
			ID: ids.New(ids.Artifact), Tenant: c.t.Tenant, SHA256: sha256Hex(d.Content), Size: int64(len(d.Content)),
			MediaType: mt, Kind: "other", TaskID: c.t.ID, SessionID: rec.ID, ContextID: res.ContextID,
			EpochID: res.EpochID, CommandID: c.cmd.ID, SourceURL: res.URL, CreatedAt: c.now,
		}
		if err := c.tx.InsertArtifact(ctx, a, d.Content); err != nil {
			return nil, err
		}
		out[i] = a.ID
	}
	return out, nil
}

// mediaTypeRE is the shape artifact_reference.media_type accepts.
var mediaTypeRE = regexp.MustCompile(`^[a-z]+/[A-Za-z0-9.+-]+$`)

// extensionOf gives an uploaded artifact a file name extension pages commonly check.
func extensionOf(mediaType string) string {
	switch mediaType {
	case "image/png":
		return ".png"
	case "application/pdf":
		return ".pdf"
	case "text/plain":
		return ".txt"
	case "application/json":
		return ".json"
	case "multipart/related":
		return ".mhtml"
	}
	return ""
}
