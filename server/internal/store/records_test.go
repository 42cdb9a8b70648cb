package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// Node handle records: written under their epoch (recording the epoch and context when the
// browser's events have not), read back preferring the asking session, never across tenants,
// and deleted with their session. The 3NF fixes hold in the database: an approval or a
// reconciliation cannot name another task than its command's.
func TestHandleRecordsGoWithTheirSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	st := store.New(db)
	seedTask(t, ctx, db, "tsk_h")
	for _, q := range []string{
		`INSERT INTO tenant_account (tenant_id) VALUES ('globex')`,
		`INSERT INTO browser_session (tenant_id, session_id, task_id, state, engine) VALUES ('local', 'bs_one', 'tsk_h', 'open', 'chromium')`,
		`INSERT INTO browser_session (tenant_id, session_id, task_id, state, ended_at, engine) VALUES ('local', 'bs_two', 'tsk_h', 'lost', now(), 'chromium')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// The same handle id in two sessions (ids are unique per session only).
	for _, b := range []struct{ session, ctx, epoch string }{{"bs_one", "ctx_one", "ep_one"}, {"bs_two", "ctx_two", "ep_two"}} {
		if err := st.RecordHandles(ctx, "local", b.session, app.HandleBatch{ContextID: b.ctx, EpochID: b.epoch, URL: "https://a.example/",
			Handles: []string{"nd_same0000", "nd_" + b.session[3:] + "00000"}, Roles: []string{"button", "link"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Recording again is idempotent.
	if err := st.RecordHandles(ctx, "local", "bs_one", app.HandleBatch{ContextID: "ctx_one", EpochID: "ep_one",
		Handles: []string{"nd_same0000"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant, handle, asking, wantSession, wantState string
	}{
		{"local", "nd_same0000", "bs_one", "bs_one", "open"},
		{"local", "nd_same0000", "bs_two", "bs_two", "lost"},
		{"local", "nd_two00000", "bs_one", "bs_two", "lost"},
		{"globex", "nd_same0000", "bs_one", "", ""},
		{"local", "nd_never000", "bs_one", "", ""},
	} {
		r, err := st.NodeHandle(ctx, tc.tenant, tc.handle, tc.asking)
		if tc.wantSession == "" {
			if !errors.Is(err, app.ErrNotFound) {
				t.Errorf("%s/%s: %+v, %v; want not found", tc.tenant, tc.handle, r, err)
			}
			continue
		}
		if err != nil || r.SessionID != tc.wantSession || r.SessionState != tc.wantState {
			t.Errorf("%s asked by %s: %+v, %v; want %s (%s)", tc.handle, tc.asking, r, err, tc.wantSession, tc.wantState)
		}
	}
	if _, err := db.Exec(ctx, `DELETE FROM browser_session WHERE session_id = 'bs_two'`); err != nil {
		t.Fatal(err)
	}
	var left, epochs int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM node_handle_record), (SELECT count(*) FROM document_epoch)`).Scan(&left, &epochs); err != nil {
		t.Fatal(err)
	}
	if left != 2 || epochs != 1 {
		t.Fatalf("after deleting a session: %d handle records, %d epochs; want 2 and 1 (the other session's)", left, epochs)
	}

	// approval_request and task_reconciliation name their command's task, or nothing.
	seedTask(t, ctx, db, "tsk_o")
	for _, q := range []string{
		`INSERT INTO task_command (tenant_id, command_id, task_id, operation, actor, side_effecting) VALUES ('local', 'cmd_h', 'tsk_h', 'act', 'x', true)`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for name, q := range map[string]string{
		"approval": `INSERT INTO approval_request (tenant_id, approval_id, task_id, command_id, state, reason, requested_by, expires_at)
			VALUES ('local', 'apr_x', 'tsk_o', 'cmd_h', 'pending', 'r', 'x', now() + interval '1 hour')`,
		"reconciliation": `INSERT INTO task_reconciliation (tenant_id, reconciliation_id, task_id, command_id)
			VALUES ('local', 'rec_x', 'tsk_o', 'cmd_h')`, // open: no resolution row (0013)
	} {
		if _, err := db.Exec(ctx, q); pgCode(err) != "23503" {
			t.Errorf("%s naming another task than its command's: %v, want a foreign key violation", name, err)
		}
	}
}

// BenchmarkRecordHandles is what observe pays to make its handles durable: one transaction
// writing 500 handles, of a new epoch each time ("new", as after a navigation) or of the same
// one again ("again": every row conflicts; the service's cache normally sends none of them).
func BenchmarkRecordHandles(b *testing.B) {
	ctx := context.Background()
	db := pgtest.NewDB(b)
	st := store.New(db)
	for _, q := range []string{
		`INSERT INTO agent_task (tenant_id, task_id, goal, state, created_by) VALUES ('local', 'tsk_b', 'g', 'created', 'x')`,
		`INSERT INTO browser_session (tenant_id, session_id, task_id, state, engine) VALUES ('local', 'bs_b', 'tsk_b', 'open', 'chromium')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	batch := app.HandleBatch{ContextID: "ctx_b", URL: "https://a.example/", Handles: make([]string, 500), Roles: make([]string, 500)}
	for j := range batch.Handles {
		batch.Handles[j], batch.Roles[j] = fmt.Sprintf("nd_%08d", j), "button"
	}
	for _, bc := range []struct {
		name  string
		epoch func(i int) string
	}{
		{"new", func(i int) string { return fmt.Sprintf("ep_new%d", i) }},
		{"again", func(int) string { return "ep_again" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				batch.EpochID = bc.epoch(i)
				if err := st.RecordHandles(ctx, "local", "bs_b", batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
