-- 0028 the same CHECK rules, written so that PostgreSQL's regular expression engine does not
-- expand a bounded repetition (issue #25, docs/benchmarks.md "Group commit"). A pattern such as
-- '^[!-~]{1,255}$' is compiled into a copy of its class per repetition, and matching one
-- idempotency key against it cost about 36 µs (an id against '^cmd_[A-Za-z0-9_-]{1,64}$' about
-- 11 µs, a digest against '^[0-9a-f]{64}$' about 7 µs), against 0.4-0.6 µs for the same rule as a
-- length bound and an unbounded pattern. A create_task checks twelve of them: once its statements
-- merged in group commits (ADR 0039), they were a fifth of PostgreSQL's CPU per create_task.
--
-- Each rule accepts exactly what it accepted before (the classes are ASCII, so characters are
-- bytes; store.TestRewrittenChecksAcceptWhatTheirPatternsAccepted compares the two on edge
-- cases), and keeps its name, so errors name the same constraint. Each table is read once to
-- validate its new constraints, which cannot fail since the rules are equivalent.

-- tenant_account: tenant_account_tenant_id_check was ^[a-z0-9][a-z0-9_-]{0,62}$
ALTER TABLE tenant_account
    DROP CONSTRAINT tenant_account_tenant_id_check,
    ADD CONSTRAINT tenant_account_tenant_id_check CHECK (char_length(tenant_id) <= 63 AND tenant_id ~ '^[a-z0-9][a-z0-9_-]*$');

-- agent_task: agent_task_task_id_check was ^tsk_[A-Za-z0-9_-]{1,64}$
ALTER TABLE agent_task
    DROP CONSTRAINT agent_task_task_id_check,
    ADD CONSTRAINT agent_task_task_id_check CHECK (char_length(task_id) BETWEEN 5 AND 68 AND task_id ~ '^tsk_[A-Za-z0-9_-]+$');

-- agent_task_event: agent_task_event_event_id_check was ^evt_[A-Za-z0-9_-]{1,64}$
ALTER TABLE agent_task_event
    DROP CONSTRAINT agent_task_event_event_id_check,
    ADD CONSTRAINT agent_task_event_event_id_check CHECK (char_length(event_id) BETWEEN 5 AND 68 AND event_id ~ '^evt_[A-Za-z0-9_-]+$');

-- task_command: task_command_command_id_check was ^cmd_[A-Za-z0-9_-]{1,64}$
ALTER TABLE task_command
    DROP CONSTRAINT task_command_command_id_check,
    ADD CONSTRAINT task_command_command_id_check CHECK (char_length(command_id) BETWEEN 5 AND 68 AND command_id ~ '^cmd_[A-Za-z0-9_-]+$');

-- task_receipt: task_receipt_receipt_id_check was ^rcp_[A-Za-z0-9_-]{1,64}$
ALTER TABLE task_receipt
    DROP CONSTRAINT task_receipt_receipt_id_check,
    ADD CONSTRAINT task_receipt_receipt_id_check CHECK (char_length(receipt_id) BETWEEN 5 AND 68 AND receipt_id ~ '^rcp_[A-Za-z0-9_-]+$');

-- idempotency_record: idempotency_record_command_id_check was ^cmd_[A-Za-z0-9_-]{1,64}$; idempotency_record_idempotency_key_check was ^[!-~]{1,255}$
ALTER TABLE idempotency_record
    DROP CONSTRAINT idempotency_record_command_id_check,
    ADD CONSTRAINT idempotency_record_command_id_check CHECK (char_length(command_id) BETWEEN 5 AND 68 AND command_id ~ '^cmd_[A-Za-z0-9_-]+$'),
    DROP CONSTRAINT idempotency_record_idempotency_key_check,
    ADD CONSTRAINT idempotency_record_idempotency_key_check CHECK (char_length(idempotency_key) BETWEEN 1 AND 255 AND idempotency_key ~ '^[!-~]+$');

-- task_reconciliation: task_reconciliation_reconciliation_id_check was ^rec_[A-Za-z0-9_-]{1,64}$
ALTER TABLE task_reconciliation
    DROP CONSTRAINT task_reconciliation_reconciliation_id_check,
    ADD CONSTRAINT task_reconciliation_reconciliation_id_check CHECK (char_length(reconciliation_id) BETWEEN 5 AND 68 AND reconciliation_id ~ '^rec_[A-Za-z0-9_-]+$');

-- approval_request: approval_request_approval_id_check was ^apr_[A-Za-z0-9_-]{1,64}$; approval_request_held_method_check was ^[A-Za-z][A-Za-z0-9_-]{0,31}$
ALTER TABLE approval_request
    DROP CONSTRAINT approval_request_approval_id_check,
    ADD CONSTRAINT approval_request_approval_id_check CHECK (char_length(approval_id) BETWEEN 5 AND 68 AND approval_id ~ '^apr_[A-Za-z0-9_-]+$'),
    DROP CONSTRAINT approval_request_held_method_check,
    ADD CONSTRAINT approval_request_held_method_check CHECK (held_method IS NULL OR (char_length(held_method) <= 32 AND held_method ~ '^[A-Za-z][A-Za-z0-9_-]*$'));

-- browser_session: browser_session_session_id_check was ^bs_[A-Za-z0-9_-]{1,64}$
ALTER TABLE browser_session
    DROP CONSTRAINT browser_session_session_id_check,
    ADD CONSTRAINT browser_session_session_id_check CHECK (char_length(session_id) BETWEEN 4 AND 67 AND session_id ~ '^bs_[A-Za-z0-9_-]+$');

-- browsing_context: browsing_context_context_id_check was ^ctx_[A-Za-z0-9_-]{1,64}$
ALTER TABLE browsing_context
    DROP CONSTRAINT browsing_context_context_id_check,
    ADD CONSTRAINT browsing_context_context_id_check CHECK (char_length(context_id) BETWEEN 5 AND 68 AND context_id ~ '^ctx_[A-Za-z0-9_-]+$');

-- document_epoch: document_epoch_epoch_id_check was ^ep_[A-Za-z0-9_-]{1,64}$
ALTER TABLE document_epoch
    DROP CONSTRAINT document_epoch_epoch_id_check,
    ADD CONSTRAINT document_epoch_epoch_id_check CHECK (char_length(epoch_id) BETWEEN 4 AND 67 AND epoch_id ~ '^ep_[A-Za-z0-9_-]+$');

-- node_handle_record: node_handle_record_node_handle_id_check was ^nd_[A-Za-z0-9_-]{1,64}$
ALTER TABLE node_handle_record
    DROP CONSTRAINT node_handle_record_node_handle_id_check,
    ADD CONSTRAINT node_handle_record_node_handle_id_check CHECK (char_length(node_handle_id) BETWEEN 4 AND 67 AND node_handle_id ~ '^nd_[A-Za-z0-9_-]+$');

-- artifact_content: artifact_content_sha256_check was ^[0-9a-f]{64}$
ALTER TABLE artifact_content
    DROP CONSTRAINT artifact_content_sha256_check,
    ADD CONSTRAINT artifact_content_sha256_check CHECK (char_length(sha256) = 64 AND sha256 ~ '^[0-9a-f]+$');

-- artifact_reference: artifact_reference_artifact_id_check was ^art_[A-Za-z0-9_-]{1,64}$
ALTER TABLE artifact_reference
    DROP CONSTRAINT artifact_reference_artifact_id_check,
    ADD CONSTRAINT artifact_reference_artifact_id_check CHECK (char_length(artifact_id) BETWEEN 5 AND 68 AND artifact_id ~ '^art_[A-Za-z0-9_-]+$');

-- task_checkpoint: task_checkpoint_checkpoint_id_check was ^chk_[A-Za-z0-9_-]{1,64}$; task_checkpoint_epoch_id_check was ^ep_[A-Za-z0-9_-]{1,64}$; task_checkpoint_policy_digest_check was ^[0-9a-f]{64}$
ALTER TABLE task_checkpoint
    DROP CONSTRAINT task_checkpoint_checkpoint_id_check,
    ADD CONSTRAINT task_checkpoint_checkpoint_id_check CHECK (char_length(checkpoint_id) BETWEEN 5 AND 68 AND checkpoint_id ~ '^chk_[A-Za-z0-9_-]+$'),
    DROP CONSTRAINT task_checkpoint_epoch_id_check,
    ADD CONSTRAINT task_checkpoint_epoch_id_check CHECK (char_length(epoch_id) BETWEEN 4 AND 67 AND epoch_id ~ '^ep_[A-Za-z0-9_-]+$'),
    DROP CONSTRAINT task_checkpoint_policy_digest_check,
    ADD CONSTRAINT task_checkpoint_policy_digest_check CHECK (char_length(policy_digest) = 64 AND policy_digest ~ '^[0-9a-f]+$');

-- oauth_client: oauth_client_client_id_check was ^cli_[A-Za-z0-9_-]{1,64}$
ALTER TABLE oauth_client
    DROP CONSTRAINT oauth_client_client_id_check,
    ADD CONSTRAINT oauth_client_client_id_check CHECK (char_length(client_id) BETWEEN 5 AND 68 AND client_id ~ '^cli_[A-Za-z0-9_-]+$');

-- person_account: person_account_person_id_check was ^usr_[A-Za-z0-9_-]{1,64}$
ALTER TABLE person_account
    DROP CONSTRAINT person_account_person_id_check,
    ADD CONSTRAINT person_account_person_id_check CHECK (char_length(person_id) BETWEEN 5 AND 68 AND person_id ~ '^usr_[A-Za-z0-9_-]+$');

-- token_signing_key: token_signing_key_key_id_check was ^[A-Za-z0-9_-]{8,64}$
ALTER TABLE token_signing_key
    DROP CONSTRAINT token_signing_key_key_id_check,
    ADD CONSTRAINT token_signing_key_key_id_check CHECK (char_length(key_id) BETWEEN 8 AND 64 AND key_id ~ '^[A-Za-z0-9_-]+$');

-- auth_decision: auth_decision_approval_id_check was ^apr_[A-Za-z0-9_-]{1,64}$; auth_decision_command_id_check was ^cmd_[A-Za-z0-9_-]{1,64}$; auth_decision_operation_check was ^[a-z0-9_.:-]{1,100}$; auth_decision_session_id_check was ^bs_[A-Za-z0-9_-]{1,64}$; auth_decision_via_check was ^[a-z_]{1,32}$
ALTER TABLE auth_decision
    DROP CONSTRAINT auth_decision_approval_id_check,
    ADD CONSTRAINT auth_decision_approval_id_check CHECK (approval_id IS NULL OR (char_length(approval_id) BETWEEN 5 AND 68 AND approval_id ~ '^apr_[A-Za-z0-9_-]+$')),
    DROP CONSTRAINT auth_decision_command_id_check,
    ADD CONSTRAINT auth_decision_command_id_check CHECK (command_id IS NULL OR (char_length(command_id) BETWEEN 5 AND 68 AND command_id ~ '^cmd_[A-Za-z0-9_-]+$')),
    DROP CONSTRAINT auth_decision_operation_check,
    ADD CONSTRAINT auth_decision_operation_check CHECK (char_length(operation) BETWEEN 1 AND 100 AND operation ~ '^[a-z0-9_.:-]+$'),
    DROP CONSTRAINT auth_decision_session_id_check,
    ADD CONSTRAINT auth_decision_session_id_check CHECK (session_id IS NULL OR (char_length(session_id) BETWEEN 4 AND 67 AND session_id ~ '^bs_[A-Za-z0-9_-]+$')),
    DROP CONSTRAINT auth_decision_via_check,
    ADD CONSTRAINT auth_decision_via_check CHECK (via IS NULL OR (char_length(via) BETWEEN 1 AND 32 AND via ~ '^[a-z_]+$'));

-- plan_step_progress: plan_step_progress_command_key_check was ^[!-~]{1,255}$; plan_step_progress_receipt_id_check was ^rcp_[A-Za-z0-9_-]{1,64}$
ALTER TABLE plan_step_progress
    DROP CONSTRAINT plan_step_progress_command_key_check,
    ADD CONSTRAINT plan_step_progress_command_key_check CHECK (char_length(command_key) BETWEEN 1 AND 255 AND command_key ~ '^[!-~]+$'),
    DROP CONSTRAINT plan_step_progress_receipt_id_check,
    ADD CONSTRAINT plan_step_progress_receipt_id_check CHECK (char_length(receipt_id) BETWEEN 5 AND 68 AND receipt_id ~ '^rcp_[A-Za-z0-9_-]+$');

-- server_key: server_key_key_id_check was ^sk_[0-9a-f]{16}$
ALTER TABLE server_key
    DROP CONSTRAINT server_key_key_id_check,
    ADD CONSTRAINT server_key_key_id_check CHECK (char_length(key_id) = 19 AND key_id ~ '^sk_[0-9a-f]+$');

-- server_key_wrap: server_key_wrap_key_id_check was ^sk_[0-9a-f]{16}$; server_key_wrap_master_key_id_check was ^mk_[0-9a-f]{16}$
ALTER TABLE server_key_wrap
    DROP CONSTRAINT server_key_wrap_key_id_check,
    ADD CONSTRAINT server_key_wrap_key_id_check CHECK (char_length(key_id) = 19 AND key_id ~ '^sk_[0-9a-f]+$'),
    DROP CONSTRAINT server_key_wrap_master_key_id_check,
    ADD CONSTRAINT server_key_wrap_master_key_id_check CHECK (char_length(master_key_id) = 19 AND master_key_id ~ '^mk_[0-9a-f]+$');

-- tenant_secret: tenant_secret_name_check was ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$; tenant_secret_secret_id_check was ^sec_[A-Za-z0-9_-]{1,64}$
ALTER TABLE tenant_secret
    DROP CONSTRAINT tenant_secret_name_check,
    ADD CONSTRAINT tenant_secret_name_check CHECK (char_length(name) <= 128 AND name ~ '^[A-Za-z0-9][A-Za-z0-9._-]*$'),
    DROP CONSTRAINT tenant_secret_secret_id_check,
    ADD CONSTRAINT tenant_secret_secret_id_check CHECK (char_length(secret_id) BETWEEN 5 AND 68 AND secret_id ~ '^sec_[A-Za-z0-9_-]+$');

-- task_handoff: task_handoff_handoff_id_check was ^ho_[A-Za-z0-9_-]{1,64}$
ALTER TABLE task_handoff
    DROP CONSTRAINT task_handoff_handoff_id_check,
    ADD CONSTRAINT task_handoff_handoff_id_check CHECK (char_length(handoff_id) BETWEEN 4 AND 67 AND handoff_id ~ '^ho_[A-Za-z0-9_-]+$');

-- inbox_event: inbox_event_delivery_id_check was ^[!-~]{1,255}$; inbox_event_source_check was ^(orchestrator|node:[!-~]{1,200})$
ALTER TABLE inbox_event
    DROP CONSTRAINT inbox_event_delivery_id_check,
    ADD CONSTRAINT inbox_event_delivery_id_check CHECK (char_length(delivery_id) BETWEEN 1 AND 255 AND delivery_id ~ '^[!-~]+$'),
    DROP CONSTRAINT inbox_event_source_check,
    ADD CONSTRAINT inbox_event_source_check CHECK (source = 'orchestrator' OR (char_length(source) BETWEEN 6 AND 205 AND source ~ '^node:[!-~]+$'));

-- audit_signing_key: audit_signing_key_key_id_check was ^ak_[0-9a-f]{16}$
ALTER TABLE audit_signing_key
    DROP CONSTRAINT audit_signing_key_key_id_check,
    ADD CONSTRAINT audit_signing_key_key_id_check CHECK (char_length(key_id) = 19 AND key_id ~ '^ak_[0-9a-f]+$');
