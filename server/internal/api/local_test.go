package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// localBundle is the local profile's transport: one handler behind TCP loopback (the agent) and a
// Unix socket marked with api.OnSocket (the operator), as the daemon serves it.
type localBundle struct {
	tcp  *httptest.Server
	sock *http.Client
}

func setupLocal(t *testing.T) *localBundle {
	t.Helper()
	db := pgtest.NewDB(t)
	if err := store.New(db).RegisterNode(context.Background(), app.NodeInfo{ID: "node_local", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	svc, err := app.NewService(store.New(db), app.Config{NodeID: "node_local"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Options{Service: svc, Authenticator: api.Local{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b := &localBundle{tcp: httptest.NewServer(h)}
	t.Cleanup(b.tcp.Close)
	dir, err := os.MkdirTemp("", "bap-api-") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "bap.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, BaseContext: func(net.Listener) context.Context { return api.OnSocket(context.Background()) }}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving the socket: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	b.sock = &http.Client{Transport: tr}
	return b
}

// do sends a request as the agent (TCP) or, with operator, over the socket.
func (b *localBundle) do(t *testing.T, operator bool, method, path, body string, headers ...string) result {
	t.Helper()
	base, client := b.tcp.URL, http.DefaultClient
	if operator {
		base, client = "http://localhost", b.sock
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := result{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// The local profile's two callers: the agent on TCP requests approvals and cannot resolve or list
// them (no bap:approvals.resolve, whatever it sends); the operator on the socket resolves them,
// except those it requested itself (separation of duties).
func TestLocalProfileAgentAndOperator(t *testing.T) {
	t.Parallel()
	b := setupLocal(t)
	r := b.do(t, false, "POST", "/bap/v1/tasks", taskBody, "Idempotency-Key", "t1")
	if r.status != 201 {
		t.Fatalf("create_task as the agent: %d %s", r.status, r.raw)
	}
	taskID := r.field("task", "task_id").(string)
	r = b.do(t, false, "POST", "/bap/v1/tasks/"+taskID+"/approvals", `{"reason":"pay 20 EUR"}`, "Idempotency-Key", "a1")
	if r.status != 201 || r.field("approval", "requested_by") != "agent:local" || r.field("approval", "expires_at") == nil {
		t.Fatalf("request_approval as the agent: %d %s", r.status, r.raw)
	}
	apr := r.field("approval", "approval_id").(string)

	// Nothing the agent sends makes it the operator.
	for _, hdr := range [][]string{nil, {"X-Forwarded-For", "unix"}, {"Forwarded", "for=unix"}, {"X-Bap-Via", "socket"}, {"Host", "localhost"}} {
		r = b.do(t, false, "POST", "/bap/v1/approvals/"+apr+"/resolve", `{"decision":"approve"}`, append([]string{"Idempotency-Key", "self"}, hdr...)...)
		if r.status != 403 || r.code() != "insufficient_scope" || !strings.Contains(r.field("detail").(string), "bap approvals approve") {
			t.Fatalf("the agent's resolve with %v: %d %s", hdr, r.status, r.raw)
		}
		if l := b.do(t, false, "GET", "/bap/v1/approvals", "", hdr...); l.status != 403 || l.code() != "insufficient_scope" {
			t.Fatalf("the agent's list_approvals with %v: %d %s", hdr, l.status, l.raw)
		}
	}

	// The operator's queue holds it; the operator approves it.
	l := b.do(t, true, "GET", "/bap/v1/approvals", "")
	as, _ := l.field("approvals").([]any)
	if l.status != 200 || len(as) != 1 || as[0].(map[string]any)["approval_id"] != apr || as[0].(map[string]any)["state"] != "pending" {
		t.Fatalf("list_approvals as the operator: %d %s", l.status, l.raw)
	}
	r = b.do(t, true, "POST", "/bap/v1/approvals/"+apr+"/resolve", `{"decision":"approve","reason":"ok"}`, "Idempotency-Key", "op1")
	if r.status != 200 || r.field("approval", "state") != "approved" || r.field("approval", "resolved_by") != "operator:local" ||
		r.field("approval", "resolved_via") != "socket" {
		t.Fatalf("resolve as the operator: %d %s", r.status, r.raw)
	}
	if l := b.do(t, true, "GET", "/bap/v1/approvals?state=approved", ""); len(l.field("approvals").([]any)) != 1 {
		t.Fatalf("approved approvals: %s", l.raw)
	}
	if l := b.do(t, true, "GET", "/bap/v1/approvals?state=maybe", ""); l.status != 400 || l.code() != "invalid_request" {
		t.Fatalf("list_approvals of an unknown state: %d %s", l.status, l.raw)
	}

	// An approval the operator requested itself, the operator can never resolve.
	r = b.do(t, true, "POST", "/bap/v1/tasks/"+taskID+"/approvals", `{"reason":"mine"}`, "Idempotency-Key", "a2")
	if r.status != 201 || r.field("approval", "requested_by") != "operator:local" {
		t.Fatalf("request_approval as the operator: %d %s", r.status, r.raw)
	}
	own := r.field("approval", "approval_id").(string)
	r = b.do(t, true, "POST", "/bap/v1/approvals/"+own+"/resolve", `{"decision":"approve"}`, "Idempotency-Key", "op2")
	if r.status != 403 || r.code() != "approver_not_permitted" || r.field("receipt", "outcome") != "rejected" {
		t.Fatalf("the operator's own approval: %d %s", r.status, r.raw)
	}
	if again := b.do(t, true, "POST", "/bap/v1/approvals/"+own+"/resolve", `{"decision":"approve"}`, "Idempotency-Key", "op2"); again.status != 403 || string(again.raw) != string(r.raw) {
		t.Fatalf("the refusal replays for its key: %d %s", again.status, again.raw)
	}
}

// A rule's ttl and channel are validated, stored and shown in the task's policy.
func TestApprovalRuleTTLAndChannel(t *testing.T) {
	t.Parallel()
	b := setupLocal(t)
	rule := func(extra string) string {
		return `{"goal":"g","policy":{"allowed_origins":["https://shop.example.com"],"approval_rules":[{"effect":"form_submission"` + extra + `}]}}`
	}
	r := b.do(t, false, "POST", "/bap/v1/tasks", rule(`,"ttl":"PT1H30M","channel":"elicitation"`), "Idempotency-Key", "ok")
	if r.status != 201 {
		t.Fatalf("create_task: %d %s", r.status, r.raw)
	}
	got := r.field("task", "policy", "approval_rules").([]any)[0].(map[string]any)
	if got["ttl"] != "PT1H30M" || got["channel"] != "elicitation" {
		t.Fatalf("stored rule: %v", got)
	}
	for i, bad := range []string{`,"ttl":"PT0S"`, `,"ttl":"PT25H"`, `,"ttl":"15m"`, `,"ttl":"P1D"`, `,"channel":"anyone"`, `,"ttl":""`} {
		if r := b.do(t, false, "POST", "/bap/v1/tasks", rule(bad), "Idempotency-Key", "bad"+string(rune('a'+i))); r.status != 400 || r.code() != "invalid_request" {
			t.Errorf("rule %s: %d %s", bad, r.status, r.raw)
		}
	}
}
