package auth

import (
	"context"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
)

// TestAuditWritesABatchInOrderWithinItsTenant: one flush writes every queued decision in the
// order it was made; a tenant the database does not know is recorded as none; a route's session
// binds its decision to the session's task only within the caller's tenant (another tenant's
// session id binds nothing), and an id that is not one binds nothing and is not recorded.
func TestAuditWritesABatchInOrderWithinItsTenant(t *testing.T) {
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('acme'), ('globex');
		INSERT INTO agent_task (tenant_id, task_id, goal, state, created_by) VALUES
			('acme', 'tsk_a', 'g', 'admitted', 'x'), ('globex', 'tsk_g', 'g', 'admitted', 'x');
		INSERT INTO browser_session (tenant_id, session_id, task_id, state, engine) VALUES ('globex', 'bs_g', 'tsk_g', 'open', 'chromium')`); err != nil {
		t.Fatal(err)
	}
	a := NewAudit(pool, nil)
	at := time.Now()
	for _, d := range []app.AuthDecision{
		{Tenant: "acme", Subject: "client:acme", Operation: "close_browser_session", SessionID: "bs_g", Outcome: app.AuthAllowed},
		{Tenant: "globex", Subject: "client:globex", Operation: "close_browser_session", SessionID: "bs_g", Outcome: app.AuthAllowed},
		{Tenant: "nobody", Subject: "client:nobody", Operation: "get_task", Outcome: app.AuthRefused, Reason: "unauthenticated"},
		{Tenant: "acme", Subject: "client:acme", Operation: "get_task", TaskID: "tsk_a", SessionID: "not an id", Outcome: app.AuthAllowed, Via: app.ViaAPI},
	} {
		d.Time = at
		a.RecordAuthDecision(ctx, d)
	}
	a.Flush(ctx)
	rows, err := pool.Query(ctx, `SELECT coalesce(tenant_id, '-'), operation, coalesce(task_id, '-'), coalesce(session_id, '-'), coalesce(via, '-'), decision_point
		FROM auth_decision ORDER BY decision_id`)
	if err != nil {
		t.Fatal(err)
	}
	var got [][6]string
	for rows.Next() {
		var r [6]string
		if err := rows.Scan(&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := [][6]string{
		{"acme", "close_browser_session", "-", "bs_g", "-", "request"},
		{"globex", "close_browser_session", "tsk_g", "bs_g", "-", "request"},
		{"-", "get_task", "-", "-", "-", "request"},
		{"acme", "get_task", "tsk_a", "-", "api", "request"},
	}
	if len(got) != len(want) {
		t.Fatalf("recorded %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("decision %d: %v; want %v", i, got[i], want[i])
		}
	}
}
