-- 0013 corrections and supersession (issue #23 item 2): approval decisions, reconciliation
-- resolutions and task outcomes are never updated in place. A correction is a new row that
-- supersedes the current one; the rows form one chain per approval, reconciliation or task (one
-- root, each row superseded at most once, always by a row of the same parent), and the database
-- refuses UPDATE, DELETE and TRUNCATE of them, as it does for the history (0001).

CREATE FUNCTION supersession_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused (a correction is a new row that supersedes it)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

-- Approval decisions: the decision of an approval and the corrections of its record. What was
-- decided is fixed (an approved action ran, a denied one never will), so a correction keeps the
-- decision and corrects the reason, naming who corrected it.
ALTER TABLE approval_decision DROP CONSTRAINT approval_decision_pkey;
ALTER TABLE approval_decision
    ADD COLUMN decision_id bigint GENERATED ALWAYS AS IDENTITY,
    ADD PRIMARY KEY (decision_id),
    ADD COLUMN supersedes bigint UNIQUE REFERENCES approval_decision (decision_id),
    ALTER COLUMN command_id DROP NOT NULL,
    -- The first decision is the resolve_approval command's; a correction is an operator's, not a command.
    ADD CHECK ((supersedes IS NULL) = (command_id IS NOT NULL)),
    ADD CHECK (supersedes IS NULL OR supersedes < decision_id);
CREATE UNIQUE INDEX approval_decision_root_idx ON approval_decision (approval_id) WHERE supersedes IS NULL;

CREATE FUNCTION approval_decision_supersedes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    prev approval_decision%ROWTYPE;
BEGIN
    IF NEW.supersedes IS NULL THEN
        RETURN NEW;
    END IF;
    SELECT * INTO prev FROM approval_decision WHERE decision_id = NEW.supersedes;
    IF NOT FOUND OR prev.approval_id <> NEW.approval_id OR prev.tenant_id <> NEW.tenant_id THEN
        RAISE EXCEPTION 'approval_decision % supersedes a decision of another approval', NEW.decision_id
            USING ERRCODE = 'check_violation';
    END IF;
    IF prev.decision <> NEW.decision THEN
        RAISE EXCEPTION 'a correction of approval % keeps its decision (%): what it caused cannot be undone', NEW.approval_id, prev.decision
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER approval_decision_supersedes BEFORE INSERT ON approval_decision
    FOR EACH ROW EXECUTE FUNCTION approval_decision_supersedes();
CREATE TRIGGER approval_decision_no_update BEFORE UPDATE OR DELETE ON approval_decision
    FOR EACH ROW EXECUTE FUNCTION supersession_append_only();
CREATE TRIGGER approval_decision_no_truncate BEFORE TRUNCATE ON approval_decision
    FOR EACH STATEMENT EXECUTE FUNCTION supersession_append_only();

-- The current decision of each approval: the one nothing supersedes.
CREATE VIEW approval_decision_current AS
    SELECT d.* FROM approval_decision d
    WHERE NOT EXISTS (SELECT 1 FROM approval_decision n WHERE n.supersedes = d.decision_id);

-- An approval closes once: pending → approved, denied, cancelled or expired, and never back (an
-- expired approval is never revived). Only its state and closing time are ever written.
CREATE FUNCTION approval_request_closes_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'approval_request is never deleted' USING ERRCODE = 'restrict_violation';
    END IF;
    IF OLD.state <> 'pending' THEN
        RAISE EXCEPTION 'approval % is already %: a closed approval is never changed', OLD.approval_id, OLD.state
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF (NEW.tenant_id, NEW.approval_id, NEW.command_id, NEW.reason, NEW.requested_by, NEW.requested_at, NEW.expires_at)
        IS DISTINCT FROM (OLD.tenant_id, OLD.approval_id, OLD.command_id, OLD.reason, OLD.requested_by, OLD.requested_at, OLD.expires_at) THEN
        RAISE EXCEPTION 'approval %: only its state and closing time change', OLD.approval_id
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER approval_request_closes_once BEFORE UPDATE OR DELETE ON approval_request
    FOR EACH ROW EXECUTE FUNCTION approval_request_closes_once();

-- Reconciliation resolutions: what an operator found an interrupted command did, and the
-- corrections of that finding. The reconciliation row records only that it was opened; it is
-- open while it has no resolution.
ALTER TABLE task_reconciliation ADD UNIQUE (tenant_id, reconciliation_id);

CREATE TABLE reconciliation_resolution (
    tenant_id         text NOT NULL,
    resolution_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    reconciliation_id text NOT NULL,
    resolution        text NOT NULL CHECK (resolution IN ('applied', 'no_side_effect')),
    note              text NOT NULL DEFAULT '' CHECK (char_length(note) <= 2000),
    resolved_by       text NOT NULL CHECK (char_length(resolved_by) BETWEEN 1 AND 255),
    resolved_at       timestamptz NOT NULL DEFAULT now(),
    supersedes        bigint UNIQUE REFERENCES reconciliation_resolution (resolution_id),
    CHECK (supersedes IS NULL OR supersedes < resolution_id),
    FOREIGN KEY (tenant_id, reconciliation_id) REFERENCES task_reconciliation (tenant_id, reconciliation_id)
);
CREATE UNIQUE INDEX reconciliation_resolution_root_idx ON reconciliation_resolution (reconciliation_id) WHERE supersedes IS NULL;

-- The resolutions recorded before this migration become the roots of their chains.
INSERT INTO reconciliation_resolution (tenant_id, reconciliation_id, resolution, note, resolved_by, resolved_at)
    SELECT tenant_id, reconciliation_id, resolution, note, resolved_by, resolved_at FROM task_reconciliation
    WHERE state = 'resolved' ORDER BY resolved_at, reconciliation_id;
ALTER TABLE task_reconciliation
    DROP COLUMN state,
    DROP COLUMN resolution,
    DROP COLUMN note,
    DROP COLUMN resolved_at,
    DROP COLUMN resolved_by;

CREATE FUNCTION reconciliation_resolution_supersedes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.supersedes IS NOT NULL AND NOT EXISTS (SELECT 1 FROM reconciliation_resolution p
        WHERE p.resolution_id = NEW.supersedes AND p.reconciliation_id = NEW.reconciliation_id AND p.tenant_id = NEW.tenant_id) THEN
        RAISE EXCEPTION 'reconciliation_resolution % supersedes a resolution of another reconciliation', NEW.resolution_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER reconciliation_resolution_supersedes BEFORE INSERT ON reconciliation_resolution
    FOR EACH ROW EXECUTE FUNCTION reconciliation_resolution_supersedes();
CREATE TRIGGER reconciliation_resolution_no_update BEFORE UPDATE OR DELETE ON reconciliation_resolution
    FOR EACH ROW EXECUTE FUNCTION supersession_append_only();
CREATE TRIGGER reconciliation_resolution_no_truncate BEFORE TRUNCATE ON reconciliation_resolution
    FOR EACH STATEMENT EXECUTE FUNCTION supersession_append_only();
CREATE TRIGGER task_reconciliation_no_update BEFORE UPDATE OR DELETE ON task_reconciliation
    FOR EACH ROW EXECUTE FUNCTION supersession_append_only();

-- A reconciliation as it stands: open, or resolved by its current resolution. Its task is its
-- command's.
CREATE VIEW task_reconciliation_current AS
    SELECT r.reconciliation_id, r.tenant_id, c.task_id, r.command_id, c.operation,
        CASE WHEN s.resolution_id IS NULL THEN 'open' ELSE 'resolved' END AS state,
        s.resolution_id, s.resolution, coalesce(s.note, '') AS note, r.opened_at, s.resolved_at, s.resolved_by, s.supersedes
    FROM task_reconciliation r
    JOIN task_command c ON c.command_id = r.command_id
    LEFT JOIN reconciliation_resolution s ON s.reconciliation_id = r.reconciliation_id
        AND NOT EXISTS (SELECT 1 FROM reconciliation_resolution n WHERE n.supersedes = s.resolution_id);

-- Task outcomes: how a task ended (its terminal state and verification) and the corrections an
-- operator records later. The root is written by the database itself when a task first commits in
-- a terminal state, so no path that ends a task can skip it; agent_task keeps the current outcome
-- (the lifecycle's projection), and a terminal task's state and verification change only to the
-- task's current outcome, which a correction writes first.
CREATE TABLE task_outcome (
    tenant_id    text NOT NULL,
    outcome_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id      text NOT NULL,
    state        text NOT NULL CHECK (state IN ('succeeded', 'failed', 'cancelled', 'expired')),
    verification text CHECK (verification IN ('verified', 'unverified', 'unmet')),
    reason       text NOT NULL DEFAULT '' CHECK (char_length(reason) <= 2000),
    recorded_by  text NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    supersedes   bigint UNIQUE REFERENCES task_outcome (outcome_id),
    CHECK (supersedes IS NULL OR supersedes < outcome_id),
    -- Only the runtime verifies (a postcondition it evaluated): a correction never claims it.
    CHECK (supersedes IS NULL OR verification IS DISTINCT FROM 'verified'),
    CHECK (supersedes IS NULL OR char_length(reason) >= 1),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id)
);
CREATE UNIQUE INDEX task_outcome_root_idx ON task_outcome (task_id) WHERE supersedes IS NULL;

CREATE FUNCTION task_outcome_supersedes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.supersedes IS NOT NULL AND NOT EXISTS (SELECT 1 FROM task_outcome p
        WHERE p.outcome_id = NEW.supersedes AND p.task_id = NEW.task_id AND p.tenant_id = NEW.tenant_id) THEN
        RAISE EXCEPTION 'task_outcome % supersedes an outcome of another task', NEW.outcome_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER task_outcome_supersedes BEFORE INSERT ON task_outcome
    FOR EACH ROW EXECUTE FUNCTION task_outcome_supersedes();
CREATE TRIGGER task_outcome_no_update BEFORE UPDATE OR DELETE ON task_outcome
    FOR EACH ROW EXECUTE FUNCTION supersession_append_only();
CREATE TRIGGER task_outcome_no_truncate BEFORE TRUNCATE ON task_outcome
    FOR EACH STATEMENT EXECUTE FUNCTION supersession_append_only();

CREATE VIEW task_outcome_current AS
    SELECT o.* FROM task_outcome o
    WHERE NOT EXISTS (SELECT 1 FROM task_outcome n WHERE n.supersedes = o.outcome_id);

-- Tasks that ended before this migration: their ending is the root of their chain.
INSERT INTO task_outcome (tenant_id, task_id, state, verification, reason, recorded_by, recorded_at)
    SELECT tenant_id, task_id, state, verification, '', created_by, ended_at FROM agent_task
    WHERE state IN ('succeeded', 'failed', 'cancelled', 'expired') ORDER BY ended_at, task_id;

-- At commit: a task in a terminal state has its outcome recorded — the root, from the row as
-- committed and the actor and cause of its last state change — and agrees with its current outcome.
CREATE FUNCTION task_outcome_record() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cur agent_task%ROWTYPE;
    last agent_task_event%ROWTYPE;
    o task_outcome%ROWTYPE;
BEGIN
    SELECT * INTO cur FROM agent_task WHERE task_id = NEW.task_id;
    IF NOT FOUND OR cur.state NOT IN ('succeeded', 'failed', 'cancelled', 'expired') THEN
        RETURN NULL;
    END IF;
    SELECT * INTO o FROM task_outcome_current WHERE task_id = cur.task_id;
    IF NOT FOUND THEN
        SELECT * INTO last FROM agent_task_event
            WHERE task_id = cur.task_id AND event_type = 'task.state_changed' ORDER BY seq DESC LIMIT 1;
        INSERT INTO task_outcome (tenant_id, task_id, state, verification, reason, recorded_by, recorded_at)
            VALUES (cur.tenant_id, cur.task_id, cur.state, cur.verification, coalesce(last.cause, ''),
                coalesce(last.actor, cur.created_by), cur.ended_at);
    ELSIF (o.state, o.verification) IS DISTINCT FROM (cur.state, cur.verification) THEN
        RAISE EXCEPTION 'task %: its outcome is %/%, not %/% (a correction supersedes the outcome first)',
            cur.task_id, o.state, o.verification, cur.state, cur.verification
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER agent_task_outcome AFTER INSERT OR UPDATE OF state, verification ON agent_task
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.state IN ('succeeded', 'failed', 'cancelled', 'expired'))
    EXECUTE FUNCTION task_outcome_record();
