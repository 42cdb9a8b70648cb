-- 0007 goal-driven (autonomous) tasks (issue #11, ADR 0013): a task's mode, and an autonomous
-- task's model policy and budget. Its steps are task_plan_step rows appended as the planner
-- proposes them (arguments masked), with their plan_step_progress; it is queued in task_lease like
-- a delegated plan. What its models cost is in its history (model.called events).

ALTER TABLE agent_task
    ADD COLUMN mode text NOT NULL DEFAULT 'interactive' CHECK (mode IN ('interactive', 'autonomous'));

-- What a model must satisfy to see the task's data (absent lists and retention: any).
CREATE TABLE task_model_policy (
    tenant_id           text NOT NULL,
    task_id             text PRIMARY KEY,
    data_classification text NOT NULL CHECK (data_classification IN ('public', 'internal', 'confidential', 'restricted')),
    max_retention_days  integer CHECK (max_retention_days BETWEEN 0 AND 3650),
    UNIQUE (tenant_id, task_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE
);

CREATE TABLE task_model_policy_provider (
    tenant_id text NOT NULL,
    task_id   text NOT NULL,
    position  integer NOT NULL CHECK (position >= 0),
    provider  text NOT NULL CHECK (char_length(provider) BETWEEN 1 AND 100),
    PRIMARY KEY (task_id, position),
    FOREIGN KEY (tenant_id, task_id) REFERENCES task_model_policy (tenant_id, task_id) ON DELETE CASCADE
);

CREATE TABLE task_model_policy_region (
    tenant_id text NOT NULL,
    task_id   text NOT NULL,
    position  integer NOT NULL CHECK (position >= 0),
    region    text NOT NULL CHECK (char_length(region) BETWEEN 1 AND 100),
    PRIMARY KEY (task_id, position),
    FOREIGN KEY (tenant_id, task_id) REFERENCES task_model_policy (tenant_id, task_id) ON DELETE CASCADE
);

-- Limits of an autonomous task, defaults applied (max_cost_usd NULL: no cost cap).
CREATE TABLE task_budget (
    tenant_id        text NOT NULL,
    task_id          text PRIMARY KEY,
    max_steps        integer NOT NULL CHECK (max_steps BETWEEN 1 AND 1000),
    max_tokens       bigint NOT NULL CHECK (max_tokens > 0),
    max_cost_usd     double precision CHECK (max_cost_usd > 0),
    max_wall_time_ms bigint NOT NULL CHECK (max_wall_time_ms > 0),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE
);
