-- 0029 an outbox message names its events instead of carrying a copy of them (ADR 0040, issue
-- #25). The command's transaction writes the events to agent_task_event and one outbox_event row
-- per task it touched; that row's (tenant_id, task_id, seq, last_seq) already named the events,
-- and its payload repeated them as JSON: about 1.4 kB of a create_task's 8.2 kB of WAL. A relay
-- now reads the events of a message from the history, and only for the tenants that have a
-- subscriber on its node; the all-tasks stream's replay already read them from there.
--
-- New rows have an empty payload; the CHECK makes that a rule, so that a binary that still writes
-- payloads (and would read the new rows as undecodable) cannot share the database with one that
-- does not: its commands fail instead of its subscribers silently missing events. Rows written
-- before stay as they are until the relay's retention prunes them (NOT VALID: no table rewrite).
ALTER TABLE outbox_event
    ALTER COLUMN payload SET DEFAULT '',
    ADD CONSTRAINT outbox_event_payload_empty CHECK (octet_length(payload) = 0) NOT VALID;
