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
	got, err := st.MCPTask(ctx, "local", "client:a", "mtk_session", now.Add(-time.Minute))
	if err != nil || got.BAPTaskID != "tsk_m" || got.SessionID != "bs_m" || got.Status != "working" || got.Outcome != nil {
		t.Fatalf("read back: %+v %v", got, err)
	}
	// Another tenant, another subject, an unknown id: not found alike.
	for _, who := range [][3]string{{"globex", "client:a", "mtk_session"}, {"local", "client:b", "mtk_session"}, {"local", "client:a", "mtk_never"}} {
		if _, err := st.MCPTask(ctx, who[0], who[1], who[2], now.Add(-time.Minute)); !errors.Is(err, app.ErrNotFound) {
			t.Fatalf("%v: %v, want not found", who, err)
		}
	}
	end := rec("local", "mtk_session", "", "")
	end.Status, end.Outcome, end.Updated = "completed", []byte(`{"result":{"content":[]}}`), now.Add(time.Second)
	if err := st.UpdateMCPTask(ctx, end); err != nil {
		t.Fatal(err)
	}
	// A second end (a late writer) keeps the first.
	late := end
	late.Status, late.Outcome = "failed", []byte(`{"error":{"code":-32603,"message":"x"}}`)
	if err := st.UpdateMCPTask(ctx, late); err != nil {
		t.Fatal(err)
	}
	got, err = st.MCPTask(ctx, "local", "client:a", "mtk_session", now.Add(-time.Minute))
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
	if _, err := st.MCPTask(ctx, "local", "client:a", "mtk_task", now.Add(-time.Minute)); !errors.Is(err, app.ErrNotFound) {
		t.Fatalf("expired: %v", err)
	}
	// The runner: a task bound by a live node is not gone; by a stopped node, or one whose last
	// heartbeat is older than the bound, it is; a task bound without a runner (before it was
	// recorded) is never taken for abandoned.
	for _, n := range []struct{ id, sql string }{
		{"node_live", ""},
		{"node_stopped", `UPDATE runtime_node SET stopped_at = now() WHERE node_id = 'node_stopped'`},
		{"node_silent", `UPDATE runtime_node SET heartbeat_at = now() - interval '1 hour' WHERE node_id = 'node_silent'`},
	} {
		if err := st.RegisterNode(ctx, app.NodeInfo{ID: n.id, SoftwareVersion: "test"}); err != nil {
			t.Fatal(err)
		}
		if n.sql != "" {
			if _, err := db.Exec(ctx, n.sql); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		id, node string
		gone     bool
	}{{"mtk_r_live", "node_live", false}, {"mtk_r_stopped", "node_stopped", true}, {"mtk_r_silent", "node_silent", true}, {"mtk_r_none", "", false}} {
		r := rec("local", c.id, "tsk_m", "")
		r.NodeID = c.node
		if err := st.BindMCPTask(ctx, r); err != nil {
			t.Fatal(err)
		}
		got, err := st.MCPTask(ctx, "local", "client:a", c.id, time.Now().Add(-time.Minute))
		if err != nil || got.NodeID != c.node || got.RunnerGone != c.gone {
			t.Fatalf("%s (runner %q): %+v %v, want gone=%v", c.id, c.node, got, err, c.gone)
		}
	}
}
