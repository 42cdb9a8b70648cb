-- 0014 decisions bind what the brief lists (issue #23 item 6): actor, workload, tenant, session,
-- task, purpose, operation, origin scope, data classification and approval state, on each
-- authorization and policy decision. auth_decision (0003) already held the request's
-- authorization (actor, workload, tenant, operation, task); it now also records the policy's
-- decisions: where it was decided, the session, the channel, the origin the operation reached for,
-- and the approval and its state. The task's purpose (its goal), its origin scope (the allowed
-- origins) and its data classification are the task's and never change, so a decision names them
-- by its task (3NF) and decision_binding shows all ten together. None comes from a request body:
-- the actor, workload and channel are the authenticated principal's, the rest the task's and its
-- policy's.
ALTER TABLE auth_decision DROP CONSTRAINT auth_decision_outcome_check;
ALTER TABLE auth_decision
    ADD CONSTRAINT auth_decision_outcome_check CHECK (outcome IN ('allowed', 'refused', 'issued', 'revoked', 'held')),
    -- Where it was decided: the request's authentication and capability, admission of a task,
    -- the origin policy, an approval rule, or who may resolve an approval.
    ADD COLUMN decision_point text NOT NULL DEFAULT 'request'
        CHECK (decision_point IN ('request', 'admission', 'origin_policy', 'approval_rule', 'approval_resolution')),
    ADD COLUMN via text CHECK (via IS NULL OR via ~ '^[a-z_]{1,32}$'),
    ADD COLUMN session_id text CHECK (session_id IS NULL OR session_id ~ '^bs_[A-Za-z0-9_-]{1,64}$'),
    ADD COLUMN command_id text CHECK (command_id IS NULL OR command_id ~ '^cmd_[A-Za-z0-9_-]{1,64}$'),
    -- The origin (scheme://host[:port]) the operation reached for, when it named one.
    ADD COLUMN target_origin text CHECK (target_origin IS NULL OR char_length(target_origin) BETWEEN 1 AND 300),
    ADD COLUMN approval_id text CHECK (approval_id IS NULL OR approval_id ~ '^apr_[A-Za-z0-9_-]{1,64}$'),
    ADD COLUMN approval_state text NOT NULL DEFAULT 'none'
        CHECK (approval_state IN ('none', 'pending', 'approved', 'denied', 'cancelled', 'expired'));
CREATE INDEX auth_decision_task_idx ON auth_decision (task_id, occurred_at) WHERE task_id IS NOT NULL;

-- Every decision with the ten things it is bound to; a task's are those of the task (of the
-- decision's tenant only: a refused request may name another tenant's task id).
CREATE VIEW decision_binding AS
    SELECT d.decision_id, d.occurred_at, d.decision_point, d.outcome, d.reason,
        d.subject AS actor, d.client_id AS workload, d.via, d.tenant_id AS tenant, d.session_id, d.task_id,
        t.goal AS purpose, d.operation, d.scope,
        d.target_origin,
        (SELECT json_agg(o.pattern ORDER BY o.position) FROM task_allowed_origin o WHERE o.task_id = t.task_id) AS origin_scope,
        coalesce(mp.data_classification, CASE WHEN t.task_id IS NOT NULL THEN 'unclassified' END) AS data_classification,
        d.approval_id, d.approval_state, d.command_id
    FROM auth_decision d
    LEFT JOIN agent_task t ON t.task_id = d.task_id AND t.tenant_id = d.tenant_id
    LEFT JOIN task_model_policy mp ON mp.task_id = t.task_id;
