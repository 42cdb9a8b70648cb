package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/originweave/bap/server/internal/historychain"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/task"
)

// CreateTaskInput is a validated create_task body.
type CreateTaskInput struct {
	Goal          string
	Policy        PolicySpec
	Postcondition json.RawMessage
	Deadline      *time.Time
	Plan          []PlanStep
	// Mode, ModelPolicy and Budget: a goal-driven (autonomous) task (autonomy.go). ModelPolicy and
	// Budget are nil when absent; zero fields of Budget take the defaults.
	Mode        string
	ModelPolicy *ModelPolicy
	Budget      *Budget
	// ReplayOf is the task a replay_task repeats (replay.go), and ReplayMode how; "" for
	// create_task.
	ReplayOf, ReplayMode string
}

// TaskResult is the result of create_task and cancel_task: the task after the command and the
// command's receipt.
type TaskResult struct {
	Task    *Task
	Receipt *Receipt
}

// CloseResult is the result of close_task.
type CloseResult struct {
	Task          *Task
	Postcondition PostconditionResult
	// Evidence is what close_task captured of the page it evaluated (a screenshot and an MHTML
	// snapshot), empty when the task had no live browsing context.
	Evidence []*Artifact
	Receipt  *Receipt
}

// CreateTask records a new task and admits it when the tenant has capacity.
func (s *Service) CreateTask(ctx context.Context, call Call, in CreateTaskInput, r Responder[*TaskResult]) (Response, error) {
	if err := validatePolicy(in.Policy); err != nil {
		return Response{}, err
	}
	if err := validatePostcondition(in.Postcondition); err != nil {
		return Response{}, err
	}
	auto, err := s.admitAutonomous(ctx, call, in)
	if err != nil {
		return Response{}, err // refused before it became a command: not recorded (autonomy.go)
	}
	return runCommand(ctx, s, call, r, func(ctx context.Context, tx Tx, cmd *Command) (*TaskResult, *refusal, error) {
		now := s.cfg.Now()
		if in.Deadline != nil && !in.Deadline.After(now) {
			return nil, nil, Errorf(CodeInvalidRequest, "deadline must be in the future")
		}
		id := ids.New(ids.Task)
		plan, err := s.keys.sealPlan(call.Actor.Tenant, id, in.Plan) // fill values sealed (keys.go)
		if err != nil {
			return nil, nil, err
		}
		t := &Task{
			ID: id, Tenant: call.Actor.Tenant, Goal: in.Goal, State: task.Created,
			Policy: in.Policy, Postcondition: in.Postcondition, Plan: plan,
			CreatedBy: call.Actor.Subject, CreatedClient: call.ClientID, CreatedAt: now, UpdatedAt: now,
			Mode: auto.mode, ModelPolicy: auto.policy, Budget: auto.budget, ReplayOf: in.ReplayOf, ReplayMode: in.ReplayMode,
		}
		if in.Deadline != nil {
			d := in.Deadline.UTC()
			t.Deadline = &d
		}
		if err := tx.InsertTask(ctx, t); err != nil {
			return nil, nil, fmt.Errorf("inserting task: %w", err)
		}
		c := &commandCtx{s: s, tx: tx, cmd: cmd, now: now, t: t}
		if err := c.emit(ctx, t, "task.created", "create_task", map[string]any{
			"state": string(t.State), "goal": t.Goal, "delegated": t.Delegated(),
		}); err != nil {
			return nil, nil, err
		}
		if err := c.record(ctx, t, false); err != nil {
			return nil, nil, err
		}
		admit := true
		if max := s.cfg.MaxActiveTasksPerTenant; max > 0 {
			n, err := tx.CountActiveTasks(ctx, t.Tenant)
			if err != nil {
				return nil, nil, err
			}
			admit = n < max
		}
		if err := s.checkTaskQueue(ctx, tx, t, admit); err != nil {
			return nil, nil, err // 429, rolled back: not recorded (limits.go)
		}
		if admit {
			if err := c.transition(ctx, t, task.Admit, "admission"); err != nil {
				return nil, nil, err
			}
		}
		rc, err := c.receipt(ctx, task.Applied, "", "")
		if err != nil {
			return nil, nil, err
		}
		return &TaskResult{Task: t, Receipt: rc}, nil, nil
	})
}

// GetTask reads a task of the actor's tenant. A task whose deadline passed is expired first, so a
// reader never sees a live task past its deadline.
func (s *Service) GetTask(ctx context.Context, actor Actor, taskID string) (*Task, error) {
	t, err := s.store.GetTask(ctx, actor.Tenant, taskID)
	if err != nil {
		return nil, err
	}
	if t.Deadline == nil || t.State.Terminal() || s.cfg.Now().Before(*t.Deadline) {
		return s.withResult(ctx, t)
	}
	if err := s.expireTask(ctx, TaskRef{Tenant: actor.Tenant, TaskID: taskID}); err != nil {
		return nil, err
	}
	return s.store.GetTask(ctx, actor.Tenant, taskID)
}

// withResult attaches a closed task's result.
func (s *Service) withResult(ctx context.Context, t *Task) (*Task, error) {
	if t.State != task.Succeeded && t.State != task.Failed {
		return t, nil
	}
	r, err := s.store.GetTaskResult(ctx, t.Tenant, t.ID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	t.Result = r // nil for a task closed before results were recorded
	if r != nil {
		anchors, err := s.store.ListAnchors(ctx, t.Tenant, t.ID)
		if err != nil {
			return nil, err
		}
		for i := len(anchors) - 1; i >= 0; i-- {
			if anchors[i].Reason == historychain.ReasonTaskEnded {
				r.Anchor = &anchors[i]
				break
			}
		}
		if t.ReplayOf != "" {
			if r.Replay, err = s.replayVerdictOf(ctx, t); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// MaxEventPage is the largest page list_task_events returns.
const MaxEventPage = 1000

// ListTaskEvents reads a page of a task's history after seq `after`. next is the cursor of the
// next page, or nil when this page reached the end of the history as it stands.
func (s *Service) ListTaskEvents(ctx context.Context, actor Actor, taskID string, after int64, limit int) (events []Event, next *int64, err error) {
	if limit <= 0 {
		limit = 100
	}
	if limit > MaxEventPage {
		limit = MaxEventPage
	}
	if after < 0 {
		return nil, nil, Errorf(CodeInvalidRequest, "after must not be negative")
	}
	if _, err := s.store.GetTask(ctx, actor.Tenant, taskID); err != nil {
		return nil, nil, err
	}
	// One more than asked tells whether another page exists without a second query.
	evs, err := s.store.ListEvents(ctx, actor.Tenant, taskID, after, limit+1)
	if err != nil {
		return nil, nil, err
	}
	if len(evs) > limit {
		evs = evs[:limit]
		n := evs[len(evs)-1].Seq
		next = &n
	}
	return evs, next, nil
}

// CancelTask cancels a non-terminal task and closes its pending approvals, after stopping its
// in-flight commands (each one records its outcome class) within Config.CancelDeadline.
//
// It is a two-phase command (cancel.go): phase 1 records it (a task that cannot be cancelled is
// refused there, and stops nothing); phase 2 stops the task's in-flight commands and waits for
// their receipts with no row lock held; phase 3 cancels the task.
func (s *Service) CancelTask(ctx context.Context, call Call, taskID, reason string, r Responder[*TaskResult]) (Response, error) {
	release := func() {}
	defer func() { release() }()
	return runTwoPhase(ctx, s, call, taskID, r, twoPhase[struct{}, struct{}, *TaskResult]{
		unregistered: true,
		prepare: func(ctx context.Context, c *commandCtx) (struct{}, error) {
			if err := c.refuseHandedOff(ctx); err != nil {
				return struct{}{}, err
			}
			if _, err := task.Next(c.t.State, task.Cancel); err != nil {
				return struct{}{}, Errorf(CodeInvalidTransition, "task is %s; cancel is not possible from that state", c.t.State)
			}
			return struct{}{}, nil
		},
		dispatch: func(ctx context.Context, _ struct{}) (struct{}, error) {
			release = s.stopInFlight(ctx, call.Actor.Tenant, taskID)
			return struct{}{}, nil
		},
		finish: func(ctx context.Context, c *commandCtx, _ struct{}, _ struct{}, _ error) (*TaskResult, task.Outcome, error) {
			cause := "cancel_task"
			if reason != "" {
				cause = "cancel_task: " + reason
			}
			if err := c.transition(ctx, c.t, task.Cancel, cause); err != nil {
				return nil, task.Rejected, AsError(err) // ended meanwhile (closed, expired, cancelled)
			}
			if err := c.cancelPendingApprovals(ctx, c.t, task.ApprovalCancelled); err != nil {
				return nil, "", err
			}
			if err := c.admitWaiting(ctx, c.t); err != nil {
				return nil, "", err
			}
			rc, err := c.receipt(ctx, task.Applied, "", "")
			if err != nil {
				return nil, "", err
			}
			return &TaskResult{Task: c.t, Receipt: rc}, "", nil
		},
	})
}

// CloseTask ends a task by its postcondition, evaluated on the task's most recently used browsing
// context: succeeded (verified) when every clause holds, failed listing the unmet clauses
// otherwise. Without a live browsing context no clause can be shown to hold; a task without a
// postcondition closes succeeded, unverified.
func (s *Service) CloseTask(ctx context.Context, call Call, taskID string, r Responder[*CloseResult]) (Response, error) {
	// Evaluate the postcondition on the page and capture its evidence first, with no transaction
	// open. A clause holds only with evidence of the page it held on.
	var holds []bool
	var evaluatedOn string
	var evidence *closeEvidence
	// A task waiting for a person (a handoff, a reconciliation) cannot close: its page is not read.
	if t, err := s.store.GetTask(ctx, call.Actor.Tenant, taskID); err == nil && !t.State.Terminal() && t.State != task.WaitingForExternalInput {
		if len(t.Postcondition) > 0 {
			if clauses, err := postconditionClauses(t.Postcondition); err == nil {
				holds, evaluatedOn = s.evaluatePostcondition(ctx, taskID, clauses)
			}
		}
		evidence = s.captureCloseEvidence(ctx, taskID)
		if evidence == nil {
			clear(holds)
		}
	}
	return runCommand(ctx, s, call, r, func(ctx context.Context, tx Tx, cmd *Command) (*CloseResult, *refusal, error) {
		c, err := s.beginOnTask(ctx, tx, cmd, taskID, false)
		if err != nil {
			return nil, nil, err
		}
		if rf, err := c.rejectHandedOff(ctx); rf != nil || err != nil {
			return nil, rf, err
		}
		res := PostconditionResult{Satisfied: true, Unmet: []json.RawMessage{}}
		verification := "unverified"
		trig := task.CloseSucceeded
		if len(c.t.Postcondition) > 0 {
			clauses, err := postconditionClauses(c.t.Postcondition)
			if err != nil {
				return nil, nil, err
			}
			res = PostconditionResult{Satisfied: true, Unmet: []json.RawMessage{}, ContextID: evaluatedOn}
			for i, cl := range clauses {
				// A clause evaluated before the postcondition changed (it cannot) or not at all is unmet.
				if i >= len(holds) || !holds[i] {
					res.Satisfied = false
					res.Unmet = append(res.Unmet, cl)
				}
			}
			verification, trig = "verified", task.CloseSucceeded
			if !res.Satisfied {
				verification, trig = "unmet", task.CloseFailed
			}
		}
		if _, err := task.Next(c.t.State, trig); err != nil {
			return refused[*CloseResult](c.reject(ctx, Errorf(CodeInvalidTransition, "task is %s; close_task is not possible from that state", c.t.State)))
		}
		pc := map[string]any{"satisfied": res.Satisfied, "unmet": res.Unmet, "verification": verification}
		if res.ContextID != "" {
			pc["context_id"] = res.ContextID
		}
		if err := c.emit(ctx, c.t, "postcondition.evaluated", "close_task", pc); err != nil {
			return nil, nil, err
		}
		c.t.Verification = verification
		arts, err := c.storeCloseEvidence(ctx, evidence)
		if err != nil {
			return nil, nil, err
		}
		if err := c.transition(ctx, c.t, trig, "close_task"); err != nil {
			return nil, nil, err
		}
		if err := c.admitWaiting(ctx, c.t); err != nil {
			return nil, nil, err
		}
		rc, err := c.receipt(ctx, task.Applied, "", "")
		if err != nil {
			return nil, nil, err
		}
		nclauses := 0
		if len(c.t.Postcondition) > 0 {
			clauses, _ := postconditionClauses(c.t.Postcondition)
			nclauses = len(clauses)
		}
		if _, err := c.recordResult(ctx, verification, nclauses, len(res.Unmet)); err != nil {
			return nil, nil, err
		}
		return &CloseResult{Task: c.t, Postcondition: res, Evidence: arts, Receipt: rc}, nil, nil
	})
}

func validatePolicy(p PolicySpec) error {
	rules := make([]policy.ApprovalRule, 0, len(p.ApprovalRules))
	for _, r := range p.ApprovalRules {
		rules = append(rules, policy.ApprovalRule{Effect: policy.Effect(r.Effect), Origins: r.Origins})
	}
	if _, err := policy.ParsePolicy(p.AllowedOrigins, rules); err != nil {
		return Errorf(CodeInvalidRequest, "policy: %v", err)
	}
	for i, r := range p.ApprovalRules {
		if r.TTL != 0 && (r.TTL < time.Second || r.TTL > policy.MaxApprovalTTL) {
			return Errorf(CodeInvalidRequest, "policy: approval rule %d: %v", i, policy.ErrBadTTL)
		}
		switch r.Channel {
		case "", ApprovalChannelApprover, ApprovalChannelElicitation:
		default:
			return Errorf(CodeInvalidRequest, "policy: approval rule %d: channel must be approver or elicitation", i)
		}
	}
	return nil
}

// postconditionClauses splits {"all": [clause, ...]} into its clauses.
func postconditionClauses(raw json.RawMessage) ([]json.RawMessage, error) {
	var pc struct {
		All []json.RawMessage `json:"all"`
	}
	if err := json.Unmarshal(raw, &pc); err != nil {
		return nil, fmt.Errorf("decoding stored postcondition: %w", err)
	}
	return pc.All, nil
}

// validatePostcondition checks what the schema cannot: that regular expressions compile (RE2).
func validatePostcondition(raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	clauses, err := postconditionClauses(raw)
	if err != nil {
		return Errorf(CodeInvalidRequest, "postcondition must be {\"all\": [clause, ...]}")
	}
	for i, cl := range clauses {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(cl, &m); err != nil {
			return Errorf(CodeInvalidRequest, "postcondition clause %d is not an object", i)
		}
		for _, key := range []string{"url_matches", "title_matches"} {
			v, ok := m[key]
			if !ok {
				continue
			}
			var re string
			if err := json.Unmarshal(v, &re); err != nil {
				return Errorf(CodeInvalidRequest, "postcondition clause %d: %s must be a string", i, key)
			}
			if _, err := regexp.Compile(re); err != nil {
				return Errorf(CodeInvalidRequest, "postcondition clause %d: %s is not a valid RE2 expression", i, key)
			}
		}
	}
	return nil
}
