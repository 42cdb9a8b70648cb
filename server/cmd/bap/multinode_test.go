package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	bapapi "github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/auth"
	"github.com/originweave/bap/server/internal/daemon"
)

// Several nodes on one PostgreSQL behind one base URL (issue 9 "Multi-node", ADR 0012), tried with
// real processes: two `bap serve --profile remote` nodes share one database, and a
// round-robin reverse proxy in front of them is the load balancer (the OAuth issuer and resource
// of both). Tasks created on one are read on the other; a browser session opened on node A is
// driven through node B (forwarded with a node credential; the client's token stays on B), with
// the same results as on A; an approval resolved through B runs the held action on A; cancel_task
// through B stops a navigation in flight on A; forged and replayed node credentials are refused;
// an MCP task started on A answers tasks/get on B (also once A stopped); once A stopped, its
// session is reported lost on B.

// node is one `bap serve` of the cluster.
type node struct {
	*running
	base, id string
}

// startNode runs `bap serve --profile remote` with extra environment and arguments.
func startNode(t *testing.T, bin, dir string, env []string, args ...string) *node {
	t.Helper()
	r, m := serveProcess(t, bin, dir, env, append([]string{"--profile", "remote", "--insecure-http"}, args...)...)
	n := &node{running: r, base: "http://" + r.listen}
	n.id, _ = m["node_id"].(string)
	if n.id == "" {
		t.Fatalf("ready line: %v", m)
	}
	return n
}

// roundRobin is the load balancer: each request goes to the next node.
type roundRobin struct {
	next     atomic.Uint64
	backends atomic.Pointer[[]*httputil.ReverseProxy]
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	bs := rr.backends.Load()
	if bs == nil || len(*bs) == 0 {
		http.Error(w, "no backend", http.StatusBadGateway)
		return
	}
	(*bs)[rr.next.Add(1)%uint64(len(*bs))].ServeHTTP(w, r)
}

func (rr *roundRobin) set(bases ...string) {
	var ps []*httputil.ReverseProxy
	for _, b := range bases {
		u, _ := url.Parse(b)
		ps = append(ps, httputil.NewSingleHostReverseProxy(u))
	}
	rr.backends.Store(&ps)
}

// call sends one request with a bearer token (and optional extra headers); status 0 is a
// transport error.
func nodeCall(t *testing.T, token, method, urlStr, key, body string, hdr ...string) (int, map[string]any, string) {
	t.Helper()
	if token != "" {
		hdr = append([]string{"Authorization", "Bearer " + token}, hdr...)
	}
	return send(method, urlStr, key, body, hdr...)
}

func mustCall(t *testing.T, want int, token, method, urlStr, key, body string) map[string]any {
	t.Helper()
	status, m, raw := nodeCall(t, token, method, urlStr, key, body)
	if status != want {
		t.Fatalf("%s %s: %d %s, want %d", method, urlStr, status, raw, want)
	}
	return m
}

// multiSite is the fixture site: a form whose submission is counted, and a page that never answers.
type multiSite struct {
	srv     *httptest.Server
	orders  atomic.Int64
	slow    chan struct{}
	release chan struct{}
}

func newMultiSite(t *testing.T) *multiSite {
	t.Helper()
	s := &multiSite{slow: make(chan struct{}, 4), release: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /form", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Order</title><h1>Order</h1>`+
			`<form method="post" action="/order"><label>Name <input name="name"></label><button type="submit">Send</button></form>`)
	})
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		s.orders.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Thanks</title><p>Order received</p>`)
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, r *http.Request) {
		s.slow <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-s.release:
		}
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	t.Cleanup(func() { close(s.release) })
	return s
}

// databaseURLOf is the connection string of the embedded cluster a running node of dir owns.
func databaseURLOf(t *testing.T, dir string) string {
	t.Helper()
	pidfile, err := os.ReadFile(filepath.Join(dir, "pgdata", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(pidfile), "\n")
	if len(lines) < 5 {
		t.Fatalf("postmaster.pid: %q", pidfile)
	}
	return fmt.Sprintf("postgres://bap@/bap?host=%s&port=%s", strings.TrimSpace(lines[4]), strings.TrimSpace(lines[3]))
}

func TestTwoNodesBehindOneBaseURL(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	lb := &roundRobin{}
	front := httptest.NewServer(lb)
	defer front.Close()

	// Node B runs the database (its embedded cluster); node A uses it through BAP_DATABASE_URL, so
	// that A can stop while B goes on.
	dirB := dataDir(t)
	b := startNode(t, bin, dirB, nil, "--issuer", front.URL)
	dbURL := databaseURLOf(t, dirB)
	a := startNode(t, bin, dataDir(t), []string{"BAP_DATABASE_URL=" + dbURL, "BAP_MASTER_KEY_FILE=" + filepath.Join(dirB, "master.key")}, "--issuer", front.URL)
	lb.set(a.base, b.base)

	client := admin(t, bin, dirB, "", "client", "create", "--tenant", "acme", "--name", "agent", "--scopes",
		"bap:tasks.read bap:tasks.write bap:browser.act bap:browser.observe bap:approvals.request bap:approvals.resolve")
	token := accessToken(t, front.URL, client) // issued by whichever node the balancer picked
	subject := "client:" + client["client_id"].(string)
	// Separation of duties: the agent's holds are approved by another client.
	reviewer := admin(t, bin, dirB, "", "client", "create", "--tenant", "acme", "--name", "reviewer", "--scopes", "bap:approvals.resolve")
	reviewToken := accessToken(t, front.URL, reviewer)

	// Tasks created through one node are listed and read through the other.
	for i, n := range []*node{a, b} {
		created := mustCall(t, 201, token, "POST", n.base+"/bap/v1/tasks", fmt.Sprintf("mn-task-%d", i),
			`{"goal":"two nodes","policy":{"allowed_origins":["https://shop.example.com"]}}`)
		id := field(created, "task", "task_id")
		other := []*node{b, a}[i]
		if got := mustCall(t, 200, token, "GET", other.base+"/bap/v1/tasks/"+id, "", ""); field(got, "task", "task_id") != id {
			t.Fatalf("get_task on the other node: %v", got)
		}
		evs := mustCall(t, 200, token, "GET", other.base+"/bap/v1/tasks/"+id+"/events", "", "")
		if n := len(evs["events"].([]any)); n < 3 {
			t.Fatalf("list_task_events on the other node: %d events", n)
		}
	}

	site := newMultiSite(t)
	policy := `"policy":{"allowed_origins":["` + site.srv.URL + `"],"approval_rules":[{"effect":"form_submission"}]}`
	task := mustCall(t, 201, token, "POST", front.URL+"/bap/v1/tasks", "mn-browser-task", `{"goal":"order across nodes",`+policy+`}`)
	taskID := field(task, "task", "task_id")
	status, m, raw := nodeCall(t, token, "POST", a.base+"/bap/v1/tasks/"+taskID+"/browser-sessions", "mn-session", `{}`)
	if status == 503 {
		t.Fatalf("bap serve has no browser (install chromium (scripts/install-deps.sh): a required test never skips): %v", m)
	}
	if status != 201 {
		t.Fatalf("create_browser_session on node A: %d %s", status, raw)
	}
	sess := field(m, "session", "session_id")
	sp := "/bap/v1/browser-sessions/" + sess

	// Driven through node B: forwarded to A, which records the commands (with the caller's identity).
	nav := mustCall(t, 200, token, "POST", b.base+sp+"/navigate", "mn-nav", `{"url":"`+site.srv.URL+`/form"}`)
	if field(nav, "receipt", "outcome") != "applied" || !strings.HasSuffix(field(nav, "url"), "/form") {
		t.Fatalf("navigate through node B: %v", nav)
	}
	if again := mustCall(t, 200, token, "POST", a.base+sp+"/navigate", "mn-nav", `{"url":"`+site.srv.URL+`/form"}`); field(again, "receipt", "receipt_id") != field(nav, "receipt", "receipt_id") {
		t.Fatalf("the key replayed on the owner: %v, first %v", again, nav)
	}
	obsB := mustCall(t, 200, token, "POST", b.base+sp+"/observe", "", `{}`)
	obsA := mustCall(t, 200, token, "POST", a.base+sp+"/observe", "", `{}`)
	sameObservation(t, obsA, obsB)
	if !reflect.DeepEqual(obsA, obsB) || field(obsB, "title") != "Order" {
		t.Fatalf("observe through node B differs from node A:\nB %v\nA %v", obsB, obsA)
	}
	q := `{"query":{"role":"textbox","name":"Name"}}`
	if qa, qb := mustCall(t, 200, token, "POST", a.base+sp+"/query-nodes", "", q), mustCall(t, 200, token, "POST", b.base+sp+"/query-nodes", "", q); !reflect.DeepEqual(qa, qb) {
		t.Fatalf("query_nodes differs: A %v, B %v", qa, qb)
	}
	fill := mustCall(t, 200, token, "POST", b.base+sp+"/act", "mn-fill", `{"action":"fill","query":{"role":"textbox","name":"Name"},"value":"Ada"}`)
	if field(fill, "receipt", "outcome") != "applied" {
		t.Fatalf("fill through node B: %v", fill)
	}
	// Through the balancer, whichever node answers: the same page.
	for i := 0; i < 4; i++ {
		if o := mustCall(t, 200, token, "POST", front.URL+sp+"/observe", "", `{}`); field(o, "epoch_id") != field(obsA, "epoch_id") {
			t.Fatalf("observe through the balancer: %v", o)
		}
	}

	// The submission is held (on A, where the act ran); approving it through B runs it on A, once.
	held := mustCall(t, 202, token, "POST", b.base+sp+"/act", "mn-submit", `{"action":"click","query":{"role":"button","name":"Send"}}`)
	aprID := field(held, "approval", "approval_id")
	if aprID == "" || site.orders.Load() != 0 {
		t.Fatalf("held act: %v (orders %d)", held, site.orders.Load())
	}
	if self := mustCall(t, 403, token, "POST", b.base+"/bap/v1/approvals/"+aprID+"/resolve", "mn-self", `{"decision":"approve"}`); self["code"] != "approver_not_permitted" || site.orders.Load() != 0 {
		t.Fatalf("the requesting client's resolve through node B: %v (orders %d)", self, site.orders.Load())
	}
	res := mustCall(t, 200, reviewToken, "POST", b.base+"/bap/v1/approvals/"+aprID+"/resolve", "mn-approve", `{"decision":"approve"}`)
	if field(res, "approval", "state") != "approved" || field(res, "action_receipt", "outcome") != "applied" || site.orders.Load() != 1 ||
		field(res, "approval", "resolved_via") != "api" {
		t.Fatalf("resolve_approval through node B: %v (orders %d)", res, site.orders.Load())
	}
	if o := mustCall(t, 200, token, "POST", b.base+sp+"/observe", "", `{}`); field(o, "title") != "Thanks" {
		t.Fatalf("after the approved submission: %v", o)
	}

	// Every command recorded on A carries the caller B verified, never a node.
	evs := mustCall(t, 200, token, "GET", b.base+"/bap/v1/tasks/"+taskID+"/events?limit=1000", "", "")
	commands := 0
	for _, e := range evs["events"].([]any) {
		ev := e.(map[string]any)
		if ev["type"] != "command.recorded" {
			continue
		}
		commands++
		actor, _ := ev["actor"].(map[string]any)
		if who := actor["kind"].(string) + ":" + fmt.Sprint(actor["id"]); who != subject && who != "client:"+reviewer["client_id"].(string) {
			t.Fatalf("command recorded with actor %v, want %s (or the reviewer)", actor, subject)
		}
	}
	if commands < 5 {
		t.Fatalf("only %d commands recorded: %v", commands, evs)
	}

	// Node credentials: forged, replayed, on another route, or with a bearer token too → 401.
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	serverKey, err := daemon.LoadServerKey(context.Background(), daemon.Config{MasterKeyFile: filepath.Join(dirB, "master.key")}, pool, false)
	if err != nil {
		t.Fatal(err)
	}
	key, err := auth.ClusterKey(context.Background(), pool, serverKey, "node-credential")
	if err != nil {
		t.Fatal(err)
	}
	p := bapapi.Principal{Actor: app.Actor{Tenant: "acme", Subject: subject}, Scopes: map[string]bool{"bap:browser.observe": true, "bap:tasks.read": true}}
	credFor := func(k []byte, method, path, body string) string {
		return bapapi.SignNodeCredential(k, bapapi.NewNodeCredential("node_test", a.id, p, method, path, []byte(body), "", time.Now()))
	}
	hdr := bapapi.NodeCredentialHeader
	forged := credFor([]byte(strings.Repeat("x", 32)), "POST", sp+"/observe", `{}`)
	if st, _, raw := nodeCall(t, "", "POST", a.base+sp+"/observe", "", `{}`, hdr, forged); st != 401 {
		t.Fatalf("forged node credential: %d %s", st, raw)
	}
	good := credFor(key, "POST", sp+"/observe", `{}`)
	if st, m, raw := nodeCall(t, "", "POST", a.base+sp+"/observe", "", `{}`, hdr, good); st != 200 || field(m, "title") != "Thanks" {
		t.Fatalf("a valid node credential: %d %s", st, raw)
	}
	if st, _, raw := nodeCall(t, "", "POST", a.base+sp+"/observe", "", `{}`, hdr, good); st != 401 {
		t.Fatalf("replayed node credential: %d %s", st, raw)
	}
	if st, _, raw := nodeCall(t, "", "POST", a.base+sp+"/observe", "", `{"max_nodes":1}`, hdr, credFor(key, "POST", sp+"/observe", `{}`)); st != 401 {
		t.Fatalf("node credential for another body: %d %s", st, raw)
	}
	if st, _, raw := nodeCall(t, "", "GET", a.base+"/bap/v1/tasks/"+taskID, "", "", hdr, credFor(key, "GET", "/bap/v1/tasks/"+taskID, "")); st != 401 {
		t.Fatalf("node credential on a route that is never forwarded: %d %s", st, raw)
	}
	if st, _, raw := nodeCall(t, token, "POST", a.base+sp+"/observe", "", `{}`, hdr, credFor(key, "POST", sp+"/observe", `{}`)); st != 401 {
		t.Fatalf("node credential with a bearer token: %d %s", st, raw)
	}
	toB := bapapi.SignNodeCredential(key, bapapi.NewNodeCredential("node_test", b.id, p, "POST", sp+"/observe", []byte(`{}`), "", time.Now()))
	if st, _, raw := nodeCall(t, "", "POST", a.base+sp+"/observe", "", `{}`, hdr, toB); st != 401 {
		t.Fatalf("node credential for another node: %d %s", st, raw)
	}

	// A forwarded command is an inbound delivery (issue #23 item 1): the same credential delivered
	// again — the forwarding node's redelivery after a lost answer — gets the first answer, and the
	// command runs once; the inbox holds the one delivery.
	navigations := func() (n int) {
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM task_command WHERE task_id = $1 AND operation = 'navigate'`, taskID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := navigations()
	actor := bapapi.Principal{Actor: p.Actor, Scopes: map[string]bool{"bap:browser.act": true}}
	navBody := `{"url":"` + site.srv.URL + `/form"}`
	delivery := bapapi.NewNodeCredential("node_test", a.id, actor, "POST", sp+"/navigate", []byte(navBody), "mn-redelivered", time.Now())
	signed := bapapi.SignNodeCredential(key, delivery)
	st1, _, first := nodeCall(t, "", "POST", a.base+sp+"/navigate", "mn-redelivered", navBody, hdr, signed)
	st2, _, second := nodeCall(t, "", "POST", a.base+sp+"/navigate", "mn-redelivered", navBody, hdr, signed)
	if st1 != 200 || st2 != st1 || second != first {
		t.Fatalf("a forwarded command delivered twice: %d %s, then %d %s", st1, first, st2, second)
	}
	var deliveries int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox_event WHERE source = 'node:node_test' AND delivery_id = $1
		AND tenant_id = 'acme' AND idempotency_key = 'mn-redelivered'`, delivery.ID).Scan(&deliveries); err != nil || deliveries != 1 {
		t.Fatalf("inbox rows of the delivery: %d, %v", deliveries, err)
	}
	if n := navigations(); n != before+1 {
		t.Fatalf("the command delivered twice ran %d times", n-before)
	}

	// cancel_task through B stops a navigation in flight on A within the cancel deadline. The
	// navigation is an MCP task (Tasks extension) started on A: B answers its tasks/get from the
	// database (protocol_session_binding), while it runs and once it ended; another tenant's
	// caller gets the answer of an unknown task.
	task2 := mustCall(t, 201, token, "POST", front.URL+"/bap/v1/tasks", "mn-cancel-task",
		`{"goal":"cancel across nodes","policy":{"allowed_origins":["`+site.srv.URL+`"]}}`)
	task2ID := field(task2, "task", "task_id")
	s2 := field(mustCall(t, 201, token, "POST", a.base+"/bap/v1/tasks/"+task2ID+"/browser-sessions", "mn-session-2", `{}`), "session", "session_id")
	_, started := mcpPostCaps(t, a.base+"/mcp", token, "tools/call", map[string]any{"name": "navigate",
		"arguments": map[string]any{"session_id": s2, "url": site.srv.URL + "/slow", "idempotency_key": "mn-slow"}}, mcpTasksCaps)
	mcpTask, _ := started["result"].(map[string]any)
	mtID, _ := mcpTask["taskId"].(string)
	if mcpTask["resultType"] != "task" || mtID == "" || mcpTask["status"] != "working" {
		t.Fatalf("navigate to a slow page over MCP on node A: %v", started)
	}
	select {
	case <-site.slow:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow page was not requested")
	}
	tasksGet := func(n *node, tok string) map[string]any {
		t.Helper()
		_, m := mcpPostCaps(t, n.base+"/mcp", tok, "tasks/get", map[string]any{"taskId": mtID}, mcpTasksCaps)
		return m
	}
	if got, _ := tasksGet(b, token)["result"].(map[string]any); got["taskId"] != mtID || got["status"] != "working" {
		t.Fatalf("tasks/get on node B of a task running on node A: %v", got)
	}
	other := accessToken(t, front.URL, admin(t, bin, dirB, "", "client", "create", "--tenant", "globex", "--name", "other",
		"--scopes", "bap:tasks.read bap:browser.act bap:browser.observe"))
	for _, n := range []*node{a, b} {
		if e, _ := tasksGet(n, other)["error"].(map[string]any); e["code"] != float64(-32602) {
			t.Fatalf("tasks/get by another tenant on node %s: %v", n.id, e)
		}
	}
	began := time.Now()
	cancelled := mustCall(t, 200, token, "POST", b.base+"/bap/v1/tasks/"+task2ID+"/cancel", "mn-cancel", `{}`)
	if field(cancelled, "task", "state") != "cancelled" {
		t.Fatalf("cancel_task through node B: %v", cancelled)
	}
	var ended map[string]any
	for ended == nil {
		got := tasksGet(b, token)
		if r, _ := got["result"].(map[string]any); r["status"] == "completed" {
			ended = got
		} else if r["status"] != "working" || time.Since(began) > 15*time.Second {
			t.Fatalf("the MCP task of the navigation in flight on node A, read on node B after cancel_task: %v", got)
		} else {
			<-time.After(100 * time.Millisecond) // the client's poll interval
		}
	}
	res2 := ended["result"].(map[string]any)["result"].(map[string]any)
	if sc, _ := res2["structuredContent"].(map[string]any); res2["isError"] != true || sc["code"] != "invalid_transition" || time.Since(began) > 10*time.Second {
		t.Fatalf("the navigation in flight on A after cancel_task through B: %v after %s", res2, time.Since(began))
	}

	// Node A stops: B no longer forwards to it, and A's session is reported lost.
	lb.set(b.base)
	_ = a.stop(t, syscall.SIGTERM)
	if st, m, raw := nodeCall(t, token, "POST", b.base+sp+"/observe", "", `{}`); st != 409 || m["code"] != "browser_session_lost" {
		t.Fatalf("observe of a stopped node's session through node B: %d %s", st, raw)
	}
	// The MCP task A ran still answers on B, the same as before.
	if got := tasksGet(b, token); !reflect.DeepEqual(got["result"], ended["result"]) {
		t.Fatalf("tasks/get on node B once node A stopped: %v, before %v", got, ended)
	}
}

// TestLocalProfileNodesForward: the same forwarding between two local-profile nodes on one
// machine (loopback ports chosen by the kernel, one shared database): a session opened on node A
// is observed through node B with A's answer.
func TestLocalProfileNodesForward(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dirB := dataDir(t)
	b := start(t, bin, dirB)
	a := start(t, bin, dataDir(t), "BAP_DATABASE_URL="+databaseURLOf(t, dirB), "BAP_MASTER_KEY_FILE="+filepath.Join(dirB, "master.key"))

	task := mustAPI(t, 201, b.listen, "POST", "/bap/v1/tasks", "local-mn-task", `{"goal":"local nodes","policy":{"allowed_origins":["https://shop.example.com"]}}`)
	taskID := field(task, "task", "task_id")
	status, m, raw := api(a.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "local-mn-session", `{}`)
	if status == 503 {
		t.Fatalf("bap serve has no browser (install chromium (scripts/install-deps.sh): a required test never skips): %v", m)
	}
	if status != 201 {
		t.Fatalf("create_browser_session on node A: %d %s", status, raw)
	}
	sp := "/bap/v1/browser-sessions/" + field(m, "session", "session_id")
	obsB := mustAPI(t, 200, b.listen, "POST", sp+"/observe", "", `{}`)
	obsA := mustAPI(t, 200, a.listen, "POST", sp+"/observe", "", `{}`)
	sameObservation(t, obsA, obsB)
	if !reflect.DeepEqual(obsA, obsB) {
		t.Fatalf("observe through node B: %v, on node A: %v", obsB, obsA)
	}
	closed := mustAPI(t, 200, b.listen, "POST", sp+"/close", "local-mn-close", `{}`)
	if field(closed, "session", "state") != "closed" || field(closed, "receipt", "outcome") != "applied" {
		t.Fatalf("close_browser_session through node B: %v", closed)
	}
}

// sameObservation sets aside what differs between two observations of one page by design: each
// has its own observation_id (an id of the owner's session, ob_…). What remains must be equal.
func sameObservation(t *testing.T, a, b map[string]any) {
	t.Helper()
	for _, m := range []map[string]any{a, b} {
		id, _ := m["observation_id"].(string)
		if !strings.HasPrefix(id, "ob_") {
			t.Fatalf("an observation without its id: %v", m)
		}
		delete(m, "observation_id")
	}
}
