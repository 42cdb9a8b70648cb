package app_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/task"
)

// The operator's task list (the console, bap tasks list): newest first, narrowed by state, origin
// and age, paged by created_at, one tenant only; bad filters are 400 invalid_request.
func TestListTasksFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	first := b.create(t, app.CreateTaskInput{Goal: "interactive, oldest"})
	b.advance(time.Minute)
	delegated := b.create(t, app.CreateTaskInput{Goal: "delegated", Plan: []app.PlanStep{{Op: "observe", Args: json.RawMessage(`{}`)}}})
	b.advance(time.Minute)
	auto := b.create(t, app.CreateTaskInput{Goal: "made autonomous below"})
	if _, err := b.db.Exec(ctx, `UPDATE agent_task SET mode = 'autonomous' WHERE task_id = $1`, auto.ID); err != nil {
		t.Fatal(err)
	}
	b.advance(time.Minute)
	last := b.create(t, app.CreateTaskInput{Goal: "interactive, newest"})
	if _, err := b.db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('other')`); err != nil {
		t.Fatal(err)
	}

	ids := func(ts []*app.Task) []string {
		out := make([]string, len(ts))
		for i, tk := range ts {
			out[i] = tk.ID
		}
		return out
	}
	start := first.CreatedAt
	for _, tt := range []struct {
		name  string
		actor app.Actor
		f     app.TaskFilter
		want  []string
	}{
		{"all, newest first", b.actor, app.TaskFilter{}, []string{last.ID, auto.ID, delegated.ID, first.ID}},
		{"interactive", b.actor, app.TaskFilter{Origin: app.OriginInteractive}, []string{last.ID, first.ID}},
		{"delegated", b.actor, app.TaskFilter{Origin: app.OriginDelegated}, []string{delegated.ID}},
		{"autonomous", b.actor, app.TaskFilter{Origin: app.OriginAutonomous}, []string{auto.ID}},
		{"state", b.actor, app.TaskFilter{State: first.State}, []string{last.ID, auto.ID, delegated.ID, first.ID}},
		{"another state", b.actor, app.TaskFilter{State: task.Succeeded}, []string{}},
		{"age", b.actor, app.TaskFilter{CreatedAfter: start.Add(90 * time.Second)}, []string{last.ID, auto.ID}},
		{"page", b.actor, app.TaskFilter{Limit: 2, Before: auto.CreatedAt}, []string{delegated.ID, first.ID}},
		{"another tenant sees none", app.Actor{Tenant: "other", Subject: "client:x"}, app.TaskFilter{}, []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts, err := b.svc.ListTasks(ctx, tt.actor, tt.f)
			got := ids(ts)
			if err != nil || len(got) != len(tt.want) {
				t.Fatalf("got %v (%v), want %v", got, err, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
	if got := []string{first.Origin(), delegated.Origin()}; got[0] != app.OriginInteractive || got[1] != app.OriginDelegated {
		t.Fatalf("origins %v", got)
	}
	for _, f := range []app.TaskFilter{{State: "nonsense"}, {Origin: "elsewhere"}, {Limit: 501}, {Limit: -1}} {
		if _, err := b.svc.ListTasks(ctx, b.actor, f); app.AsError(err) == nil || app.AsError(err).Code != app.CodeInvalidRequest {
			t.Errorf("%+v: %v, want invalid_request", f, err)
		}
	}
}
