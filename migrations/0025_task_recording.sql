-- 0025 policy.record (issue #20 item 2): the tasks whose browser sessions are archived as WARC.
-- A row of its own rather than a column of agent_task: a task's policy is written once, with the
-- task, and most tasks do not record. The archive itself is a file per session on the node that
-- ran it (<data-dir>/records/<tenant>/<task>/<session>.warc), not a database row: it can be tens
-- of MiB, it is appended to while the session runs, and no transaction needs it.
CREATE TABLE task_recording (
    tenant_id text NOT NULL,
    task_id   text NOT NULL,
    PRIMARY KEY (task_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE
);
