-- 0009 out-of-band approvers (issue #24 item 4): separation of duties is always on, every approval
-- expires, and a decision records how it reached the server.

-- Who caused an approval besides its requester: the OAuth client of the request, and for a hold
-- raised by a delegated or autonomous task's own worker, the task's creator and client. None of
-- them may resolve it.
ALTER TABLE agent_task
    ADD COLUMN created_client text CHECK (created_client IS NULL OR char_length(created_client) BETWEEN 1 AND 255);

ALTER TABLE approval_request
    ADD COLUMN requested_client text CHECK (requested_client IS NULL OR char_length(requested_client) BETWEEN 1 AND 255),
    ADD COLUMN on_behalf_of     text CHECK (on_behalf_of IS NULL OR char_length(on_behalf_of) BETWEEN 1 AND 255),
    ADD COLUMN on_behalf_client text CHECK (on_behalf_client IS NULL OR char_length(on_behalf_client) BETWEEN 1 AND 255),
    -- When a still pending approval expires: requested_at plus its rule's ttl (default 15 minutes).
    ADD COLUMN expires_at       timestamptz,
    -- Who may answer it: a separate approver only, or also the requesting MCP client's elicitation.
    ADD COLUMN channel          text NOT NULL DEFAULT 'approver' CHECK (channel IN ('approver', 'elicitation')),
    ADD CHECK (on_behalf_client IS NULL OR on_behalf_of IS NOT NULL);

-- Approvals recorded before this migration get the default lifetime; one already past it is
-- expired by the first upkeep round (never revived).
UPDATE approval_request SET expires_at = requested_at + interval '15 minutes' WHERE expires_at IS NULL;
ALTER TABLE approval_request
    ALTER COLUMN expires_at SET NOT NULL,
    ADD CHECK (expires_at > requested_at AND expires_at <= requested_at + interval '24 hours');
-- The upkeep's scan for due approvals.
CREATE INDEX approval_request_expiry_idx ON approval_request (expires_at) WHERE state = 'pending';

-- How the decision reached the server. Decisions recorded before this migration came through the
-- HTTP API.
ALTER TABLE approval_decision
    ADD COLUMN channel text NOT NULL DEFAULT 'api' CHECK (channel IN ('api', 'socket', 'mcp', 'elicitation'));

-- A rule's approvals: their lifetime (NULL: the default 15 minutes) and who may answer them.
ALTER TABLE task_approval_rule
    ADD COLUMN ttl_seconds integer CHECK (ttl_seconds IS NULL OR ttl_seconds BETWEEN 1 AND 86400),
    ADD COLUMN channel     text NOT NULL DEFAULT 'approver' CHECK (channel IN ('approver', 'elicitation'));
