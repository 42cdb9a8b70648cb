-- 0005 checkpoints (ADR 0010): what checkpoint_browser_session records beside its state artifact,
-- which checkpoint a restored session came from, and the lookups recovery needs.
ALTER TABLE task_checkpoint
    ADD COLUMN url      text NOT NULL DEFAULT '',
    ADD COLUMN epoch_id text CHECK (epoch_id ~ '^ep_[A-Za-z0-9_-]{1,64}$'),
    ADD COLUMN format   text NOT NULL CHECK (format ~ '^bap\.checkpoint/[0-9]+$'),
    -- The state artifact is the checkpoint's tenant's.
    ADD FOREIGN KEY (tenant_id, artifact_id) REFERENCES artifact_reference (tenant_id, artifact_id);
CREATE INDEX task_checkpoint_task_idx ON task_checkpoint (tenant_id, task_id);

ALTER TABLE browser_session
    ADD COLUMN from_checkpoint_id text REFERENCES task_checkpoint (checkpoint_id);

-- Open sessions by node: recovery marks those of stopped or silent nodes lost.
CREATE INDEX browser_session_open_idx ON browser_session (node_id) WHERE state = 'open';
