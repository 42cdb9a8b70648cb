package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// eventSQL inserts one history event of tenant's task linked, as the database checks, to the
// task's last event: its prev_digest is that event's digest (zeros for the first). The digest is
// a stand-in (SHA-256 of the event id): only the server key makes a real one, which the database
// cannot check.
func eventSQL(tenant, task string, seq int, typ, actor, cause string) string {
	return fmt.Sprintf(`INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor, cause, prev_digest, digest)
		VALUES ('%[1]s', '%[2]s', %[3]d, 'evt_%[2]s%[3]d', '%[4]s', '%[5]s', '%[6]s',
		coalesce((SELECT digest FROM agent_task_event WHERE task_id = '%[2]s' ORDER BY seq DESC LIMIT 1), decode(repeat('00', 32), 'hex')),
		sha256('evt_%[2]s%[3]d'::bytea))`, tenant, task, seq, typ, actor, cause)
}

// seedTask inserts one task with two events through SQL, the way the store does.
func seedTask(t *testing.T, ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, id string) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO agent_task (tenant_id, task_id, goal, state, created_by) VALUES ('local', '` + id + `', 'g', 'created', 'operator:local')`,
		eventSQL("local", id, 1, "task.created", "operator:local", ""),
		eventSQL("local", id, 2, "task.state_changed", "operator:local", ""),
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("seeding: %v", err)
		}
	}
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// The history is append-only in the database itself, not only in our code.
func TestTaskEventHistoryIsAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	seedTask(t, ctx, db, "tsk_a")
	tests := []struct {
		name, sql, code string
	}{
		{"update", `UPDATE agent_task_event SET event_type = 'task.forged' WHERE task_id = 'tsk_a'`, "23001"},
		{"delete", `DELETE FROM agent_task_event WHERE task_id = 'tsk_a'`, "23001"},
		{"truncate", `TRUNCATE agent_task_event CASCADE`, "23001"},
		{"gap in seq", `INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor) VALUES ('local', 'tsk_a', 4, 'evt_x4', 'task.created', 'x')`, "23514"},
		{"repeated seq", `INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor) VALUES ('local', 'tsk_a', 2, 'evt_x2', 'task.created', 'x')`, "23505"},
		{"unchained", `INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor) VALUES ('local', 'tsk_a', 3, 'evt_x3', 'task.created', 'x')`, "23514"},
		{"not linked to the event before", `INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor, prev_digest, digest)
			VALUES ('local', 'tsk_a', 3, 'evt_x3', 'task.created', 'x', decode(repeat('00', 32), 'hex'), decode(repeat('01', 32), 'hex'))`, "23514"},
		{"short digest", `INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor, prev_digest, digest)
			VALUES ('local', 'tsk_a', 3, 'evt_x3', 'task.created', 'x', (SELECT digest FROM agent_task_event WHERE task_id = 'tsk_a' AND seq = 2), '\x01')`, "23514"},
		{"seq zero", `INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor) VALUES ('local', 'tsk_a', 0, 'evt_x0', 'task.created', 'x')`, "23514"},
		// Several events in one statement (a command's, or a group commit's): each is checked
		// against its predecessor, in the statement or before it (migration 0030).
		{"a gap inside one statement", `INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor, prev_digest, digest)
			VALUES ('local', 'tsk_a', 3, 'evt_x3', 'task.created', 'x', (SELECT digest FROM agent_task_event WHERE task_id = 'tsk_a' AND seq = 2), sha256('3'::bytea)),
			       ('local', 'tsk_a', 5, 'evt_x5', 'task.created', 'x', sha256('3'::bytea), sha256('5'::bytea))`, "23514"},
		{"a broken link inside one statement", `INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor, prev_digest, digest)
			VALUES ('local', 'tsk_a', 3, 'evt_x3', 'task.created', 'x', (SELECT digest FROM agent_task_event WHERE task_id = 'tsk_a' AND seq = 2), sha256('3'::bytea)),
			       ('local', 'tsk_a', 4, 'evt_x4', 'task.created', 'x', sha256('other'::bytea), sha256('4'::bytea))`, "23514"},
		{"a task's first event not linked to zeros", `INSERT INTO agent_task (tenant_id, task_id, goal, state, created_by) VALUES ('local', 'tsk_z', 'g', 'created', 'x');
			INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor, prev_digest, digest)
			VALUES ('local', 'tsk_z', 1, 'evt_z1', 'task.created', 'x', sha256('z'::bytea), sha256('1'::bytea))`, "23514"},
	}
	for _, tt := range tests {
		_, err := db.Exec(ctx, tt.sql)
		if got := pgCode(err); got != tt.code {
			t.Errorf("%s: got error %v (code %q), want code %s", tt.name, err, got, tt.code)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM agent_task_event WHERE task_id = 'tsk_a'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("history changed: %d events, %v", n, err)
	}
	if _, err := db.Exec(ctx, eventSQL("local", "tsk_a", 3, "task.state_changed", "x", "")); err != nil {
		t.Fatalf("the next seq must be accepted: %v", err)
	}
	// Two tasks' next events, linked within one statement, are accepted together.
	if _, err := db.Exec(ctx, `INSERT INTO agent_task (tenant_id, task_id, goal, state, created_by) VALUES ('local', 'tsk_y', 'g', 'created', 'x');
		INSERT INTO agent_task_event (tenant_id, task_id, seq, event_id, event_type, actor, prev_digest, digest)
		VALUES ('local', 'tsk_a', 4, 'evt_a4', 'task.created', 'x', (SELECT digest FROM agent_task_event WHERE task_id = 'tsk_a' AND seq = 3), sha256('a4'::bytea)),
		       ('local', 'tsk_y', 1, 'evt_y1', 'task.created', 'x', decode(repeat('00', 32), 'hex'), sha256('y1'::bytea)),
		       ('local', 'tsk_a', 5, 'evt_a5', 'task.created', 'x', sha256('a4'::bytea), sha256('a5'::bytea)),
		       ('local', 'tsk_y', 2, 'evt_y2', 'task.created', 'x', sha256('y1'::bytea), sha256('y2'::bytea))`); err != nil {
		t.Fatalf("linked events of two tasks in one statement must be accepted: %v", err)
	}
}

// The rules of the lifecycle tables are enforced by PostgreSQL (CHECK, FK, UNIQUE).
func TestSchemaConstraints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	seedTask(t, ctx, db, "tsk_b")
	if _, err := db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('other')`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, sql, code string
	}{
		{"unknown state", `UPDATE agent_task SET state = 'paused' WHERE task_id = 'tsk_b'`, "23514"},
		{"terminal without end time", `UPDATE agent_task SET state = 'succeeded' WHERE task_id = 'tsk_b'`, "23514"},
		{"bad task id", `INSERT INTO agent_task (tenant_id, task_id, goal, state, created_by) VALUES ('local', 'task-1', 'g', 'created', 'x')`, "23514"},
		{"empty goal", `INSERT INTO agent_task (tenant_id, task_id, goal, state, created_by) VALUES ('local', 'tsk_c', '', 'created', 'x')`, "23514"},
		{"unknown tenant", `INSERT INTO agent_task (tenant_id, task_id, goal, state, created_by) VALUES ('nobody', 'tsk_d', 'g', 'created', 'x')`, "23503"},
		{"event of another tenant's task", eventSQL("other", "tsk_b", 3, "task.created", "x", ""), "23503"},
		{"unknown receipt outcome", `INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES ('local', 'cmd_1', 'tsk_b', 'cancel_task', 'x', false);
			INSERT INTO task_receipt (tenant_id, receipt_id, command_id, outcome) VALUES ('local', 'rcp_1', 'cmd_1', 'maybe')`, "23514"},
		{"rejected receipt without code", `INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES ('local', 'cmd_2', 'tsk_b', 'cancel_task', 'x', false);
			INSERT INTO task_receipt (tenant_id, receipt_id, command_id, outcome) VALUES ('local', 'rcp_2', 'cmd_2', 'rejected')`, "23514"},
		{"idempotency key with a space", `INSERT INTO idempotency_record (tenant_id, idempotency_key, operation, request_hash, state, command_id, expires_at)
			VALUES ('local', 'a b', 'create_task', decode(repeat('00', 32), 'hex'), 'in_flight', 'cmd_3', now())`, "23514"},
		{"completed key without response", `INSERT INTO idempotency_record (tenant_id, idempotency_key, operation, request_hash, state, command_id, expires_at)
			VALUES ('local', 'k', 'create_task', decode(repeat('00', 32), 'hex'), 'completed', 'cmd_4', now())`, "23514"},
		{"approval in unknown state", `INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES ('local', 'cmd_5', 'tsk_b', 'request_approval', 'x', false);
			INSERT INTO approval_request (tenant_id, approval_id, task_id, command_id, state, reason, requested_by, expires_at) VALUES ('local', 'apr_1', 'tsk_b', 'cmd_5', 'maybe', 'r', 'x', now() + interval '1 minute')`, "23514"},
		{"approval without expiry", `INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES ('local', 'cmd_6', 'tsk_b', 'request_approval', 'x', false);
			INSERT INTO approval_request (tenant_id, approval_id, task_id, command_id, state, reason, requested_by) VALUES ('local', 'apr_2', 'tsk_b', 'cmd_6', 'pending', 'r', 'x')`, "23502"},
		{"approval expiring before it was requested", `INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES ('local', 'cmd_7', 'tsk_b', 'request_approval', 'x', false);
			INSERT INTO approval_request (tenant_id, approval_id, task_id, command_id, state, reason, requested_by, requested_at, expires_at) VALUES ('local', 'apr_3', 'tsk_b', 'cmd_7', 'pending', 'r', 'x', now(), now() - interval '1 second')`, "23514"},
		{"approval living past 24 hours", `INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES ('local', 'cmd_8', 'tsk_b', 'request_approval', 'x', false);
			INSERT INTO approval_request (tenant_id, approval_id, task_id, command_id, state, reason, requested_by, requested_at, expires_at) VALUES ('local', 'apr_4', 'tsk_b', 'cmd_8', 'pending', 'r', 'x', now(), now() + interval '25 hours')`, "23514"},
		{"approval of an unknown channel", `INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES ('local', 'cmd_10', 'tsk_b', 'request_approval', 'x', false);
			INSERT INTO approval_request (tenant_id, approval_id, task_id, command_id, state, reason, requested_by, expires_at, channel) VALUES ('local', 'apr_5', 'tsk_b', 'cmd_10', 'pending', 'r', 'x', now() + interval '1 minute', 'anyone')`, "23514"},
		{"decision through an unknown channel", `INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES ('local', 'cmd_11', 'tsk_b', 'request_approval', 'x', false);
			INSERT INTO approval_request (tenant_id, approval_id, task_id, command_id, state, reason, requested_by, expires_at, closed_at) VALUES ('local', 'apr_6', 'tsk_b', 'cmd_11', 'approved', 'r', 'x', now() + interval '1 minute', now());
			INSERT INTO approval_decision (tenant_id, approval_id, decision, decided_by, decided_client, command_id, channel) VALUES ('local', 'apr_6', 'approve', 'y', 'local:socket', 'cmd_11', 'header')`, "23514"},
		{"rule ttl over 24 hours", `INSERT INTO task_approval_rule (tenant_id, task_id, rule_index, effect, ttl_seconds) VALUES ('local', 'tsk_b', 0, 'any_action', 86401)`, "23514"},
	}
	for _, tt := range tests {
		_, err := db.Exec(ctx, tt.sql)
		if got := pgCode(err); got != tt.code {
			t.Errorf("%s: got %v (code %q), want code %s", tt.name, err, got, tt.code)
		}
	}
	// The same key in two tenants is two records.
	for _, tenant := range []string{"local", "other"} {
		if _, err := db.Exec(ctx, `INSERT INTO idempotency_record (tenant_id, idempotency_key, operation, request_hash, state, command_id, expires_at)
			VALUES ($1, 'shared', 'create_task', decode(repeat('00', 32), 'hex'), 'in_flight', 'cmd_9', now())`, tenant); err != nil {
			t.Fatalf("key in tenant %s: %v", tenant, err)
		}
	}
}

// Migrating twice is a no-op, and every table named in CONTRACT exists with a two-word name.
func TestMigrateIsIdempotentAndCreatesContractTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	applied, err := store.Migrate(ctx, db)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second migration applied %v, %v", applied, err)
	}
	v, err := store.AppliedVersion(ctx, db)
	if err != nil || v != store.SchemaVersion() {
		t.Fatalf("applied version %d (%v), want %d", v, err, store.SchemaVersion())
	}
	for _, name := range []string{"agent_task", "agent_task_event", "task_checkpoint", "task_command", "task_receipt",
		"task_reconciliation", "browser_session", "browsing_context", "document_epoch", "node_handle_record",
		"approval_request", "approval_decision", "artifact_reference", "protocol_adapter", "protocol_session_binding",
		"idempotency_record", "outbox_event", "inbox_event", "dead_letter_record"} {
		var exists bool
		if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil || !exists {
			t.Errorf("table %s missing (%v)", name, err)
		}
	}
}
