package api_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/originweave/bap/server/internal/admission"
	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// Capacity refusals over HTTP: in-flight caps per tenant (429) and per node (503), and the queue
// of waiting tasks per tenant (429), each with Retry-After, counted by reason, and never recorded
// under the Idempotency-Key — the same key runs the request once capacity frees.
func TestCapacityRefusalsCarryRetryAfterAndRecordNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('acme'), ('globex')`); err != nil {
		t.Fatal(err)
	}
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: "node_api", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	refusals := &admission.Refusals{}
	slots := admission.NewSlots(1, 2)
	svc, err := app.NewService(store.New(db), app.Config{NodeID: "node_api", MaxActiveTasksPerTenant: 1,
		MaxQueuedTasksPerTenant: 1, Refusals: refusals})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Options{Service: svc, Authenticator: headerAuth{},
		Admission: api.Admission{Commands: slots, Refusals: refusals}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b := &bundle{srv: srv}
	const body = `{"goal":"g","policy":{"allowed_origins":["https://example.com"]}}`
	refused := func(r result, status int, code, retryAfter string) {
		t.Helper()
		if r.status != status || r.code() != code || r.header.Get("Retry-After") != retryAfter {
			t.Fatalf("got %d %s Retry-After %q, want %d %s Retry-After %s: %s", r.status, r.code(),
				r.header.Get("Retry-After"), status, code, retryAfter, r.raw)
		}
	}

	// The tenant's one in-flight slot is taken: 429, while another tenant still gets through.
	holdAcme, _ := slots.TryAcquire("acme")
	refused(b.do(t, "POST", "/bap/v1/tasks", body, "Idempotency-Key", "k1"), 429, "rate_limited", "1")
	if r := b.do(t, "POST", "/bap/v1/tasks", body, "X-Test-Tenant", "globex", "Idempotency-Key", "g1"); r.status != 201 {
		t.Fatalf("another tenant: %d %s", r.status, r.raw)
	}
	// The node's two slots are taken (by two tenants): 503 for everyone.
	holdOther, _ := slots.TryAcquire("other")
	refused(b.do(t, "POST", "/bap/v1/tasks", body, "X-Test-Tenant", "globex", "Idempotency-Key", "g2"), 503, "overloaded", "1")
	holdAcme()
	holdOther()
	if slots.Held() != 0 {
		t.Fatalf("%d slots held after every request ended", slots.Held())
	}

	// The refused key was not recorded: it creates the task now (and is not a replay).
	first := b.do(t, "POST", "/bap/v1/tasks", body, "Idempotency-Key", "k1")
	if first.status != 201 || first.header.Get("Idempotent-Replayed") != "" || first.field("task", "state") != "admitted" {
		t.Fatalf("refused key retried: %d %v %s", first.status, first.header, first.raw)
	}
	// One active task per tenant: the second waits in created (the queue holds 1), the third is
	// refused until the queue has room again.
	second := b.do(t, "POST", "/bap/v1/tasks", body, "Idempotency-Key", "k2")
	if second.status != 201 || second.field("task", "state") != "created" {
		t.Fatalf("second task: %d %s", second.status, second.raw)
	}
	refused(b.do(t, "POST", "/bap/v1/tasks", body, "Idempotency-Key", "k3"), 429, "rate_limited", "5")
	waiting, _ := second.field("task", "task_id").(string)
	if r := b.do(t, "POST", "/bap/v1/tasks/"+waiting+"/cancel", `{}`, "Idempotency-Key", "c1"); r.status != 200 {
		t.Fatalf("cancel: %d %s", r.status, r.raw)
	}
	third := b.do(t, "POST", "/bap/v1/tasks", body, "Idempotency-Key", "k3")
	if third.status != 201 || third.header.Get("Idempotent-Replayed") != "" || third.field("task", "state") != "created" {
		t.Fatalf("refused key k3 after the queue freed: %d %v %s", third.status, third.header, third.raw)
	}

	for reason, want := range map[admission.Reason]uint64{
		admission.TenantCommands: 1, admission.NodeCommands: 1, admission.TenantQueuedTasks: 1, admission.TenantSessions: 0,
	} {
		if got := refusals.Count(reason); got != want {
			t.Fatalf("refusals for %s: %d, want %d", reason, got, want)
		}
	}
}
