-- 0030 the history's seq and chain rules, checked once per statement instead of once per row
-- (issue #25). Since 0024 a BEFORE INSERT row trigger read each new event's predecessor and
-- refused a gap, an unchained event or a broken link. A plpgsql call per row cost about 9 µs of
-- the 25 µs an event row costs (8,000 rows: 194-216 ms with it, 124 ms without), and a
-- create_task writes four; merged into group commits (ADR 0039) they arrive in statements of
-- twenty and more.
--
-- The same rules, as one query over the statement's new rows (a transition table) after it ran:
-- every new event is chained (digest set), and its predecessor (task_id, seq - 1) exists, new or
-- old, with prev_digest equal to that event's digest (zeros when the predecessor predates the
-- chain, and for seq 1). With the primary key (task_id, seq), the CHECK seq >= 1 and the table
-- being append-only, that is what the row trigger enforced: no gap, no reordering, no broken
-- link. One difference: a repeated seq is now refused by the primary key (23505) rather than by
-- the trigger (23514).
DROP TRIGGER agent_task_event_seq ON agent_task_event;
DROP FUNCTION agent_task_event_next_seq();

CREATE FUNCTION agent_task_event_check_chain() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.task_id, n.seq, n.digest IS NULL AS unchained, p.task_id IS NULL AND n.seq > 1 AS gap
    INTO bad
    FROM new_events n
    LEFT JOIN agent_task_event p ON p.task_id = n.task_id AND p.seq = n.seq - 1
    WHERE n.digest IS NULL
       OR (p.task_id IS NULL AND n.seq > 1)
       OR n.prev_digest <> coalesce(p.digest, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea)
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    ELSIF bad.gap THEN
        RAISE EXCEPTION 'agent_task_event seq % for task % does not follow the task''s last event', bad.seq, bad.task_id
            USING ERRCODE = 'check_violation';
    ELSIF bad.unchained THEN
        RAISE EXCEPTION 'agent_task_event seq % for task % is not chained', bad.seq, bad.task_id
            USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'agent_task_event seq % for task % does not link to seq %', bad.seq, bad.task_id, bad.seq - 1
        USING ERRCODE = 'check_violation';
END;
$$;

CREATE TRIGGER agent_task_event_chain AFTER INSERT ON agent_task_event
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION agent_task_event_check_chain();
