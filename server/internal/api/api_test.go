package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// headerAuth is a test Authenticator: X-Test-Tenant picks the tenant, X-Test-Subject the subject
// (default client:<tenant>) and X-Test-Scopes the capabilities; no header means unauthenticated. It stands in for the OAuth resource server so the
// transport's tenant and scope handling can be tested on their own.
type headerAuth struct{}

func (headerAuth) Authenticate(r *http.Request) (api.Principal, error) {
	tenant := r.Header.Get("X-Test-Tenant")
	if tenant == "" {
		return api.Principal{}, &app.Error{Code: app.CodeUnauthenticated, Detail: "no credentials"}
	}
	scopes := map[string]bool{}
	for _, s := range strings.Fields(r.Header.Get("X-Test-Scopes")) {
		scopes[s] = true
	}
	if r.Header.Get("X-Test-Scopes") == "" {
		for _, s := range api.AllScopes {
			scopes[s] = true
		}
	}
	subject := r.Header.Get("X-Test-Subject")
	if subject == "" {
		subject = "client:" + tenant
	}
	// One workload per subject, as an OAuth client is: separation of duties decides as by subject.
	return api.Principal{Actor: app.Actor{Tenant: tenant, Subject: subject}, Scopes: scopes, ClientID: "test:" + subject}, nil
}

type bundle struct {
	srv *httptest.Server
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('acme'), ('globex')`); err != nil {
		t.Fatal(err)
	}
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: "node_api", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	svc, err := app.NewService(store.New(db), app.Config{NodeID: "node_api"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Options{Service: svc, Authenticator: headerAuth{}, MaxBodyBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &bundle{srv: srv}
}

type result struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func (b *bundle) do(t *testing.T, method, path, body string, headers ...string) result {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-Test-Tenant", "acme")
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := result{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (r result) code() string { s, _ := r.body["code"].(string); return s }

func (r result) field(path ...string) any {
	var v any = r.body
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	return v
}

const taskBody = `{"goal":"order the cart","policy":{"allowed_origins":["https://shop.example.com"]}}`

func (b *bundle) createTask(t *testing.T) string {
	t.Helper()
	r := b.do(t, "POST", "/bap/v1/tasks", taskBody, "Idempotency-Key", "create-"+t.Name())
	if r.status != 201 {
		t.Fatalf("create_task: %d %s", r.status, r.raw)
	}
	return r.field("task", "task_id").(string)
}

func TestCreateTaskHundredConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 100
	var mu sync.Mutex
	counts := map[string]int{}
	taskIDs := map[string]bool{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := b.do(t, "POST", "/bap/v1/tasks", taskBody, "Idempotency-Key", "one-key")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.status == 201 && r.header.Get("Idempotent-Replayed") == "true":
				counts["replayed"]++
				taskIDs[r.field("task", "task_id").(string)] = true
			case r.status == 201:
				counts["created"]++
				taskIDs[r.field("task", "task_id").(string)] = true
			case r.status == 409 && r.code() == "idempotency_in_flight" && r.header.Get("Retry-After") != "":
				counts["in_flight"]++
			default:
				counts[fmt.Sprintf("other %d %s", r.status, r.raw)]++
			}
		}()
	}
	wg.Wait()
	if counts["created"] != 1 || counts["replayed"]+counts["in_flight"] != n-1 || len(taskIDs) != 1 {
		t.Fatalf("outcomes %v, task ids %v", counts, taskIDs)
	}
	// Another body with that key: 422, and nothing recorded.
	r := b.do(t, "POST", "/bap/v1/tasks", `{"goal":"something else","policy":{"allowed_origins":[]}}`, "Idempotency-Key", "one-key")
	if r.status != 422 || r.code() != "idempotency_key_reused" {
		t.Fatalf("reused key: %d %s", r.status, r.raw)
	}
}

func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.do(t, "POST", "/bap/v1/tasks", taskBody, "Idempotency-Key", "k1")
	// Key order and spacing do not make another request.
	second := b.do(t, "POST", "/bap/v1/tasks", `{ "policy": {"allowed_origins": ["https://shop.example.com"]}, "goal": "order the cart" }`, "Idempotency-Key", "k1")
	if first.status != 201 || second.status != 201 || !bytes.Equal(first.raw, second.raw) || second.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s\nsecond %d %s %v", first.status, first.raw, second.status, second.raw, second.header)
	}
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("first response marked replayed")
	}
}

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := `{"goal":"` + strings.Repeat("x", 70<<10) + `","policy":{"allowed_origins":[]}}`
	tests := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		code                     string
	}{
		{"missing key", "POST", "/bap/v1/tasks", taskBody, nil, 400, "idempotency_key_required"},
		{"malformed key", "POST", "/bap/v1/tasks", taskBody, []string{"Idempotency-Key", "has space"}, 400, "invalid_request"},
		{"unknown field", "POST", "/bap/v1/tasks", `{"goal":"g","policy":{"allowed_origins":[]},"sneaky":1}`, []string{"Idempotency-Key", "a"}, 400, "invalid_request"},
		{"wrong type", "POST", "/bap/v1/tasks", `{"goal":5,"policy":{"allowed_origins":[]}}`, []string{"Idempotency-Key", "b"}, 400, "invalid_request"},
		{"goal too long", "POST", "/bap/v1/tasks", `{"goal":"` + strings.Repeat("g", 2001) + `","policy":{"allowed_origins":[]}}`, []string{"Idempotency-Key", "c"}, 400, "invalid_request"},
		{"not json", "POST", "/bap/v1/tasks", `{"goal":`, []string{"Idempotency-Key", "d"}, 400, "invalid_request"},
		{"bad origin pattern", "POST", "/bap/v1/tasks", `{"goal":"g","policy":{"allowed_origins":["ftp://x"]}}`, []string{"Idempotency-Key", "e"}, 400, "invalid_request"},
		{"too large", "POST", "/bap/v1/tasks", big, []string{"Idempotency-Key", "f"}, 413, "payload_too_large"},
		{"bad task id", "GET", "/bap/v1/tasks/nope", "", nil, 400, "invalid_request"},
		{"limit too big", "GET", "/bap/v1/tasks/tsk_x/events?limit=5000", "", nil, 400, "invalid_request"},
		{"negative after", "GET", "/bap/v1/tasks/tsk_x/events?after=-1", "", nil, 400, "invalid_request"},
		{"unknown task", "GET", "/bap/v1/tasks/tsk_unknown", "", nil, 404, "not_found"},
		{"unknown route", "GET", "/bap/v1/nothing", "", nil, 404, "not_found"},
		{"unauthenticated", "GET", "/bap/v1/tasks/tsk_x", "", []string{"X-Test-Tenant", ""}, 401, "unauthenticated"},
		{"missing scope", "POST", "/bap/v1/tasks", taskBody, []string{"X-Test-Scopes", "bap:tasks.read", "Idempotency-Key", "g"}, 403, "insufficient_scope"},
		{"unknown session", "POST", "/bap/v1/browser-sessions/bs_x/observe", `{}`, nil, 404, "not_found"},
	}
	for _, tt := range tests {
		r := b.do(t, tt.method, tt.path, tt.body, tt.headers...)
		if r.status != tt.status || r.code() != tt.code {
			t.Errorf("%s: got %d %s, want %d %s", tt.name, r.status, r.raw, tt.status, tt.code)
			continue
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: content type %q", tt.name, ct)
		}
		if r.field("type") != "urn:bap:problem:"+tt.code || r.field("status") != float64(tt.status) || r.field("title") == "" {
			t.Errorf("%s: not an RFC 9457 problem: %s", tt.name, r.raw)
		}
		if strings.Contains(string(r.raw), "sneaky\":1") || strings.Contains(string(r.raw), "xxxxxxxx") {
			t.Errorf("%s: problem echoes the request body: %s", tt.name, r.raw)
		}
	}
	// None of the refused requests became a command.
	r := b.do(t, "POST", "/bap/v1/tasks", taskBody, "Idempotency-Key", "a")
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("key of a refused request was recorded: %d %s", r.status, r.raw)
	}
}

func TestCrossTenantReadsAnswer404(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.createTask(t)
	for _, path := range []string{"/bap/v1/tasks/" + id, "/bap/v1/tasks/" + id + "/events"} {
		if r := b.do(t, "GET", path, "", "X-Test-Tenant", "globex"); r.status != 404 || r.code() != "not_found" {
			t.Errorf("%s as another tenant: %d %s", path, r.status, r.raw)
		}
		if r := b.do(t, "GET", path, ""); r.status != 200 {
			t.Errorf("%s as owner: %d %s", path, r.status, r.raw)
		}
	}
	if r := b.do(t, "POST", "/bap/v1/tasks/"+id+"/cancel", `{}`, "X-Test-Tenant", "globex", "Idempotency-Key", "x"); r.status != 404 {
		t.Errorf("cancel as another tenant: %d %s", r.status, r.raw)
	}
	// A replay reads the task's steps and archive: another tenant's replay_task finds nothing
	// (issue #20 item 4), and its owner's is refused for what the task is (live, unrecorded).
	if r := b.do(t, "POST", "/bap/v1/tasks/"+id+"/replay", `{}`, "X-Test-Tenant", "globex", "Idempotency-Key", "rp"); r.status != 404 || r.code() != "not_found" {
		t.Errorf("replay as another tenant: %d %s", r.status, r.raw)
	}
	if r := b.do(t, "POST", "/bap/v1/tasks/"+id+"/replay", `{"mode":"archive"}`, "Idempotency-Key", "rp-own"); r.status != 409 || r.code() != "replay_not_possible" {
		t.Errorf("replay of a live task by its owner: %d %s", r.status, r.raw)
	}
	if r := b.do(t, "POST", "/bap/v1/tasks/"+id+"/replay", `{"mode":"replay_everything"}`, "Idempotency-Key", "rp-bad"); r.status != 400 {
		t.Errorf("replay with a mode the spec does not list: %d %s", r.status, r.raw)
	}
}

func TestLifecycleOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.createTask(t)
	if r := b.do(t, "GET", "/bap/v1/tasks/"+id, ""); r.field("task", "state") != "admitted" {
		t.Fatalf("get_task: %s", r.raw)
	}
	r := b.do(t, "POST", "/bap/v1/tasks/"+id+"/approvals", `{"reason":"pay 20 EUR"}`, "Idempotency-Key", "ap1")
	if r.status != 201 || r.field("approval", "state") != "pending" || r.field("receipt", "outcome") != "applied" {
		t.Fatalf("request_approval: %d %s", r.status, r.raw)
	}
	apr := r.field("approval", "approval_id").(string)
	if r.field("approval", "expires_at") == nil || r.field("approval", "requested_by") != "client:acme" {
		t.Fatalf("request_approval: %s", r.raw)
	}
	// Separation of duties: the requester is refused (recorded), a separate approver decides.
	r = b.do(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", `{"decision":"approve"}`, "Idempotency-Key", "rs0")
	if r.status != 403 || r.code() != "approver_not_permitted" || r.field("receipt", "outcome") != "rejected" {
		t.Fatalf("the requester's own resolve: %d %s", r.status, r.raw)
	}
	r = b.do(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", `{"decision":"approve"}`, "Idempotency-Key", "rs1", "X-Test-Subject", "user:reviewer")
	if r.status != 200 || r.field("approval", "state") != "approved" || r.field("approval", "resolved_by") != "user:reviewer" ||
		r.field("approval", "resolved_via") != "api" {
		t.Fatalf("resolve_approval: %d %s", r.status, r.raw)
	}
	r = b.do(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", `{"decision":"deny"}`, "Idempotency-Key", "rs2", "X-Test-Subject", "user:reviewer")
	if r.status != 409 || r.code() != "approval_not_pending" || r.field("receipt", "outcome") != "rejected" {
		t.Fatalf("second resolve: %d %s", r.status, r.raw)
	}
	r = b.do(t, "POST", "/bap/v1/tasks/"+id+"/resume", `{"checkpoint_id":"chk_1"}`, "Idempotency-Key", "rm1")
	if r.status != 404 || r.code() != "not_found" {
		t.Fatalf("resume from an unknown checkpoint: %d %s", r.status, r.raw)
	}
	r = b.do(t, "POST", "/bap/v1/tasks/"+id+"/close", "", "Idempotency-Key", "cl1")
	if r.status != 200 || r.field("task", "state") != "succeeded" || r.field("task", "verification") != "unverified" ||
		r.field("postcondition", "satisfied") != true {
		t.Fatalf("close_task: %d %s", r.status, r.raw)
	}
	r = b.do(t, "POST", "/bap/v1/tasks/"+id+"/cancel", `{"reason":"too late"}`, "Idempotency-Key", "cn1")
	if r.status != 409 || r.code() != "invalid_transition" {
		t.Fatalf("cancel of a closed task: %d %s", r.status, r.raw)
	}
	r = b.do(t, "GET", "/bap/v1/tasks/"+id+"/events?limit=5", "")
	if r.status != 200 || len(r.field("events").([]any)) != 5 || r.field("next_after") != float64(5) {
		t.Fatalf("list_task_events: %d %s", r.status, r.raw)
	}
	first := r.field("events").([]any)[0].(map[string]any)
	if first["type"] != "task.created" || first["seq"] != float64(1) || first["actor"].(map[string]any)["kind"] != "client" {
		t.Fatalf("first event: %v", first)
	}
	r = b.do(t, "GET", "/bap/v1/tasks/"+id+"/events?after=1000", "")
	if r.status != 200 || len(r.field("events").([]any)) != 0 || r.field("next_after") != nil {
		t.Fatalf("past the end: %s", r.raw)
	}
}

func TestAnonymousRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tt := range []struct {
		path   string
		status int
		has    string
	}{
		{"/healthz", 200, `"ok"`},
		{"/readyz", 200, `"ready"`},
		{"/bap/v1", 200, `"protocol":"bap"`},
		{"/bap/v1/openapi.json", 200, `"openapi": "3.1`},
		{"/bap/v1/asyncapi.json", 200, `"asyncapi": "3.0`},
		{"/metrics", 200, "bap_http_requests_total"},
	} {
		r := b.do(t, "GET", tt.path, "", "X-Test-Tenant", "")
		if r.status != tt.status || !strings.Contains(string(r.raw), tt.has) {
			t.Errorf("%s: %d %.200s", tt.path, r.status, r.raw)
		}
	}
}
