package store_test

import (
	"context"
	"testing"

	"github.com/originweave/bap/server/internal/pgtest"
)

// Approval decisions, reconciliation resolutions and task outcomes are never updated in place:
// the database refuses it, as it does for the history, and a correction is a new row that
// supersedes the current one of the same approval, reconciliation or task (migration 0013).
func TestCorrectionsSupersedeAndNeverUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	seedTask(t, ctx, db, "tsk_s")
	seedTask(t, ctx, db, "tsk_o")
	for _, q := range []string{
		// Two commands, an approval decided, and a reconciliation resolved, on tsk_s.
		`INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES
			('local', 'cmd_a', 'tsk_s', 'act', 'agent:local', true), ('local', 'cmd_r', 'tsk_s', 'resolve_approval', 'operator:local', false),
			('local', 'cmd_b', 'tsk_s', 'act', 'agent:local', true), ('local', 'cmd_c', 'tsk_o', 'act', 'agent:local', true)`,
		`INSERT INTO approval_request (tenant_id, approval_id, task_id, command_id, state, reason, requested_by, expires_at)
			VALUES ('local', 'apr_s', 'tsk_s', 'cmd_a', 'pending', 'r', 'agent:local', now() + interval '1 minute'),
			       ('local', 'apr_p', 'tsk_s', 'cmd_b', 'pending', 'r', 'agent:local', now() + interval '1 minute')`,
		`UPDATE approval_request SET state = 'approved', closed_at = now() WHERE approval_id = 'apr_s'`,
		`INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, decided_client, command_id) VALUES ('local', 'apr_s', 'approve', 'operator:local', 'local:socket', 'cmd_r')`,
		`INSERT INTO task_reconciliation (tenant_id, reconciliation_id, task_id, command_id) VALUES ('local', 'rec_s', 'tsk_s', 'cmd_b'), ('local', 'rec_o', 'tsk_o', 'cmd_c')`,
		`INSERT INTO reconciliation_resolution (tenant_id, reconciliation_id, resolution, note, resolved_by) VALUES ('local', 'rec_s', 'no_side_effect', 'n', 'operator:local'),
			('local', 'rec_o', 'applied', 'n', 'operator:local')`,
		// tsk_o ends: its outcome is recorded by the database at commit, with its last state change's actor.
		eventSQL("local", "tsk_o", 3, "task.state_changed", "agent:local", "close_task"),
		`UPDATE agent_task SET state = 'succeeded', verification = 'verified', ended_at = now() WHERE task_id = 'tsk_o'`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("seeding: %v\n%s", err, q)
		}
	}
	var state, verification, by, cause string
	if err := db.QueryRow(ctx, `SELECT state, verification, recorded_by, reason FROM task_outcome_current WHERE task_id = 'tsk_o'`).
		Scan(&state, &verification, &by, &cause); err != nil || state != "succeeded" || verification != "verified" || by != "agent:local" || cause != "close_task" {
		t.Fatalf("the outcome of an ended task: %s/%s by %s (%s), %v", state, verification, by, cause, err)
	}
	tests := []struct {
		name, sql, code string
	}{
		{"update a decision", `UPDATE approval_decision SET decision = 'deny' WHERE approval_id = 'apr_s'`, "23001"},
		{"delete a decision", `DELETE FROM approval_decision WHERE approval_id = 'apr_s'`, "23001"},
		{"truncate decisions", `TRUNCATE approval_decision`, "23001"},
		{"a second first decision", `INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, decided_client, command_id) VALUES ('local', 'apr_s', 'approve', 'x', 'local:socket', 'cmd_r')`, "23505"},
		// Who decided is a person and a workload (0021): a new decision that names no workload is refused.
		{"a decision without its workload", `INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, command_id) VALUES ('local', 'apr_p', 'approve', 'operator:local', 'cmd_r')`, "23514"},
		{"a correction without its workload", `INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, reason, supersedes)
			SELECT 'local', 'apr_s', 'approve', 'operator:local', 'why', decision_id FROM approval_decision WHERE approval_id = 'apr_s'`, "23514"},
		{"a correction that changes what was decided", `INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, decided_client, reason, supersedes)
			SELECT 'local', 'apr_s', 'deny', 'operator:local', 'admin:cli', 'oops', decision_id FROM approval_decision WHERE approval_id = 'apr_s'`, "23514"},
		{"a correction of another approval's decision", `INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, decided_client, reason, supersedes)
			SELECT 'local', 'apr_p', 'approve', 'operator:local', 'admin:cli', 'oops', decision_id FROM approval_decision WHERE approval_id = 'apr_s'`, "23514"},
		{"reopen a closed approval", `UPDATE approval_request SET state = 'pending', closed_at = NULL WHERE approval_id = 'apr_s'`, "23001"},
		{"re-word a pending approval", `UPDATE approval_request SET reason = 'other' WHERE approval_id = 'apr_p'`, "23001"},
		{"update a resolution", `UPDATE reconciliation_resolution SET resolution = 'applied' WHERE reconciliation_id = 'rec_s'`, "23001"},
		{"delete a resolution", `DELETE FROM reconciliation_resolution WHERE reconciliation_id = 'rec_s'`, "23001"},
		{"update a reconciliation", `UPDATE task_reconciliation SET command_id = 'cmd_a' WHERE reconciliation_id = 'rec_s'`, "23001"},
		{"a second first resolution", `INSERT INTO reconciliation_resolution (tenant_id, reconciliation_id, resolution, resolved_by) VALUES ('local', 'rec_s', 'applied', 'x')`, "23505"},
		{"a correction of another reconciliation's resolution", `INSERT INTO reconciliation_resolution (tenant_id, reconciliation_id, resolution, resolved_by, supersedes)
			SELECT 'local', 'rec_s', 'applied', 'x', resolution_id FROM reconciliation_resolution WHERE reconciliation_id = 'rec_o'`, "23514"},
		{"update an outcome", `UPDATE task_outcome SET state = 'failed' WHERE task_id = 'tsk_o'`, "23001"},
		{"delete an outcome", `DELETE FROM task_outcome WHERE task_id = 'tsk_o'`, "23001"},
		{"an ended task's state changed in place", `UPDATE agent_task SET state = 'failed' WHERE task_id = 'tsk_o'`, "23514"},
		{"an ended task's verification changed in place", `UPDATE agent_task SET verification = 'unmet' WHERE task_id = 'tsk_o'`, "23514"},
		{"a correction that claims verified", `INSERT INTO task_outcome (tenant_id, task_id, state, verification, reason, recorded_by, supersedes)
			SELECT 'local', 'tsk_o', 'succeeded', 'verified', 'trust me', 'operator:local', outcome_id FROM task_outcome WHERE task_id = 'tsk_o'`, "23514"},
		{"a correction without a reason", `INSERT INTO task_outcome (tenant_id, task_id, state, verification, recorded_by, supersedes)
			SELECT 'local', 'tsk_o', 'failed', 'unmet', 'operator:local', outcome_id FROM task_outcome WHERE task_id = 'tsk_o'`, "23514"},
		{"a correction to a live state", `INSERT INTO task_outcome (tenant_id, task_id, state, reason, recorded_by, supersedes)
			SELECT 'local', 'tsk_o', 'running', 'r', 'operator:local', outcome_id FROM task_outcome WHERE task_id = 'tsk_o'`, "23514"},
	}
	for _, tt := range tests {
		_, err := db.Exec(ctx, tt.sql)
		if got := pgCode(err); got != tt.code {
			t.Errorf("%s: got %v (code %q), want code %s", tt.name, err, got, tt.code)
		}
	}

	// Corrections: new rows, each superseding the current one; the views show the last.
	for _, q := range []string{
		`INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, decided_client, channel, reason, supersedes)
			SELECT 'local', 'apr_s', 'approve', 'operator:local', 'admin:cli', 'socket', 'approved on the phone first', decision_id FROM approval_decision_current WHERE approval_id = 'apr_s'`,
		`INSERT INTO reconciliation_resolution (tenant_id, reconciliation_id, resolution, note, resolved_by, supersedes)
			SELECT 'local', 'rec_s', 'applied', 'the shop has the order after all', 'operator:local', resolution_id FROM reconciliation_resolution WHERE reconciliation_id = 'rec_s'`,
		`BEGIN; INSERT INTO task_outcome (tenant_id, task_id, state, verification, reason, recorded_by, supersedes)
			SELECT 'local', 'tsk_o', 'failed', 'unmet', 'the order was for the wrong item', 'operator:local', outcome_id FROM task_outcome_current WHERE task_id = 'tsk_o';
			UPDATE agent_task SET state = 'failed', verification = 'unmet' WHERE task_id = 'tsk_o'; COMMIT`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("correcting: %v\n%s", err, q)
		}
	}
	var n int
	var reason, resolution, note string
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM approval_decision WHERE approval_id = 'apr_s'), reason FROM approval_decision_current WHERE approval_id = 'apr_s'`).
		Scan(&n, &reason); err != nil || n != 2 || reason != "approved on the phone first" {
		t.Errorf("decision chain: %d rows, current reason %q, %v", n, reason, err)
	}
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM reconciliation_resolution WHERE reconciliation_id = 'rec_s'), state, resolution, note
		FROM task_reconciliation_current WHERE reconciliation_id = 'rec_s'`).Scan(&n, &state, &resolution, &note); err != nil ||
		n != 2 || state != "resolved" || resolution != "applied" || note != "the shop has the order after all" {
		t.Errorf("resolution chain: %d rows, current %s/%s %q, %v", n, state, resolution, note, err)
	}
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM task_outcome WHERE task_id = 'tsk_o'), o.state, o.verification, t.state
		FROM task_outcome_current o JOIN agent_task t USING (task_id) WHERE o.task_id = 'tsk_o'`).Scan(&n, &state, &verification, &cause); err != nil ||
		n != 2 || state != "failed" || verification != "unmet" || cause != "failed" {
		t.Errorf("outcome chain: %d rows, current %s/%s, task %s, %v", n, state, verification, cause, err)
	}
	// A chain is linear: the superseded row cannot be superseded again.
	if _, err := db.Exec(ctx, `INSERT INTO reconciliation_resolution (tenant_id, reconciliation_id, resolution, resolved_by, supersedes)
		SELECT 'local', 'rec_s', 'no_side_effect', 'x', min(resolution_id) FROM reconciliation_resolution WHERE reconciliation_id = 'rec_s'`); pgCode(err) != "23505" {
		t.Errorf("a fork of the chain: %v, want 23505", err)
	}
}
