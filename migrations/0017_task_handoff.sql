-- 0017 human handoff (issue #18 item 5, ADR 0023): a person takes a running task over, the task
-- waits in waiting_for_external_input while the handoff is open, and hand-back (or the lease's
-- expiry) closes it. The rows are the handoff's history: one open handoff per task at most, a
-- handoff is closed once and never changed or deleted after.
CREATE TABLE task_handoff (
    tenant_id        text NOT NULL,
    handoff_id       text PRIMARY KEY CHECK (handoff_id ~ '^ho_[A-Za-z0-9_-]{1,64}$'),
    task_id          text NOT NULL,
    session_id       text NOT NULL,
    holder           text NOT NULL CHECK (char_length(holder) BETWEEN 1 AND 256),
    via              text NOT NULL CHECK (via IN ('api', 'socket', 'console')),
    state            text NOT NULL CHECK (state IN ('open', 'returned', 'expired')),
    started_at       timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    started_command  text NOT NULL,
    ended_at         timestamptz,
    ended_by         text,
    ended_command    text,
    checkpoint_id    text,
    UNIQUE (tenant_id, handoff_id),
    CHECK (lease_expires_at > started_at),
    CHECK ((state = 'open') = (ended_at IS NULL)),
    CHECK ((state = 'open') = (ended_by IS NULL)),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id),
    FOREIGN KEY (tenant_id, session_id) REFERENCES browser_session (tenant_id, session_id),
    FOREIGN KEY (tenant_id, started_command) REFERENCES task_command (tenant_id, command_id),
    FOREIGN KEY (tenant_id, ended_command) REFERENCES task_command (tenant_id, command_id),
    FOREIGN KEY (checkpoint_id) REFERENCES task_checkpoint (checkpoint_id)
);

-- At most one open handoff per task.
CREATE UNIQUE INDEX task_handoff_one_open ON task_handoff (tenant_id, task_id) WHERE state = 'open';
-- The upkeep finds due leases.
CREATE INDEX task_handoff_due ON task_handoff (lease_expires_at) WHERE state = 'open';

-- Append-only history: an open handoff is closed once (its end columns, and only them); nothing
-- else is ever updated, and nothing is deleted.
CREATE FUNCTION task_handoff_close_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR OLD.state <> 'open'
       OR NEW.handoff_id <> OLD.handoff_id OR NEW.tenant_id <> OLD.tenant_id OR NEW.task_id <> OLD.task_id
       OR NEW.session_id <> OLD.session_id OR NEW.holder <> OLD.holder OR NEW.via <> OLD.via
       OR NEW.started_at <> OLD.started_at OR NEW.lease_expires_at <> OLD.lease_expires_at
       OR NEW.started_command <> OLD.started_command THEN
        RAISE EXCEPTION 'task_handoff is append-only: only closing an open handoff is allowed (% refused)', TG_OP
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER task_handoff_history BEFORE UPDATE OR DELETE ON task_handoff
    FOR EACH ROW EXECUTE FUNCTION task_handoff_close_once();
