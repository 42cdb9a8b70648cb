-- 0006 delegated tasks (ADR 0011): the queue of plans that workers claim with leases, each step's
-- progress, and the dead letters of plans that failed beyond their attempts.

-- One row per delegated task (a task created with a plan), written by create_task. A worker claims
-- a runnable row with FOR UPDATE SKIP LOCKED and holds it until expires_at, renewing it while it
-- runs a step; lease_epoch grows with every claim and fences every later write of the worker that
-- claimed it (a worker whose lease expired and was taken over writes nothing more).
CREATE TABLE task_lease (
    tenant_id   text NOT NULL,
    task_id     text PRIMARY KEY,
    owner_node  text REFERENCES runtime_node (node_id),
    lease_epoch bigint NOT NULL DEFAULT 0 CHECK (lease_epoch >= 0),
    expires_at  timestamptz,
    -- Not runnable before this time (a released lease waiting for recovery or an approval's action).
    not_before  timestamptz NOT NULL DEFAULT now(),
    -- The browser session the plan runs in, when one is open.
    session_id  text,
    claims      integer NOT NULL DEFAULT 0 CHECK (claims >= 0),
    -- Claims that took over a lease whose owner let it expire (its node died or stalled).
    expiries    integer NOT NULL DEFAULT 0 CHECK (expiries >= 0 AND expiries <= claims),
    finished_at timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((owner_node IS NULL) = (expires_at IS NULL)),
    CHECK (finished_at IS NULL OR owner_node IS NULL),
    CHECK ((lease_epoch = 0) = (claims = 0)),
    UNIQUE (tenant_id, task_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, session_id) REFERENCES browser_session (tenant_id, session_id)
);
-- The queue: unfinished leases by the time they become runnable.
CREATE INDEX task_lease_queue_idx ON task_lease (not_before) WHERE finished_at IS NULL;

-- A task that ends (closed, cancelled, expired, dead-lettered) leaves the queue in the same
-- transaction, and whoever held its lease loses it.
CREATE FUNCTION task_lease_finish() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE task_lease SET finished_at = NEW.ended_at, owner_node = NULL, expires_at = NULL, updated_at = NEW.ended_at
        WHERE task_id = NEW.task_id AND finished_at IS NULL;
    RETURN NULL;
END;
$$;

CREATE TRIGGER agent_task_lease_finish AFTER UPDATE OF state ON agent_task
    FOR EACH ROW WHEN (NEW.ended_at IS NOT NULL AND OLD.ended_at IS NULL)
    EXECUTE FUNCTION task_lease_finish();

-- Progress of one plan step. attempts counts the attempts the step consumed (a non-retryable
-- failure, an attempt interrupted by the death of its worker or a throttled one consume none);
-- command_key is the Idempotency-Key of the step's command in flight or last run, so a worker
-- taking over knows what became of it; checkpoint_id is the checkpoint taken after the step.
CREATE TABLE plan_step_progress (
    tenant_id    text NOT NULL,
    task_id      text NOT NULL,
    step_index   integer NOT NULL CHECK (step_index >= 0),
    state        text NOT NULL CHECK (state IN ('pending', 'in_flight', 'held', 'done', 'failed')),
    attempts     integer NOT NULL DEFAULT 0 CHECK (attempts BETWEEN 0 AND 100),
    command_key  text CHECK (command_key ~ '^[!-~]{1,255}$'),
    approval_id  text,
    receipt_id   text CHECK (receipt_id ~ '^rcp_[A-Za-z0-9_-]{1,64}$'),
    checkpoint_id text REFERENCES task_checkpoint (checkpoint_id),
    last_problem_code text CHECK (last_problem_code ~ '^[a-z_]+$'),
    last_error   text NOT NULL DEFAULT '' CHECK (char_length(last_error) <= 2000),
    started_at   timestamptz,
    finished_at  timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, step_index),
    CHECK ((state IN ('done', 'failed')) = (finished_at IS NOT NULL)),
    CHECK (state <> 'in_flight' OR command_key IS NOT NULL),
    CHECK ((state = 'held') = (approval_id IS NOT NULL)),
    FOREIGN KEY (task_id, step_index) REFERENCES task_plan_step (task_id, step_index) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, approval_id) REFERENCES approval_request (tenant_id, approval_id)
);

-- A dead letter names the step that failed and keeps the screenshot taken when it did.
ALTER TABLE dead_letter_record
    ADD COLUMN step_index   integer,
    ADD COLUMN problem_code text CHECK (problem_code ~ '^[a-z_]+$'),
    ADD COLUMN artifact_id  text,
    ADD CHECK (jsonb_typeof(evidence) = 'object'),
    ADD FOREIGN KEY (task_id, step_index) REFERENCES task_plan_step (task_id, step_index),
    ADD FOREIGN KEY (tenant_id, artifact_id) REFERENCES artifact_reference (tenant_id, artifact_id);
-- A plan fails once: one dead letter per task's plan.
CREATE UNIQUE INDEX dead_letter_record_plan_idx ON dead_letter_record (task_id) WHERE step_index IS NOT NULL;
