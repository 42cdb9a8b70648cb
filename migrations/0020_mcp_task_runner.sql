-- 0020 the node that runs an MCP task (issue #23 item 1, ADR 0019 addendum). A bound task whose
-- node died mid-run was answered `working` by every other node until it expired: nothing would
-- ever record its end. With the runner recorded, a node answering tasks/get sees that the runner
-- stopped (or missed its heartbeats) and ends the task as failed, pointing the client at the BAP
-- command's classified outcome. NULL for tasks bound before this migration (their runner is not
-- known, and they are answered as before).
ALTER TABLE protocol_session_binding
    ADD COLUMN node_id text REFERENCES runtime_node (node_id);
