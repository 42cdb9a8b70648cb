package app

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/originweave/bap/server/internal/problem"
)

// Goal-driven (autonomous) tasks (issue #11, ADR 0013, docs/orchestrator.md): the vocabulary —
// modes, budgets, admission at create_task, and the schema and validation of a planner's
// proposal. The loop itself is in autonomous.go.

// Task modes.
const (
	ModeInteractive = "interactive" // a client sends each command (or the server runs its plan)
	ModeAutonomous  = "autonomous"  // the planner model proposes each step; the workers run them
)

// Problem codes of autonomous tasks.
const (
	// CodeModelPolicyUnsatisfied: no approved model of a role the task needs satisfies its
	// model_policy (422).
	CodeModelPolicyUnsatisfied = problem.ModelPolicyUnsatisfied
	// CodeOrchestratorUnavailable: no model orchestrator is configured or reachable (503).
	CodeOrchestratorUnavailable = problem.OrchestratorUnavailable
)

// Budget limits an autonomous task. Zero fields take the defaults (MaxCostUSD 0: no cost cap).
type Budget struct {
	MaxSteps    int
	MaxTokens   int64
	MaxCostUSD  float64
	MaxWallTime time.Duration // counted from create_task
}

// Budget defaults (spec/schemas/TaskBudget.json).
const (
	DefaultMaxSteps    = 50
	DefaultMaxTokens   = 1_000_000
	DefaultMaxWallTime = 30 * time.Minute
)

// WithDefaults is b with its zero limits set to the defaults.
func (b Budget) WithDefaults() Budget {
	if b.MaxSteps <= 0 {
		b.MaxSteps = DefaultMaxSteps
	}
	if b.MaxTokens <= 0 {
		b.MaxTokens = DefaultMaxTokens
	}
	if b.MaxWallTime <= 0 {
		b.MaxWallTime = DefaultMaxWallTime
	}
	return b
}

// Delegated tells whether the server runs the task itself: a client's plan, or an autonomous task.
func (t *Task) Delegated() bool { return len(t.Plan) > 0 || t.Mode == ModeAutonomous }

// autonomy is what admission settled for a new task.
type autonomy struct {
	mode   string
	policy ModelPolicy
	budget Budget
}

// rolesNeeded are the roles an autonomous task calls: it is refused unless each has an approved
// model satisfying its model policy.
var rolesNeeded = []string{RolePlanner, RoleVerifier}

// admitAutonomous checks create_task's mode, model policy and budget. An autonomous task needs a
// configured orchestrator (else 503 orchestrator_unavailable) with, for every role it calls, an
// approved model satisfying its model policy (else 422 model_policy_unsatisfied). These refusals
// come before the task exists, so nothing is recorded under the key — unless the key already
// holds a response, which the command then replays.
func (s *Service) admitAutonomous(ctx context.Context, call Call, in CreateTaskInput) (autonomy, error) {
	a := autonomy{mode: in.Mode}
	if a.mode == "" {
		a.mode = ModeInteractive
	}
	switch a.mode {
	case ModeInteractive:
		if in.ModelPolicy != nil || in.Budget != nil {
			return a, Errorf(CodeInvalidRequest, "model_policy and budget apply to autonomous tasks only (mode \"autonomous\")")
		}
		return a, nil
	case ModeAutonomous:
	default:
		return a, Errorf(CodeInvalidRequest, "mode must be \"interactive\" or \"autonomous\"")
	}
	if len(in.Plan) > 0 {
		return a, Errorf(CodeInvalidRequest, "an autonomous task has no plan: its planner proposes the steps (a task with a plan is delegated)")
	}
	if in.ModelPolicy != nil {
		a.policy = *in.ModelPolicy
	}
	if a.policy.DataClassification == "" {
		a.policy.DataClassification = "restricted"
	}
	if !slices.Contains(DataClassifications, a.policy.DataClassification) {
		return a, Errorf(CodeInvalidRequest, "model_policy.data_classification must be one of %s", strings.Join(DataClassifications, ", "))
	}
	if in.Budget != nil {
		a.budget = *in.Budget
	}
	a.budget = a.budget.WithDefaults()
	if err := s.modelsAvailable(ctx, a.policy); err != nil {
		if s.keyRecorded(ctx, call) {
			return a, nil // a replay: the command answers what the key holds
		}
		return a, err
	}
	return a, nil
}

// modelsAvailable checks that every role an autonomous task calls has an eligible model.
func (s *Service) modelsAvailable(ctx context.Context, pol ModelPolicy) error {
	if s.cfg.Orchestrator == nil {
		return Errorf(CodeOrchestratorUnavailable,
			"this server has no model orchestrator configured; autonomous tasks need one (bap serve --orchestrator-url)")
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for _, role := range rolesNeeded {
		models, err := s.cfg.Orchestrator.Eligible(ctx, role, pol)
		if err == nil && len(models) == 0 {
			err = ErrNoCompliantModel
		}
		if err != nil {
			return modelError(role, err)
		}
	}
	return nil
}

// modelError turns an orchestrator error into the problem a client sees (never a model's answer
// or a provider's message verbatim: those may echo the prompt).
func modelError(role string, err error) *Error {
	var all *AllModelsFailedError
	switch {
	case errors.Is(err, ErrNoCompliantModel):
		return Errorf(CodeModelPolicyUnsatisfied, "no approved %s model satisfies the task's model_policy", role)
	case errors.As(err, &all):
		return Errorf(CodeOrchestratorUnavailable, "every approved %s model failed", role)
	default:
		return Errorf(CodeOrchestratorUnavailable, "the model orchestrator cannot be reached to find %s models", role)
	}
}

// keyRecorded tells whether the call's Idempotency-Key already holds a command.
func (s *Service) keyRecorded(ctx context.Context, call Call) bool {
	if call.IdempotencyKey == "" {
		return false
	}
	_, err := s.store.KeyState(ctx, call.Actor.Tenant, call.IdempotencyKey)
	return err == nil
}

// AutonomousTx is what the autonomous loop needs of a transaction beyond Tx and PlanTx.
type AutonomousTx interface {
	// AppendPlanStep records step index of an autonomous task's plan (its arguments masked:
	// what a fill types is never stored).
	AppendPlanStep(ctx context.Context, tenant, taskID string, index int, st PlanStep) error
}
