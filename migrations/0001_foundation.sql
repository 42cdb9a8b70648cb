-- 0001 foundation: tenants, durable tasks, their append-only history, commands, receipts,
-- idempotency, approvals, reconciliations, the transactional outbox, and the tables the browser,
-- artifact and protocol adapters fill. Rules live here (CHECK, FK, UNIQUE, triggers), not only in Go.
-- Every row carries its tenant; child tables reference (tenant_id, parent_id) so that a row can never
-- point at another tenant's object.

CREATE TABLE tenant_account (
    tenant_id   text PRIMARY KEY CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    display_name text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO tenant_account (tenant_id, display_name) VALUES ('local', 'local operator');

-- A running bap serve process; idempotency claims and commands name the node that owns them, so a
-- node that died (stale heartbeat) can have its in-flight work classified by another.
CREATE TABLE runtime_node (
    node_id      text PRIMARY KEY,
    advertise_url text NOT NULL DEFAULT '',
    software_version text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    stopped_at   timestamptz
);

CREATE TABLE agent_task (
    tenant_id    text NOT NULL REFERENCES tenant_account (tenant_id),
    task_id      text NOT NULL CHECK (task_id ~ '^tsk_[A-Za-z0-9_-]{1,64}$'),
    goal         text NOT NULL CHECK (char_length(goal) BETWEEN 1 AND 2000),
    state        text NOT NULL CHECK (state IN ('created', 'admitted', 'running', 'waiting_for_approval',
                     'waiting_for_external_input', 'checkpointed', 'succeeded', 'failed', 'cancelled', 'expired')),
    verification text CHECK (verification IN ('verified', 'unverified', 'unmet')),
    -- The declared postcondition is a value (an expression the client wrote), not state we evolve.
    postcondition jsonb CHECK (postcondition IS NULL OR jsonb_typeof(postcondition) = 'object'),
    deadline     timestamptz,
    created_by   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    ended_at     timestamptz,
    -- Highest seq in agent_task_event for this task; the row lock on the task serialises appends.
    last_seq     bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    PRIMARY KEY (task_id),
    UNIQUE (tenant_id, task_id),
    CHECK ((state IN ('succeeded', 'failed', 'cancelled', 'expired')) = (ended_at IS NOT NULL))
);
CREATE INDEX agent_task_tenant_state_idx ON agent_task (tenant_id, state, created_at);
CREATE INDEX agent_task_deadline_idx ON agent_task (deadline)
    WHERE deadline IS NOT NULL AND state NOT IN ('succeeded', 'failed', 'cancelled', 'expired');

-- The task's policy, one row per allowed origin pattern and per approval rule (3NF; no arrays).
CREATE TABLE task_allowed_origin (
    tenant_id text NOT NULL,
    task_id   text NOT NULL,
    position  integer NOT NULL CHECK (position >= 0),
    pattern   text NOT NULL CHECK (char_length(pattern) BETWEEN 1 AND 255),
    PRIMARY KEY (task_id, position),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE
);

CREATE TABLE task_approval_rule (
    tenant_id text NOT NULL,
    task_id   text NOT NULL,
    rule_index integer NOT NULL CHECK (rule_index >= 0),
    effect    text NOT NULL CHECK (effect IN ('form_submission', 'file_upload', 'any_action')),
    PRIMARY KEY (task_id, rule_index),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE
);

CREATE TABLE task_approval_rule_origin (
    tenant_id text NOT NULL,
    task_id   text NOT NULL,
    rule_index integer NOT NULL,
    position  integer NOT NULL CHECK (position >= 0),
    pattern   text NOT NULL CHECK (char_length(pattern) BETWEEN 1 AND 255),
    PRIMARY KEY (task_id, rule_index, position),
    FOREIGN KEY (task_id, rule_index) REFERENCES task_approval_rule (task_id, rule_index) ON DELETE CASCADE
);

-- Delegated mode: the plan's steps, in order.
CREATE TABLE task_plan_step (
    tenant_id  text NOT NULL,
    task_id    text NOT NULL,
    step_index integer NOT NULL CHECK (step_index >= 0),
    op         text NOT NULL CHECK (op IN ('navigate', 'observe', 'act', 'extract', 'capture_evidence')),
    args       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(args) = 'object'),
    max_attempts integer CHECK (max_attempts BETWEEN 1 AND 100),
    PRIMARY KEY (task_id, step_index),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE
);

-- History: append-only, gap-free seq per task (1, 2, 3, ...), enforced below.
CREATE TABLE agent_task_event (
    tenant_id  text NOT NULL,
    task_id    text NOT NULL,
    seq        bigint NOT NULL CHECK (seq >= 1),
    event_id   text NOT NULL UNIQUE CHECK (event_id ~ '^evt_[A-Za-z0-9_-]{1,64}$'),
    event_type text NOT NULL CHECK (event_type ~ '^[a-z_]+(\.[a-z_]+)+$'),
    occurred_at timestamptz NOT NULL DEFAULT now(),
    actor      text NOT NULL,
    cause      text NOT NULL DEFAULT '',
    command_id text,
    data       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(data) = 'object'),
    PRIMARY KEY (task_id, seq),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id)
);

CREATE FUNCTION agent_task_event_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'agent_task_event is append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER agent_task_event_no_update BEFORE UPDATE OR DELETE ON agent_task_event
    FOR EACH ROW EXECUTE FUNCTION agent_task_event_append_only();
CREATE TRIGGER agent_task_event_no_truncate BEFORE TRUNCATE ON agent_task_event
    FOR EACH STATEMENT EXECUTE FUNCTION agent_task_event_append_only();

-- seq must be exactly one more than the task's previous event: no gaps, no reordering.
CREATE FUNCTION agent_task_event_next_seq() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    prev bigint;
BEGIN
    SELECT coalesce(max(seq), 0) INTO prev FROM agent_task_event WHERE task_id = NEW.task_id;
    IF NEW.seq <> prev + 1 THEN
        RAISE EXCEPTION 'agent_task_event seq % for task % is not %', NEW.seq, NEW.task_id, prev + 1
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER agent_task_event_seq BEFORE INSERT ON agent_task_event
    FOR EACH ROW EXECUTE FUNCTION agent_task_event_next_seq();

-- A command: recorded before any side effect, closed by exactly one receipt.
CREATE TABLE task_command (
    tenant_id   text NOT NULL,
    command_id  text PRIMARY KEY CHECK (command_id ~ '^cmd_[A-Za-z0-9_-]{1,64}$'),
    task_id     text NOT NULL,
    operation   text NOT NULL CHECK (operation ~ '^[a-z_]+$'),
    actor       text NOT NULL,
    side_effecting boolean NOT NULL,
    node_id     text REFERENCES runtime_node (node_id),
    recorded_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, command_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id)
);
CREATE INDEX task_command_task_idx ON task_command (task_id, recorded_at);

CREATE TABLE task_receipt (
    tenant_id  text NOT NULL,
    receipt_id text PRIMARY KEY CHECK (receipt_id ~ '^rcp_[A-Za-z0-9_-]{1,64}$'),
    command_id text NOT NULL UNIQUE,
    outcome    text NOT NULL CHECK (outcome IN ('applied', 'no_side_effect', 'pending_approval', 'rejected',
                   'unknown_outcome', 'reconciliation_required')),
    -- For a rejected command, the stable problem code it was refused with.
    problem_code text CHECK ((outcome = 'rejected') = (problem_code IS NOT NULL)),
    detail     text NOT NULL DEFAULT '',
    issued_at  timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, command_id) REFERENCES task_command (tenant_id, command_id)
);

-- Idempotency: one key per tenant; the first response is kept and replayed.
CREATE TABLE idempotency_record (
    tenant_id       text NOT NULL REFERENCES tenant_account (tenant_id),
    idempotency_key text NOT NULL CHECK (idempotency_key ~ '^[!-~]{1,255}$'),
    operation       text NOT NULL CHECK (operation ~ '^[a-z_]+$'),
    request_hash    bytea NOT NULL CHECK (octet_length(request_hash) = 32),
    state           text NOT NULL CHECK (state IN ('in_flight', 'completed')),
    command_id      text NOT NULL CHECK (command_id ~ '^cmd_[A-Za-z0-9_-]{1,64}$'),
    node_id         text REFERENCES runtime_node (node_id),
    response_status integer CHECK (response_status BETWEEN 200 AND 599),
    response_body   bytea,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, idempotency_key),
    -- Implied by the key above; kept explicit because replays are looked up by all three.
    UNIQUE (tenant_id, idempotency_key, operation),
    CHECK ((state = 'completed') = (response_status IS NOT NULL AND response_body IS NOT NULL AND completed_at IS NOT NULL))
);
CREATE INDEX idempotency_record_expiry_idx ON idempotency_record (expires_at);

-- Reconciliation: an interrupted side-effecting command an operator must settle.
CREATE TABLE task_reconciliation (
    tenant_id  text NOT NULL,
    reconciliation_id text PRIMARY KEY CHECK (reconciliation_id ~ '^rec_[A-Za-z0-9_-]{1,64}$'),
    task_id    text NOT NULL,
    command_id text NOT NULL UNIQUE,
    state      text NOT NULL CHECK (state IN ('open', 'resolved')),
    resolution text CHECK (resolution IN ('applied', 'no_side_effect')),
    note       text NOT NULL DEFAULT '' CHECK (char_length(note) <= 2000),
    opened_at  timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    resolved_by text,
    CHECK ((state = 'resolved') = (resolution IS NOT NULL AND resolved_at IS NOT NULL AND resolved_by IS NOT NULL)),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id),
    FOREIGN KEY (tenant_id, command_id) REFERENCES task_command (tenant_id, command_id)
);

CREATE TABLE approval_request (
    tenant_id    text NOT NULL,
    approval_id  text PRIMARY KEY CHECK (approval_id ~ '^apr_[A-Za-z0-9_-]{1,64}$'),
    task_id      text NOT NULL,
    command_id   text NOT NULL,
    state        text NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'cancelled', 'expired')),
    reason       text NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 2000),
    effect       text CHECK (effect IN ('form_submission', 'file_upload', 'any_action')),
    -- SHA-256 of the held action (operation + canonical arguments + epoch), when an action is held.
    action_digest bytea CHECK (action_digest IS NULL OR octet_length(action_digest) = 32),
    requested_by text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    closed_at    timestamptz,
    UNIQUE (tenant_id, approval_id),
    CHECK ((state = 'pending') = (closed_at IS NULL)),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id),
    FOREIGN KEY (tenant_id, command_id) REFERENCES task_command (tenant_id, command_id)
);
CREATE INDEX approval_request_task_idx ON approval_request (task_id) WHERE state = 'pending';

CREATE TABLE approval_decision (
    tenant_id   text NOT NULL,
    approval_id text PRIMARY KEY,
    decision    text NOT NULL CHECK (decision IN ('approve', 'deny')),
    decided_by  text NOT NULL,
    reason      text NOT NULL DEFAULT '' CHECK (char_length(reason) <= 2000),
    command_id  text NOT NULL,
    decided_at  timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, approval_id) REFERENCES approval_request (tenant_id, approval_id),
    FOREIGN KEY (tenant_id, command_id) REFERENCES task_command (tenant_id, command_id)
);

CREATE TABLE browser_session (
    tenant_id  text NOT NULL,
    session_id text PRIMARY KEY CHECK (session_id ~ '^bs_[A-Za-z0-9_-]{1,64}$'),
    task_id    text NOT NULL,
    node_id    text REFERENCES runtime_node (node_id),
    state      text NOT NULL CHECK (state IN ('open', 'closed', 'lost')),
    created_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz,
    UNIQUE (tenant_id, session_id),
    CHECK ((state = 'open') = (ended_at IS NULL)),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id)
);

CREATE TABLE browsing_context (
    tenant_id  text NOT NULL,
    context_id text PRIMARY KEY CHECK (context_id ~ '^ctx_[A-Za-z0-9_-]{1,64}$'),
    session_id text NOT NULL,
    opener_context_id text REFERENCES browsing_context (context_id),
    created_at timestamptz NOT NULL DEFAULT now(),
    closed_at  timestamptz,
    UNIQUE (tenant_id, context_id),
    FOREIGN KEY (tenant_id, session_id) REFERENCES browser_session (tenant_id, session_id)
);

CREATE TABLE document_epoch (
    tenant_id  text NOT NULL,
    epoch_id   text PRIMARY KEY CHECK (epoch_id ~ '^ep_[A-Za-z0-9_-]{1,64}$'),
    context_id text NOT NULL,
    url        text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, epoch_id),
    FOREIGN KEY (tenant_id, context_id) REFERENCES browsing_context (tenant_id, context_id)
);

-- Node handles handed to clients; the raw browser ids behind them live only in the node's memory.
CREATE TABLE node_handle_record (
    tenant_id  text NOT NULL,
    node_handle_id text PRIMARY KEY CHECK (node_handle_id ~ '^nd_[A-Za-z0-9_-]{1,64}$'),
    epoch_id   text NOT NULL,
    role       text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, epoch_id) REFERENCES document_epoch (tenant_id, epoch_id)
);

CREATE TABLE artifact_content (
    sha256     text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size       bigint NOT NULL CHECK (size >= 0),
    content    bytea NOT NULL,
    CHECK (octet_length(content) = size)
);

CREATE TABLE artifact_reference (
    tenant_id   text NOT NULL,
    artifact_id text PRIMARY KEY CHECK (artifact_id ~ '^art_[A-Za-z0-9_-]{1,64}$'),
    sha256      text NOT NULL REFERENCES artifact_content (sha256),
    media_type  text NOT NULL CHECK (media_type ~ '^[a-z]+/[A-Za-z0-9.+-]+$'),
    kind        text NOT NULL CHECK (kind IN ('screenshot', 'dom_snapshot', 'ax_snapshot', 'checkpoint', 'upload', 'other')),
    task_id     text NOT NULL,
    session_id  text,
    epoch_id    text,
    command_id  text,
    source_url  text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, artifact_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id)
);

CREATE TABLE task_checkpoint (
    tenant_id     text NOT NULL,
    checkpoint_id text PRIMARY KEY CHECK (checkpoint_id ~ '^chk_[A-Za-z0-9_-]{1,64}$'),
    task_id       text NOT NULL,
    session_id    text NOT NULL,
    artifact_id   text NOT NULL REFERENCES artifact_reference (artifact_id),
    software_version text NOT NULL,
    protocol_version text NOT NULL,
    policy_digest text NOT NULL CHECK (policy_digest ~ '^[0-9a-f]{64}$'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id),
    FOREIGN KEY (tenant_id, session_id) REFERENCES browser_session (tenant_id, session_id)
);

-- Protocol adapters (BAP over HTTP, MCP) and the mapping of their requests onto BAP handles.
CREATE TABLE protocol_adapter (
    adapter_id text PRIMARY KEY CHECK (adapter_id ~ '^[a-z0-9_-]+$'),
    protocol_version text NOT NULL
);
INSERT INTO protocol_adapter (adapter_id, protocol_version) VALUES ('bap-http', '1.0'), ('mcp', '2026-07-28');

CREATE TABLE protocol_session_binding (
    tenant_id  text NOT NULL,
    binding_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    adapter_id text NOT NULL REFERENCES protocol_adapter (adapter_id),
    external_ref text NOT NULL CHECK (char_length(external_ref) BETWEEN 1 AND 255),
    task_id    text NOT NULL,
    session_id text,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, adapter_id, external_ref),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id)
);

-- Transactional outbox: written in the command's transaction, relayed to subscribers. The
-- transaction_id/offset pair follows watermill-sql's PostgreSQL schema, so a relay reads rows only
-- once every transaction that could still insert before them has finished.
CREATE TABLE outbox_event (
    "offset"       bigint GENERATED ALWAYS AS IDENTITY,
    uuid           text NOT NULL UNIQUE,
    created_at     timestamptz NOT NULL DEFAULT now(),
    payload        bytea NOT NULL,
    metadata       jsonb NOT NULL DEFAULT '{}',
    transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
    tenant_id      text NOT NULL,
    task_id        text NOT NULL,
    seq            bigint NOT NULL,
    PRIMARY KEY (transaction_id, "offset"),
    FOREIGN KEY (task_id, seq) REFERENCES agent_task_event (task_id, seq)
);

CREATE TABLE inbox_event (
    consumer     text NOT NULL CHECK (char_length(consumer) BETWEEN 1 AND 255),
    event_id     text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

CREATE TABLE dead_letter_record (
    tenant_id  text NOT NULL,
    dead_letter_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id    text NOT NULL,
    command_id text,
    reason     text NOT NULL,
    attempts   integer NOT NULL CHECK (attempts >= 0),
    evidence   jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id)
);
