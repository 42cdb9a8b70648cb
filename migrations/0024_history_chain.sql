-- 0024 the keyed hash chain over history (issue #20, ADR 0033).
--
-- Every event carries digest = HMAC-SHA256(k, canonical(event) ‖ prev_digest), k derived from the
-- server key, which the database holds only wrapped: whoever writes to the database without the
-- key cannot edit, insert or drop an event without the chain breaking at its seq. Events written
-- before this migration have no digests; a task's chain starts at its first chained event, whose
-- prev_digest is 32 zero bytes.
ALTER TABLE agent_task_event
    ADD COLUMN prev_digest bytea,
    ADD COLUMN digest bytea,
    ADD CONSTRAINT agent_task_event_chain_shape CHECK ((digest IS NULL) = (prev_digest IS NULL)
        AND (digest IS NULL OR (octet_length(digest) = 32 AND octet_length(prev_digest) = 32)));

-- The head of the task's chain, next to last_seq (and locked with it): the digest of event
-- last_seq and the public hash through it, SHA-256(prev ‖ canonical(event)), which anchors sign.
-- NULL while no event of the task is chained.
ALTER TABLE agent_task
    ADD COLUMN chain_digest bytea,
    ADD COLUMN chain_sha256 bytea,
    ADD CONSTRAINT agent_task_chain_shape CHECK ((chain_digest IS NULL) = (chain_sha256 IS NULL)
        AND (chain_digest IS NULL OR (octet_length(chain_digest) = 32 AND octet_length(chain_sha256) = 32)));

-- seq is exactly one more than the task's previous event, and from now on every event is chained
-- to the one before it: its prev_digest is that event's digest (zeros when that event predates
-- the chain, or for a task's first event). Whether the digest itself is right only the key can
-- tell (`bap audit verify`); the database refuses what it can see is wrong.
CREATE OR REPLACE FUNCTION agent_task_event_next_seq() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    prev_seq bigint;
    prev_digest bytea;
BEGIN
    SELECT seq, digest INTO prev_seq, prev_digest FROM agent_task_event
        WHERE task_id = NEW.task_id ORDER BY seq DESC LIMIT 1;
    IF NOT FOUND THEN
        prev_seq := 0;
    END IF;
    IF NEW.seq <> prev_seq + 1 THEN
        RAISE EXCEPTION 'agent_task_event seq % for task % is not %', NEW.seq, NEW.task_id, prev_seq + 1
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.digest IS NULL THEN
        RAISE EXCEPTION 'agent_task_event seq % for task % is not chained', NEW.seq, NEW.task_id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.prev_digest <> coalesce(prev_digest, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea) THEN
        RAISE EXCEPTION 'agent_task_event seq % for task % does not link to seq %', NEW.seq, NEW.task_id, prev_seq
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

-- The key that signs anchors (ES256), sealed with the server key (purpose audit-signing-key):
-- a copy of the database cannot sign. Unlike the token keys it never retires: an anchor must stay
-- verifiable for as long as its bundle is kept, so every key stays published
-- (GET /bap/v1/audit/keys). The newest signs.
CREATE TABLE audit_signing_key (
    key_id      text PRIMARY KEY CHECK (key_id ~ '^ak_[0-9a-f]{16}$'),
    private_key bytea NOT NULL CHECK (octet_length(private_key) >= 37),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- An anchor: a signed statement of one task's chain head at one moment (at the task's end,
-- periodically while its history grows, and when a bundle of it is exported past its last
-- anchor). Append-only like the history it pins.
CREATE TABLE audit_anchor (
    tenant_id      text NOT NULL,
    task_id        text NOT NULL,
    seq            bigint NOT NULL CHECK (seq >= 1),
    digest         bytea NOT NULL CHECK (octet_length(digest) = 32),
    history_sha256 bytea NOT NULL CHECK (octet_length(history_sha256) = 32),
    reason         text NOT NULL CHECK (reason IN ('task_ended', 'periodic', 'exported')),
    key_id         text NOT NULL REFERENCES audit_signing_key (key_id),
    statement      text NOT NULL CHECK (char_length(statement) BETWEEN 1 AND 4096),
    anchored_at    timestamptz NOT NULL,
    PRIMARY KEY (task_id, seq),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id),
    FOREIGN KEY (task_id, seq) REFERENCES agent_task_event (task_id, seq)
);

CREATE FUNCTION audit_anchor_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_anchor is append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

-- The live tasks the upkeep anchors periodically (DueForAnchor): a task enters the index when
-- it starts running, so create_task, whose tasks wait in admitted, writes no entry.
CREATE INDEX agent_task_live_idx ON agent_task (updated_at)
    WHERE state IN ('running', 'waiting_for_approval', 'waiting_for_external_input', 'checkpointed');

CREATE TRIGGER audit_anchor_no_update BEFORE UPDATE OR DELETE ON audit_anchor
    FOR EACH ROW EXECUTE FUNCTION audit_anchor_append_only();
CREATE TRIGGER audit_anchor_no_truncate BEFORE TRUNCATE ON audit_anchor
    FOR EACH STATEMENT EXECUTE FUNCTION audit_anchor_append_only();
