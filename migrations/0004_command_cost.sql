-- 0004 command cost (docs/benchmarks.md, "Where create_task's time goes" and "Cold start").
--
-- 1. agent_task_tenant_state_idx (tenant_id, state, created_at) made PostgreSQL's generic plans,
--    cached on a fresh, unanalysed table, look tasks up by tenant and filter on task_id — reading
--    every task of the tenant for each foreign-key check and task UPDATE until the first
--    autoanalyze. Two partial indexes serve the only queries that used it and leave no such choice.
-- 2. task_command.node_id and idempotency_record.node_id name the node for diagnostics and
--    recovery; their foreign keys made every concurrent command share-lock the same runtime_node
--    row. Recovery joins runtime_node and treats an unknown node as dead, so nothing relies on them.
DROP INDEX agent_task_tenant_state_idx;
CREATE INDEX agent_task_waiting_idx ON agent_task (tenant_id, created_at) WHERE state = 'created';
CREATE INDEX agent_task_active_idx ON agent_task (tenant_id)
    WHERE state IN ('admitted', 'running', 'waiting_for_approval', 'waiting_for_external_input', 'checkpointed');

ALTER TABLE task_command DROP CONSTRAINT task_command_node_id_fkey;
ALTER TABLE idempotency_record DROP CONSTRAINT idempotency_record_node_id_fkey;
