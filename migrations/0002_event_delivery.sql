-- 0002 event delivery: the outbox as the event streams read it (docs/events.md, ADR 0007).
--
-- One outbox message per (command, task) instead of one per event: `payload` holds the command's
-- events of that task (a JSON array, seq `seq` .. `last_seq`), written by the watermill-sql
-- publisher on the command's own transaction.
--
-- Feed order. `transaction_id` (xid8) makes a row readable only once every transaction that could
-- still insert before it has ended (watermill-sql's ordering). But xid order is not a task's seq
-- order: a command that took its xid early (its idempotency claim) may wait for the task lock
-- while a later-xid command on the same task commits first. So each row also gets a feed position
-- (order_xid, order_offset): its own (transaction_id, offset), or its task's previous position
-- when that is higher. Positions never decrease within a task, and every row not yet committed
-- will get a position >= (oldest running xid, 0), so rows with order_xid below the snapshot's
-- xmin are final and can be read in (order_xid, order_offset, seq) order by every node.

ALTER TABLE outbox_event DROP CONSTRAINT outbox_event_pkey;
ALTER TABLE outbox_event DROP CONSTRAINT outbox_event_uuid_key;
ALTER TABLE outbox_event ADD PRIMARY KEY ("offset");
ALTER TABLE outbox_event
    ADD COLUMN last_seq     bigint,
    ADD COLUMN order_xid    xid8,
    ADD COLUMN order_offset bigint;
UPDATE outbox_event SET last_seq = seq, order_xid = transaction_id, order_offset = "offset";
ALTER TABLE outbox_event
    ALTER COLUMN last_seq SET NOT NULL,
    ALTER COLUMN order_xid SET NOT NULL,
    ALTER COLUMN order_offset SET NOT NULL,
    ADD CHECK (seq >= 1 AND last_seq >= seq);

CREATE INDEX outbox_event_feed_idx ON outbox_event (order_xid, order_offset, seq);
CREATE INDEX outbox_event_task_idx ON outbox_event (task_id, seq);

CREATE FUNCTION outbox_event_feed_position() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    prev_xid xid8;
    prev_offset bigint;
BEGIN
    SELECT order_xid, order_offset INTO prev_xid, prev_offset FROM outbox_event
        WHERE task_id = NEW.task_id ORDER BY seq DESC LIMIT 1;
    IF FOUND AND (prev_xid, prev_offset) > (NEW.transaction_id, NEW."offset") THEN
        NEW.order_xid := prev_xid;
        NEW.order_offset := prev_offset;
    ELSE
        NEW.order_xid := NEW.transaction_id;
        NEW.order_offset := NEW."offset";
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER outbox_event_feed_position BEFORE INSERT ON outbox_event
    FOR EACH ROW EXECUTE FUNCTION outbox_event_feed_position();

-- Where each node's relay (one watermill-sql consumer group per running node) has read the feed
-- up to. A new group starts at the feed's head: streams replay history themselves, so a relay
-- never needs rows from before it started. Rows of stopped or dead nodes are removed by upkeep.
CREATE TABLE outbox_consumer_offset (
    consumer_group text PRIMARY KEY CHECK (char_length(consumer_group) BETWEEN 1 AND 255),
    order_xid      xid8 NOT NULL,
    order_offset   bigint NOT NULL,
    seq            bigint NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
