package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// MCP task bindings: bound to the BAP task a call names (directly or through its session, within
// the tenant only), read only by their tenant and subject, ended once, and refused when the call
// names nothing of the tenant.
func TestMCPTaskBindingsAreTenantScoped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	st := store.New(db)
	seedTask(t, ctx, db, "tsk_m")
	for _, q := range []string{
		`INSERT INTO tenant_account (tenant_id) VALUES ('globex')`,
		`INSERT INTO browser_session (tenant_id, session_id, task_id, state, engine) VALUES ('local', 'bs_m', 'tsk_m', 'open', 'chromium')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec := func(tenant, id, task, session string) app.MCPTaskRecord {
		return app.MCPTaskRecord{Tenant: tenant, Subject: "client:a", ID: id, BAPTaskID: task, SessionID: session,
			Status: "working", Created: now, Updated: now, Expires: now.Add(time.Hour)}
	}
	if err := st.BindMCPTask(ctx, rec("local", "mtk_session", "", "bs_m")); err != nil {
		t.Fatal(err)
	}
	if err := st.BindMCPTask(ctx, rec("local", "mtk_task", "tsk_m", "")); err != nil {
		t.Fatal(err)
	}
	// Nothing of the tenant named: a session or task of another tenant, or none.
	for _, r := range []app.MCPTaskRecord{rec("globex", "mtk_x", "", "bs_m"), rec("globex", "mtk_y", "tsk_m", ""), rec("local", "mtk_z", "tsk_nope", "")} {
		if err := st.BindMCPTask(ctx, r); err == nil {
			t.Fatalf("bound %+v", r)
		}
	}
	got, err := st.MCPTask(ctx, "local", "client:a", "mtk_session")
	if err != nil || got.BAPTaskID != "tsk_m" || got.SessionID != "bs_m" || got.Status != "working" || got.Outcome != nil {
		t.Fatalf("read back: %+v %v", got, err)
	}
	// Another tenant, another subject, an unknown id: not found alike.
	for _, who := range [][3]string{{"globex", "client:a", "mtk_session"}, {"local", "client:b", "mtk_session"}, {"local", "client:a", "mtk_never"}} {
		if _, err := st.MCPTask(ctx, who[0], who[1], who[2]); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("%v: %v, want not found", who, err)
		}
	}
	end := rec("local", "mtk_session", "", "")
	end.Status, end.Outcome, end.Updated = "completed", []byte(`{"result":{"content":[]}}`), now.Add(time.Second)
	if err := st.FinishMCPTask(ctx, end); err != nil {
		t.Fatal(err)
	}
	// A second end (a late writer) keeps the first.
	late := end
	late.Status, late.Outcome = "failed", []byte(`{"error":{"code":-32603,"message":"x"}}`)
	if err := st.FinishMCPTask(ctx, late); err != nil {
		t.Fatal(err)
	}
	got, err = st.MCPTask(ctx, "local", "client:a", "mtk_session")
	if err != nil || got.Status != "completed" || string(got.Outcome) != `{"result": {"content": []}}` || !got.Updated.Equal(end.Updated) {
		t.Fatalf("after the end: %+v %s %v", got, got.Outcome, err)
	}
	// The database holds the shape: an end without its outcome is refused.
	if _, err := db.Exec(ctx, `UPDATE protocol_session_binding SET status = 'failed', outcome = NULL WHERE external_ref = 'mtk_task'`); pgCode(err) != "23514" {
		t.Fatalf("failed without an outcome: %v", err)
	}
	// Expired tasks are unknown.
	if _, err := db.Exec(ctx, `UPDATE protocol_session_binding SET expires_at = now() - interval '1 second' WHERE external_ref = 'mtk_task'`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MCPTask(ctx, "local", "client:a", "mtk_task"); !errors.Is(err, app.ErrNotFound) {
		t.Fatalf("expired: %v", err)
	}
}
