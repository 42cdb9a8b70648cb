package app_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/admission"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
)

// loadBrowser is a browser that opens sessions instantly and reports its load (app.SessionLoad).
type loadBrowser struct {
	mu    sync.Mutex
	open  map[string]bool
	limit int
}

type loadSession struct {
	app.BrowserSession // unused methods panic
	ctx                string
}

func (s loadSession) DefaultContext() string      { return s.ctx }
func (s loadSession) Close(context.Context) error { return nil }

func (f *loadBrowser) Engines() []app.Engine {
	return []app.Engine{{Name: "chromium", AdapterID: "cdp", Available: true}}
}

func (f *loadBrowser) OpenSession(_ context.Context, _, id string, _ *policy.Policy, _ func(page.Event)) (app.BrowserSession, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.open) >= f.limit {
		return nil, page.ErrTooManySessions
	}
	f.open[id] = true
	return loadSession{ctx: ids.New(ids.BrowsingContext)}, nil
}

func (f *loadBrowser) Session(id string) (app.BrowserSession, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return loadSession{}, f.open[id]
}

func (f *loadBrowser) SessionLoad() (open, limit int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.open), f.limit
}

func (f *loadBrowser) drop(id string) {
	f.mu.Lock()
	delete(f.open, id)
	f.mu.Unlock()
}

// Session caps refuse before the command is recorded: 429 for the tenant's, 503 for the node's,
// both with Retry-After, counted by reason; the refused key opens a session once one closed.
func TestSessionCapsRefuseWithoutRecording(t *testing.T) {
	t.Parallel()
	br := &loadBrowser{open: map[string]bool{}, limit: 3}
	refusals := &admission.Refusals{}
	b := setup(t, func(c *app.Config) {
		c.Browser, c.MaxSessionsPerTenant, c.Refusals = br, 2, refusals
		c.InterruptedResponse = func(*app.Receipt) (app.Response, error) { return app.Response{}, nil }
	})
	ctx := context.Background()
	if _, err := b.db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('acme')`); err != nil {
		t.Fatal(err)
	}
	open := func(actor app.Actor, taskID, key string) (*app.SessionResult, error) {
		t.Helper()
		saved := b.actor
		b.actor = actor
		call := b.call(t, "create_browser_session", []string{taskID}, map[string]any{}, key)
		b.actor = saved
		r := &recorder[*app.SessionResult]{}
		resp, err := b.svc.CreateBrowserSession(ctx, call, taskID, app.SessionRequest{}, r)
		if err != nil {
			return nil, err
		}
		if resp.Replayed || r.result == nil {
			t.Fatalf("key %s: replayed %v, problem %v", key, resp.Replayed, r.problem)
		}
		return r.result, nil
	}
	refusal := func(err error, code app.Code) {
		t.Helper()
		var e *app.Error
		if !errors.As(err, &e) || e.Code != code || e.RetryAfter != 5*time.Second {
			t.Fatalf("got %v, want %s with Retry-After 5s", err, code)
		}
	}

	local := b.create(t, app.CreateTaskInput{})
	first, err := open(b.actor, local.ID, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(b.actor, local.ID, "s2"); err != nil {
		t.Fatal(err)
	}
	_, err = open(b.actor, local.ID, "s3")
	refusal(err, app.CodeRateLimited) // the tenant's 2

	acme := app.Actor{Tenant: "acme", Subject: "client:acme"}
	saved := b.actor
	b.actor = acme
	acmeTask := b.create(t, app.CreateTaskInput{})
	b.actor = saved
	if _, err := open(acme, acmeTask.ID, "a1"); err != nil {
		t.Fatal(err)
	}
	_, err = open(acme, acmeTask.ID, "a2")
	refusal(err, app.CodeOverloaded) // the node's 3

	// Close one of local's sessions: the key refused with 429 now opens a session (not a replay).
	if _, err := b.svc.CloseBrowserSession(ctx, b.call(t, "close_browser_session", []string{first.Session.ID}, map[string]any{}),
		first.Session.ID, &recorder[*app.SessionResult]{}); err != nil {
		t.Fatal(err)
	}
	br.drop(first.Session.ID)
	if _, err := open(b.actor, local.ID, "s3"); err != nil {
		t.Fatalf("refused key after a session closed: %v", err)
	}
	if got := b.svc.OpeningSessions(); got != 0 {
		t.Fatalf("%d openings left reserved", got)
	}
	if refusals.Count(admission.TenantSessions) != 1 || refusals.Count(admission.NodeSessions) != 1 {
		t.Fatalf("refusals: tenant %d, node %d", refusals.Count(admission.TenantSessions), refusals.Count(admission.NodeSessions))
	}
	// The refused commands left nothing in the task's history: two sessions opened, one closed,
	// one opened again (each command recorded once).
	recorded := 0
	for _, e := range b.events(t, local.ID) {
		if e.Type == "command.recorded" {
			recorded++
		}
	}
	if recorded != 5 { // create_task, s1, s2, close, s3
		t.Fatalf("%d commands recorded on the task, want 5", recorded)
	}
}
