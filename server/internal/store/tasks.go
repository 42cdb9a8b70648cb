package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/task"
)

// taskColumns reads a task with its policy and plan in one row: the child rows come back as JSON
// arrays, so reading a task is one round trip.
const taskColumns = `t.tenant_id, t.task_id, t.goal, t.state, coalesce(t.verification, ''), t.postcondition, t.deadline,
	t.created_by, coalesce(t.created_client, ''), t.created_at, t.updated_at, t.ended_at, t.last_seq, t.chain_digest, t.chain_sha256,
	(SELECT coalesce(json_agg(o.pattern ORDER BY o.position), '[]') FROM task_allowed_origin o WHERE o.task_id = t.task_id),
	(SELECT coalesce(json_agg(json_build_object('effect', r.effect, 'ttl_seconds', r.ttl_seconds, 'channel', r.channel, 'origins',
		(SELECT coalesce(json_agg(ro.pattern ORDER BY ro.position), '[]') FROM task_approval_rule_origin ro
		 WHERE ro.task_id = r.task_id AND ro.rule_index = r.rule_index)) ORDER BY r.rule_index), '[]')
	 FROM task_approval_rule r WHERE r.task_id = t.task_id),
	(SELECT coalesce(json_agg(json_build_object('op', p.op, 'args', p.args, 'max_attempts', coalesce(p.max_attempts, 0),
		'sealed', translate(encode(p.sealed_values, 'base64'), E'\n', ''))
		ORDER BY p.step_index), '[]') FROM task_plan_step p WHERE p.task_id = t.task_id),
	t.mode,
	(SELECT json_build_object('data_classification', mp.data_classification, 'max_retention_days', mp.max_retention_days,
		'allowed_providers', (SELECT json_agg(pp.provider ORDER BY pp.position) FROM task_model_policy_provider pp WHERE pp.task_id = mp.task_id),
		'allowed_regions', (SELECT json_agg(pr.region ORDER BY pr.position) FROM task_model_policy_region pr WHERE pr.task_id = mp.task_id))
	 FROM task_model_policy mp WHERE mp.task_id = t.task_id),
	(SELECT json_build_object('max_steps', b.max_steps, 'max_tokens', b.max_tokens, 'max_cost_usd', b.max_cost_usd,
		'max_wall_time_ms', b.max_wall_time_ms) FROM task_budget b WHERE b.task_id = t.task_id),
	EXISTS (SELECT 1 FROM task_recording rc WHERE rc.task_id = t.task_id),
	(SELECT coalesce(max(rp.replay_of), '') FROM task_replay rp WHERE rp.task_id = t.task_id),
	(SELECT coalesce(max(rp.mode), '') FROM task_replay rp WHERE rp.task_id = t.task_id)`

type ruleRow struct {
	Effect     string   `json:"effect"`
	TTLSeconds *int     `json:"ttl_seconds"`
	Channel    string   `json:"channel"`
	Origins    []string `json:"origins"`
}

// modelPolicyRow and budgetRow read an autonomous task's model policy and budget
// (migrations/0007_autonomous_tasks.sql).
type modelPolicyRow struct {
	DataClassification string   `json:"data_classification"`
	MaxRetentionDays   *int     `json:"max_retention_days"`
	AllowedProviders   []string `json:"allowed_providers"`
	AllowedRegions     []string `json:"allowed_regions"`
}

type budgetRow struct {
	MaxSteps      int      `json:"max_steps"`
	MaxTokens     int64    `json:"max_tokens"`
	MaxCostUSD    *float64 `json:"max_cost_usd"`
	MaxWallTimeMs int64    `json:"max_wall_time_ms"`
}

type stepRow struct {
	Op          string          `json:"op"`
	Args        json.RawMessage `json:"args"`
	MaxAttempts int             `json:"max_attempts"`
	Sealed      []byte          `json:"sealed"` // base64 in JSON; null without sealed values
}

func scanTask(row pgx.Row) (*app.Task, error) {
	var t app.Task
	var state string
	var pc, origins, rules, steps, modelPolicy, budget []byte
	if err := row.Scan(&t.Tenant, &t.ID, &t.Goal, &state, &t.Verification, &pc, &t.Deadline,
		&t.CreatedBy, &t.CreatedClient, &t.CreatedAt, &t.UpdatedAt, &t.EndedAt, &t.LastSeq, &t.ChainDigest, &t.ChainSHA256, &origins, &rules, &steps,
		&t.Mode, &modelPolicy, &budget, &t.Policy.Record, &t.ReplayOf, &t.ReplayMode); err != nil {
		return nil, translate(err)
	}
	if len(modelPolicy) > 0 {
		var mp modelPolicyRow
		if err := json.Unmarshal(modelPolicy, &mp); err != nil {
			return nil, fmt.Errorf("decoding model policy of %s: %w", t.ID, err)
		}
		t.ModelPolicy = app.ModelPolicy{AllowedProviders: mp.AllowedProviders, AllowedRegions: mp.AllowedRegions,
			MaxRetentionDays: mp.MaxRetentionDays, DataClassification: mp.DataClassification}
	}
	if len(budget) > 0 {
		var b budgetRow
		if err := json.Unmarshal(budget, &b); err != nil {
			return nil, fmt.Errorf("decoding budget of %s: %w", t.ID, err)
		}
		t.Budget = app.Budget{MaxSteps: b.MaxSteps, MaxTokens: b.MaxTokens, MaxWallTime: time.Duration(b.MaxWallTimeMs) * time.Millisecond}
		if b.MaxCostUSD != nil {
			t.Budget.MaxCostUSD = *b.MaxCostUSD
		}
	}
	t.State = task.State(state)
	if len(pc) > 0 {
		t.Postcondition = json.RawMessage(pc)
	}
	if err := json.Unmarshal(origins, &t.Policy.AllowedOrigins); err != nil {
		return nil, fmt.Errorf("decoding allowed origins of %s: %w", t.ID, err)
	}
	var rr []ruleRow
	if err := json.Unmarshal(rules, &rr); err != nil {
		return nil, fmt.Errorf("decoding approval rules of %s: %w", t.ID, err)
	}
	for _, r := range rr {
		spec := app.ApprovalRuleSpec{Effect: r.Effect}
		if r.TTLSeconds != nil {
			spec.TTL = time.Duration(*r.TTLSeconds) * time.Second
		}
		if r.Channel != app.ApprovalChannelApprover {
			spec.Channel = r.Channel // "" reads as the default, approver
		}
		if len(r.Origins) > 0 {
			spec.Origins = r.Origins
		}
		t.Policy.ApprovalRules = append(t.Policy.ApprovalRules, spec)
	}
	var sr []stepRow
	if err := json.Unmarshal(steps, &sr); err != nil {
		return nil, fmt.Errorf("decoding plan of %s: %w", t.ID, err)
	}
	for _, st := range sr {
		t.Plan = append(t.Plan, app.PlanStep{Op: st.Op, Args: st.Args, MaxAttempts: st.MaxAttempts, Sealed: st.Sealed})
	}
	utc(&t.CreatedAt)
	utc(&t.UpdatedAt)
	utcp(t.Deadline)
	utcp(t.EndedAt)
	return &t, nil
}

func utc(t *time.Time) { *t = t.UTC() }
func utcp(t *time.Time) {
	if t != nil {
		*t = t.UTC()
	}
}

func queueTaskInsert(b *pgx.Batch, tk *app.Task) {
	var pc any
	if len(tk.Postcondition) > 0 {
		pc = []byte(tk.Postcondition)
	}
	mode := tk.Mode
	if mode == "" {
		mode = app.ModeInteractive
	}
	b.Queue(`INSERT INTO agent_task (tenant_id, task_id, goal, state, verification, postcondition, deadline,
		created_by, created_client, created_at, updated_at, ended_at, last_seq, mode, chain_digest, chain_sha256)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
		tk.Tenant, tk.ID, tk.Goal, string(tk.State), nullIfEmpty(tk.Verification), pc, tk.Deadline,
		tk.CreatedBy, nullIfEmpty(tk.CreatedClient), tk.CreatedAt, tk.UpdatedAt, tk.EndedAt, tk.LastSeq, mode, tk.ChainDigest, tk.ChainSHA256)
}

// GetTask implements app.Store.
func (s *Store) GetTask(ctx context.Context, tenant, taskID string) (*app.Task, error) {
	t, err := scanTask(s.pool.QueryRow(ctx, `SELECT `+taskColumns+` FROM agent_task t WHERE t.tenant_id = $1 AND t.task_id = $2`, tenant, taskID))
	if err != nil || !t.State.Terminal() {
		return t, err
	}
	if t.Outcomes, err = taskOutcomes(ctx, s.pool, tenant, taskID); err != nil { // how it ended, and corrections (0015)
		return nil, err
	}
	return t, nil
}

// ListEvents implements app.Store.
func (s *Store) ListEvents(ctx context.Context, tenant, taskID string, after int64, limit int) ([]app.Event, error) {
	rows, err := s.pool.Query(ctx, `SELECT event_id, task_id, tenant_id, seq, event_type, occurred_at, actor, cause,
		coalesce(command_id, ''), data FROM agent_task_event
		WHERE tenant_id = $1 AND task_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`, tenant, taskID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	defer rows.Close()
	var out []app.Event
	for rows.Next() {
		var e app.Event
		var data []byte
		if err := rows.Scan(&e.ID, &e.TaskID, &e.Tenant, &e.Seq, &e.Type, &e.Time, &e.Actor, &e.Cause, &e.CommandID, &data); err != nil {
			return nil, fmt.Errorf("reading events: %w", err)
		}
		e.Time = e.Time.UTC()
		if err := json.Unmarshal(data, &e.Data); err != nil {
			return nil, fmt.Errorf("decoding event %s data: %w", e.ID, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	return out, nil
}

// RecordedFillValues implements app.Store.
func (s *Store) RecordedFillValues(ctx context.Context, tenant, taskID string) (map[string][]byte, error) {
	rows, err := s.pool.Query(ctx, `SELECT command_id, sealed FROM task_fill_value WHERE tenant_id = $1 AND task_id = $2`, tenant, taskID)
	if err != nil {
		return nil, fmt.Errorf("reading the fill values of %s: %w", taskID, err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var cmd string
		var sealed []byte
		if err := rows.Scan(&cmd, &sealed); err != nil {
			return nil, fmt.Errorf("reading the fill values of %s: %w", taskID, err)
		}
		out[cmd] = sealed
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the fill values of %s: %w", taskID, err)
	}
	return out, nil
}

// RecordFillValue implements app.Tx.
func (t *pgTx) RecordFillValue(_ context.Context, tenant, taskID, commandID string, sealed []byte) error {
	t.queue(`INSERT INTO task_fill_value (tenant_id, task_id, command_id, sealed) VALUES ($1, $2, $3, $4)`, tenant, taskID, commandID, sealed)
	return nil
}

// LastEventData implements app.Store.
func (s *Store) LastEventData(ctx context.Context, tenant, taskID, eventType string) (json.RawMessage, error) {
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM agent_task_event
		WHERE tenant_id = $1 AND task_id = $2 AND event_type = $3 ORDER BY seq DESC LIMIT 1`, tenant, taskID, eventType).Scan(&data)
	if err != nil {
		return nil, translate(err)
	}
	return data, nil
}

// DueForExpiry implements app.Store.
func (s *Store) DueForExpiry(ctx context.Context, now time.Time, limit int) ([]app.TaskRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id, task_id FROM agent_task
		WHERE deadline IS NOT NULL AND deadline <= $1
		  AND state NOT IN ('succeeded', 'failed', 'cancelled', 'expired')
		ORDER BY deadline LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("listing due tasks: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.TaskRef, error) {
		var ref app.TaskRef
		err := r.Scan(&ref.Tenant, &ref.TaskID)
		return ref, err
	})
}

// InsertTask implements app.Tx. The task row itself is queued at flush time (see pgTx.newTasks).
func (t *pgTx) InsertTask(ctx context.Context, tk *app.Task) error {
	t.newTasks = append(t.newTasks, tk)
	for i, o := range tk.Policy.AllowedOrigins {
		t.queue(`INSERT INTO task_allowed_origin (tenant_id, task_id, position, pattern) VALUES ($1, $2, $3, $4)`,
			tk.Tenant, tk.ID, i, o)
	}
	for i, r := range tk.Policy.ApprovalRules {
		var ttl any
		if r.TTL > 0 {
			ttl = int(r.TTL / time.Second)
		}
		channel := r.Channel
		if channel == "" {
			channel = app.ApprovalChannelApprover
		}
		t.queue(`INSERT INTO task_approval_rule (tenant_id, task_id, rule_index, effect, ttl_seconds, channel) VALUES ($1, $2, $3, $4, $5, $6)`,
			tk.Tenant, tk.ID, i, r.Effect, ttl, channel)
		for j, o := range r.Origins {
			t.queue(`INSERT INTO task_approval_rule_origin (tenant_id, task_id, rule_index, position, pattern)
				VALUES ($1, $2, $3, $4, $5)`, tk.Tenant, tk.ID, i, j, o)
		}
	}
	if tk.Policy.Record {
		t.queue(`INSERT INTO task_recording (tenant_id, task_id) VALUES ($1, $2)`, tk.Tenant, tk.ID)
	}
	if tk.ReplayOf != "" {
		t.queue(`INSERT INTO task_replay (tenant_id, task_id, replay_of, mode) VALUES ($1, $2, $3, $4)`, tk.Tenant, tk.ID, tk.ReplayOf, tk.ReplayMode)
	}
	for i, st := range tk.Plan {
		args := []byte(st.Args)
		if len(args) == 0 {
			args = []byte("{}")
		}
		var maxAttempts any
		if st.MaxAttempts > 0 {
			maxAttempts = st.MaxAttempts
		}
		// args hold the step's protected values masked; sealed_values holds them sealed (ADR 0015).
		t.queue(`INSERT INTO task_plan_step (tenant_id, task_id, step_index, op, args, max_attempts, sealed_values)
			VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)`, tk.Tenant, tk.ID, i, st.Op, args, maxAttempts, nilIfEmpty(st.Sealed))
	}
	if tk.Mode == app.ModeAutonomous {
		queueAutonomy(t, tk) // its model policy and budget (autonomous.go)
	}
	if tk.Delegated() {
		queueLease(t, tk) // a delegated or autonomous task: queued for the workers (leases.go)
	}
	return nil
}

// LockTask implements app.Tx.
func (t *pgTx) LockTask(ctx context.Context, tenant, taskID string) (*app.Task, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	return scanTask(q.QueryRow(ctx, `SELECT `+taskColumns+` FROM agent_task t
		WHERE t.tenant_id = $1 AND t.task_id = $2 FOR UPDATE OF t`, tenant, taskID))
}

// UpdateTask implements app.Tx. A task inserted by this transaction and not yet sent needs no
// UPDATE: its INSERT carries its values as they are at flush time.
func (t *pgTx) UpdateTask(ctx context.Context, tk *app.Task) error {
	for _, n := range t.newTasks {
		if n == tk {
			return nil
		}
	}
	t.queue(`UPDATE agent_task SET state = $3, verification = $4, updated_at = $5, ended_at = $6, last_seq = $7,
		chain_digest = $8, chain_sha256 = $9 WHERE tenant_id = $1 AND task_id = $2`,
		tk.Tenant, tk.ID, string(tk.State), nullIfEmpty(tk.Verification), tk.UpdatedAt, tk.EndedAt, tk.LastSeq,
		tk.ChainDigest, tk.ChainSHA256)
	return nil
}

// CountActiveTasks implements app.Tx.
func (t *pgTx) CountActiveTasks(ctx context.Context, tenant string) (int, error) {
	q, err := t.q(ctx)
	if err != nil {
		return 0, err
	}
	var n int
	err = q.QueryRow(ctx, `SELECT count(*) FROM agent_task WHERE tenant_id = $1
		AND state IN ('admitted', 'running', 'waiting_for_approval', 'waiting_for_external_input', 'checkpointed')`, tenant).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting active tasks: %w", err)
	}
	return n, nil
}

// OldestWaitingTask implements app.Tx.
func (t *pgTx) OldestWaitingTask(ctx context.Context, tenant string) (*app.Task, error) {
	q, err := t.q(ctx)
	if err != nil {
		return nil, err
	}
	return scanTask(q.QueryRow(ctx, `SELECT `+taskColumns+` FROM agent_task t
		WHERE t.tenant_id = $1 AND t.state = 'created' ORDER BY t.created_at LIMIT 1 FOR UPDATE OF t SKIP LOCKED`, tenant))
}

// nilIfEmpty is NULL for an empty byte slice.
func nilIfEmpty(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}
