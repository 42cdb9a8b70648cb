-- 0012 the protocol tables written and read, and verifiable task results (issue #23 items 1 and 5,
-- ADR 0019).

-- Node handles are durable: every handle observe and query_nodes hand out is recorded under its
-- document epoch (and so its browsing context and session), so that after a restart a handle
-- issued before it answers 409 stale_node_handle with its reason rather than 404. Handle ids are
-- unique within a session, not across sessions (a per-session permutation), hence the key. The
-- records go with their session: deleting a session deletes its contexts, epochs and handles.
ALTER TABLE node_handle_record DROP CONSTRAINT node_handle_record_pkey;
ALTER TABLE node_handle_record ADD PRIMARY KEY (epoch_id, node_handle_id);
ALTER TABLE node_handle_record DROP CONSTRAINT node_handle_record_tenant_id_epoch_id_fkey;
ALTER TABLE node_handle_record ADD CONSTRAINT node_handle_record_epoch_fkey
    FOREIGN KEY (tenant_id, epoch_id) REFERENCES document_epoch (tenant_id, epoch_id) ON DELETE CASCADE;
CREATE INDEX node_handle_record_handle_idx ON node_handle_record (tenant_id, node_handle_id);
ALTER TABLE document_epoch DROP CONSTRAINT document_epoch_tenant_id_context_id_fkey;
ALTER TABLE document_epoch ADD CONSTRAINT document_epoch_context_fkey
    FOREIGN KEY (tenant_id, context_id) REFERENCES browsing_context (tenant_id, context_id) ON DELETE CASCADE;
ALTER TABLE browsing_context DROP CONSTRAINT browsing_context_tenant_id_session_id_fkey;
ALTER TABLE browsing_context ADD CONSTRAINT browsing_context_session_fkey
    FOREIGN KEY (tenant_id, session_id) REFERENCES browser_session (tenant_id, session_id) ON DELETE CASCADE;
CREATE INDEX browsing_context_session_idx ON browsing_context (session_id);
CREATE INDEX document_epoch_context_idx ON document_epoch (context_id);

-- Protocol adapters: what each is called; which ones a node serves, and at which protocol and
-- implementation version (BAP over HTTP, MCP, CDP with the node's Chromium), is per node — two
-- nodes of a rolling upgrade differ — and written by the node at start. GET /bap/v1 reads it.
ALTER TABLE protocol_adapter ADD COLUMN name text NOT NULL DEFAULT '' CHECK (char_length(name) <= 100);
ALTER TABLE protocol_adapter DROP COLUMN protocol_version;
UPDATE protocol_adapter SET name = 'BAP over HTTP' WHERE adapter_id = 'bap-http';
UPDATE protocol_adapter SET name = 'Model Context Protocol' WHERE adapter_id = 'mcp';
INSERT INTO protocol_adapter (adapter_id, name) VALUES ('cdp', 'Chrome DevTools Protocol');

CREATE TABLE node_protocol_adapter (
    node_id    text NOT NULL REFERENCES runtime_node (node_id) ON DELETE CASCADE,
    adapter_id text NOT NULL REFERENCES protocol_adapter (adapter_id),
    protocol_version text NOT NULL CHECK (char_length(protocol_version) BETWEEN 1 AND 100),
    -- What implements it on this node when that is not BAP itself: the browser's product and version.
    implementation text NOT NULL DEFAULT '' CHECK (char_length(implementation) <= 200),
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, adapter_id)
);

-- approval_request.task_id and task_reconciliation.task_id repeat what their command determines;
-- they stay (every task's approvals and reconciliations are looked up by task) but can no longer
-- disagree with it: the pair references the command's (ADR 0019).
ALTER TABLE task_command ADD CONSTRAINT task_command_tenant_command_task_key UNIQUE (tenant_id, command_id, task_id);
ALTER TABLE approval_request ADD CONSTRAINT approval_request_command_task_fkey
    FOREIGN KEY (tenant_id, command_id, task_id) REFERENCES task_command (tenant_id, command_id, task_id);
ALTER TABLE task_reconciliation ADD CONSTRAINT task_reconciliation_command_task_fkey
    FOREIGN KEY (tenant_id, command_id, task_id) REFERENCES task_command (tenant_id, command_id, task_id);
-- An artifact's command, when it names one, is a command of the artifact's task.
ALTER TABLE artifact_reference ADD CONSTRAINT artifact_reference_command_task_fkey
    FOREIGN KEY (tenant_id, command_id, task_id) REFERENCES task_command (tenant_id, command_id, task_id);

-- A finished task's result: what close_task found, checked (verification) apart from finished
-- (the task's state), with the digest of a canonical manifest of its receipts and evidence. The
-- manifest is stored as an artifact (kind result_manifest); verify_artifact re-computes it from
-- these rows, the receipts (those whose receipt.issued event has seq <= through_seq) and the
-- evidence's stored digests.
ALTER TABLE artifact_reference DROP CONSTRAINT artifact_reference_kind_check;
ALTER TABLE artifact_reference ADD CONSTRAINT artifact_reference_kind_check
    CHECK (kind IN ('screenshot', 'dom_snapshot', 'ax_snapshot', 'checkpoint', 'upload', 'result_manifest', 'other'));

CREATE TABLE task_result (
    tenant_id   text NOT NULL,
    task_id     text NOT NULL PRIMARY KEY,
    -- The close_task command that produced it.
    command_id  text NOT NULL UNIQUE,
    summary     text NOT NULL CHECK (char_length(summary) BETWEEN 1 AND 2000),
    verification_state text NOT NULL CHECK (verification_state IN ('verified', 'unverified')),
    verification_reason text NOT NULL CHECK (char_length(verification_reason) BETWEEN 1 AND 2000),
    -- The task's history the manifest covers: events 1 .. through_seq.
    through_seq bigint NOT NULL CHECK (through_seq >= 1),
    manifest_artifact_id text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, task_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES agent_task (tenant_id, task_id),
    FOREIGN KEY (tenant_id, command_id, task_id) REFERENCES task_command (tenant_id, command_id, task_id),
    FOREIGN KEY (tenant_id, manifest_artifact_id) REFERENCES artifact_reference (tenant_id, artifact_id)
);

-- The evidence a result rests on, in the manifest's order. Its digests are the artifacts'.
CREATE TABLE task_result_evidence (
    tenant_id   text NOT NULL,
    task_id     text NOT NULL,
    position    integer NOT NULL CHECK (position >= 0),
    artifact_id text NOT NULL,
    PRIMARY KEY (task_id, position),
    UNIQUE (task_id, artifact_id),
    FOREIGN KEY (tenant_id, task_id) REFERENCES task_result (tenant_id, task_id),
    FOREIGN KEY (tenant_id, artifact_id) REFERENCES artifact_reference (tenant_id, artifact_id)
);

-- A result is written once, with its task's close, and never changed.
CREATE FUNCTION task_result_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is written once: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;
CREATE TRIGGER task_result_no_update BEFORE UPDATE OR DELETE ON task_result
    FOR EACH ROW EXECUTE FUNCTION task_result_immutable();
CREATE TRIGGER task_result_evidence_no_update BEFORE UPDATE OR DELETE ON task_result_evidence
    FOR EACH ROW EXECUTE FUNCTION task_result_immutable();
