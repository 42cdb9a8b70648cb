-- 0019 inbound deliveries processed exactly once (issue #23 item 1, ADR 0019 addendum). 0001 created
-- inbox_event as (consumer, event_id) and nothing ever wrote or read it, so it is rebuilt (empty)
-- with what an inbox needs: who delivered (source), the sender's id of the delivery, a digest of
-- what was delivered (a reused id with other content is refused, never taken for a redelivery), and
-- what the delivery was processed into. A row is inserted in the transaction of its effect, so a
-- redelivery after a crash between the effect and the acknowledgement finds it and is answered
-- from the first result instead of running again.
--   source 'node:<node_id>': a command another node forwarded (ADR 0012); the delivery id is its
--     node credential's id; it was processed into the command's idempotency record, whose stored
--     first response answers every redelivery (the row goes with that record when it expires).
--   source 'orchestrator': a model orchestrator's reply (its chat completion id); it was processed
--     into the task's model.called event.
DROP TABLE inbox_event;
CREATE TABLE inbox_event (
    source          text NOT NULL CHECK (source ~ '^(orchestrator|node:[!-~]{1,200})$'),
    delivery_id     text NOT NULL CHECK (delivery_id ~ '^[!-~]{1,255}$'),
    tenant_id       text NOT NULL REFERENCES tenant_account (tenant_id),
    content_sha256  bytea NOT NULL CHECK (octet_length(content_sha256) = 32),
    received_at     timestamptz NOT NULL DEFAULT now(),
    idempotency_key text,
    task_id         text,
    event_seq       bigint,
    PRIMARY KEY (source, delivery_id),
    FOREIGN KEY (tenant_id, idempotency_key) REFERENCES idempotency_record (tenant_id, idempotency_key) ON DELETE CASCADE,
    FOREIGN KEY (task_id, event_seq) REFERENCES agent_task_event (task_id, seq),
    -- a forwarded command became an idempotency record, an orchestrator reply a history event
    CHECK ((source = 'orchestrator') = (task_id IS NOT NULL AND event_seq IS NOT NULL AND idempotency_key IS NULL)),
    CHECK ((source <> 'orchestrator') = (idempotency_key IS NOT NULL AND task_id IS NULL AND event_seq IS NULL))
);
CREATE INDEX inbox_event_idempotency_idx ON inbox_event (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- A delivery's record is never rewritten: what it became stays what it became.
CREATE FUNCTION inbox_event_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'inbox_event rows are never rewritten: % refused', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER inbox_event_no_update BEFORE UPDATE ON inbox_event
    FOR EACH ROW EXECUTE FUNCTION inbox_event_immutable();
