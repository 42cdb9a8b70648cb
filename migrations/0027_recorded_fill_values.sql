-- 0027 the values a recording task's plain fills typed (issue #20, ADR 0035): sealed under the
-- server key (purpose recorded-fill-values, bound to tenant, task and command), so that a replay
-- can type them again and its archive can mask them as the recording did. The database holds
-- only the sealed bytes; nothing but replay_task opens them, and they never enter history, events,
-- archives or bundles. One row per fill command, written in that command's transaction; never
-- changed.
CREATE TABLE task_fill_value (
    tenant_id  text NOT NULL,
    task_id    text NOT NULL,
    command_id text NOT NULL,
    sealed     bytea NOT NULL CHECK (octet_length(sealed) BETWEEN 1 AND 1048576),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, command_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, command_id, task_id) REFERENCES task_command (tenant_id, command_id, task_id) ON DELETE CASCADE
);

-- Never changed (task_result_immutable, 0012, names its table: "task_fill_value is written
-- once"); deleted only with its task.
CREATE TRIGGER task_fill_value_no_update BEFORE UPDATE ON task_fill_value
    FOR EACH ROW EXECUTE FUNCTION task_result_immutable();
