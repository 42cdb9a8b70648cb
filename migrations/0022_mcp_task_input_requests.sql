-- 0022 what a bound MCP task waits for (issue #23 item 1, ADR 0031). A task in input_required
-- was recorded with its status only, so another node answered tasks/get with `working`: its input
-- requests lived with the run. They are recorded beside the status (the extension's
-- `inputRequests`, keyed by their request key), so every node answers `input_required` with them;
-- only an input_required task has them. NULL on rows written before this migration (such a task
-- is answered as before).
ALTER TABLE protocol_session_binding
    ADD COLUMN input_requests jsonb
        CHECK (input_requests IS NULL OR (jsonb_typeof(input_requests) = 'object' AND status = 'input_required'));
