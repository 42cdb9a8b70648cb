-- 0016 protocol_session_binding written and read: an MCP Tasks-extension task is bound to the BAP
-- task (and session) its tool call drives, with the task's state as the adapter presented it, so
-- that every node of a cluster answers tasks/get, also after the node that ran it is gone (issue
-- #23 item 1, ADR 0019). The BAP command stays the authority; this row only remembers how the
-- MCP task presents it. Read only by the binding's tenant and subject.
ALTER TABLE protocol_session_binding
    ADD COLUMN subject text NOT NULL DEFAULT '' CHECK (char_length(subject) <= 255),
    ADD COLUMN status text NOT NULL DEFAULT 'working'
        CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
    ADD COLUMN status_message text NOT NULL DEFAULT '' CHECK (char_length(status_message) <= 2000),
    -- The terminal answer: {"result": CallToolResult} (completed) or {"error": JSON-RPC error} (failed).
    ADD COLUMN outcome jsonb CHECK (outcome IS NULL OR jsonb_typeof(outcome) = 'object'),
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN expires_at timestamptz NOT NULL DEFAULT now(),
    ADD CONSTRAINT protocol_session_binding_end_check
        CHECK ((status IN ('completed', 'failed')) = (outcome IS NOT NULL));
INSERT INTO protocol_adapter (adapter_id, name) VALUES ('mcp', 'Model Context Protocol') ON CONFLICT (adapter_id) DO NOTHING;
