-- 0026 verified replay (issue #20 item 4, ADR 0035): a task that replays another task of the same
-- tenant against that task's archive. A row of its own, like task_recording: written once with the
-- task, and most tasks are not replays. The foreign keys keep a replay within its tenant: the
-- task it replays is one of the same tenant's, and a task never replays itself. mode: `archive`
-- (answered from the archive, nothing reaches the network) or `live_dry_run` (the real sites,
-- safe requests only, up to the first recorded side effect).
CREATE TABLE task_replay (
    tenant_id text NOT NULL,
    task_id   text NOT NULL,
    replay_of text NOT NULL,
    mode      text NOT NULL DEFAULT 'archive' CHECK (mode IN ('archive', 'live_dry_run')),
    PRIMARY KEY (task_id),
    CHECK (replay_of <> task_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, replay_of) REFERENCES agent_task (tenant_id, task_id)
);
CREATE INDEX task_replay_of_idx ON task_replay (tenant_id, replay_of);
