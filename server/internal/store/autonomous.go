package store

import (
	"context"

	"github.com/originweave/bap/server/internal/app"
)

// Goal-driven (autonomous) tasks (migrations/0007_autonomous_tasks.sql, ADR 0013): the model policy
// and budget written by create_task, and the steps the planner proposes, appended to the plan as
// they come.

var _ app.AutonomousTx = (*pgTx)(nil)

// queueAutonomy is create_task's rows of an autonomous task's model policy and budget.
func queueAutonomy(t *pgTx, tk *app.Task) {
	mp := tk.ModelPolicy
	t.queue(`INSERT INTO task_model_policy (tenant_id, task_id, data_classification, max_retention_days) VALUES ($1, $2, $3, $4)`,
		tk.Tenant, tk.ID, mp.DataClassification, mp.MaxRetentionDays)
	for i, p := range mp.AllowedProviders {
		t.queue(`INSERT INTO task_model_policy_provider (tenant_id, task_id, position, provider) VALUES ($1, $2, $3, $4)`,
			tk.Tenant, tk.ID, i, p)
	}
	for i, r := range mp.AllowedRegions {
		t.queue(`INSERT INTO task_model_policy_region (tenant_id, task_id, position, region) VALUES ($1, $2, $3, $4)`,
			tk.Tenant, tk.ID, i, r)
	}
	b := tk.Budget
	var cost any
	if b.MaxCostUSD > 0 {
		cost = b.MaxCostUSD
	}
	t.queue(`INSERT INTO task_budget (tenant_id, task_id, max_steps, max_tokens, max_cost_usd, max_wall_time_ms)
		VALUES ($1, $2, $3, $4, $5, $6)`, tk.Tenant, tk.ID, b.MaxSteps, b.MaxTokens, cost, b.MaxWallTime.Milliseconds())
}

// AppendPlanStep implements app.AutonomousTx.
func (t *pgTx) AppendPlanStep(ctx context.Context, tenant, taskID string, index int, st app.PlanStep) error {
	args := []byte(st.Args)
	if len(args) == 0 {
		args = []byte("{}")
	}
	var maxAttempts any
	if st.MaxAttempts > 0 {
		maxAttempts = st.MaxAttempts
	}
	t.queue(`INSERT INTO task_plan_step (tenant_id, task_id, step_index, op, args, max_attempts)
		VALUES ($1, $2, $3, $4, $5::jsonb, $6)`, tenant, taskID, index, st.Op, args, maxAttempts)
	return nil
}
