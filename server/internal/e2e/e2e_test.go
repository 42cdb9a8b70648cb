package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/auth"
	"github.com/originweave/bap/server/internal/browser"
	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"

	"github.com/originweave/bap/server/internal/waitfor"
)

// shared is the one browser of this test binary (STYLE: one browser per package, a fresh
// session per test).
var shared *browser.Browser

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	// The package's tests run in parallel, and a session stays open until its test's task ends:
	// more than the default 32 are open at once (a limit the backpressure tests exercise on a
	// server of their own, not here).
	// The proxies trust, upstream, the one certificate every httptest TLS server presents
	// (newTLSShop), and so does the browser, by its key: a session that does not record reaches
	// the HTTPS shop through an opaque tunnel (BenchmarkRecordingCost's baseline).
	probe := httptest.NewTLSServer(http.NotFoundHandler())
	upstream := x509.NewCertPool()
	upstream.AddCert(probe.Certificate())
	spki := sha256.Sum256(probe.Certificate().RawSubjectPublicKeyInfo)
	probe.Close()
	br, err := browser.Start(ctx, browser.Config{Binary: os.Getenv("BAP_CHROMIUM"), MaxSessions: 96,
		UpstreamTLS: &tls.Config{RootCAs: upstream, MinVersion: tls.VersionTLS12},
		TrustSPKI:   []string{base64.StdEncoding.EncodeToString(spki[:])}})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting Chromium:", err)
		os.Exit(1)
	}
	shared = br
	code := pgtest.Run(m, store.MigrateURL)
	closeSharedFirefox()
	_ = br.Close()
	os.Exit(code)
}

// shop is the fixture site: a checkout that counts the orders it receives.
type shop struct {
	srv      *httptest.Server
	orders   atomic.Int64
	hits     atomic.Int64
	uploaded atomic.Pointer[[]byte]
	// buyer is the name field of the last order.
	buyer atomic.Pointer[string]
	// orderBody is the body of the last order, as the site received it.
	orderBody atomic.Pointer[[]byte]
}

const invoiceText = "INVOICE 42: 2 items, 16.50 EUR\n"

func newShop(t *testing.T) *shop { t.Helper(); return startShop(t, false) }

// newTLSShop is the shop over HTTPS, with httptest's certificate (for 127.0.0.1), which the
// shared browser's proxies trust upstream (TestMain) and the browser itself does not.
func newTLSShop(t *testing.T) *shop { t.Helper(); return startShop(t, true) }

func startShop(t *testing.T, overTLS bool) *shop {
	t.Helper()
	page, err := os.ReadFile("testdata/shop.html")
	if err != nil {
		t.Fatal(err)
	}
	s := &shop{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /checkout", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(bytes.ReplaceAll(page, []byte("{{COUNT}}"), []byte(fmt.Sprint(s.orders.Load()))))
	})
	spa, err := os.ReadFile("testdata/spa-checkout.html")
	if err != nil {
		t.Fatal(err)
	}
	mux.HandleFunc("GET /spa-checkout", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(spa)
	})
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		s.orderBody.Store(&body)
		r.Body = io.NopCloser(bytes.NewReader(body)) // read again for the form
		name := r.FormValue("name")
		s.buyer.Store(&name)
		n := s.orders.Add(1)
		http.Redirect(w, r, fmt.Sprintf("/thanks?order=%d", n), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /thanks", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Thank you</title><h1>Thank you for your order %s</h1>`, r.URL.Query().Get("order"))
	})
	mux.HandleFunc("GET /upload", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Upload</title><form method="post" action="/upload" enctype="multipart/form-data">
<label for="doc">Document</label><input id="doc" name="doc" type="file"><button type="submit">Send</button></form>`)
	})
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		f, _, err := r.FormFile("doc")
		if err != nil {
			http.Error(w, "no file", http.StatusBadRequest)
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		s.uploaded.Store(&b)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Received</title><p>Received %d bytes</p>`, len(b))
	})
	mux.HandleFunc("GET /files", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Files</title><a href="/invoice.txt">Invoice</a>`)
	})
	mux.HandleFunc("GET /invoice.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Disposition", `attachment; filename="invoice.txt"`)
		fmt.Fprint(w, invoiceText)
	})
	mux.HandleFunc("GET /signin", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: signedInAs, Path: "/", HttpOnly: true})
		http.Redirect(w, r, "/account?first=1", http.StatusFound)
	})
	mux.HandleFunc("GET /account", func(w http.ResponseWriter, r *http.Request) {
		who := "nobody"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Account</title><p>signed in: %s</p><p id="out"></p><button>Log out</button>
<button onclick="window.open('/statement', 'statement')">Open statement</button>
<script>
if (location.search.includes("first")) { localStorage.setItem("cart", "3 items"); sessionStorage.setItem("step", "payment"); }
document.getElementById("out").textContent = "local=" + (localStorage.getItem("cart") || "none") + " session=" + (sessionStorage.getItem("step") || "none");
</script>`, who)
	})
	mux.HandleFunc("GET /statement", func(w http.ResponseWriter, r *http.Request) {
		who := "nobody"
		if c, err := r.Cookie("sid"); err == nil {
			who = c.Value
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Statement</title><p>statement for: %s</p><p id="out"></p>
<script>document.getElementById("out").textContent = "session=" + (sessionStorage.getItem("step") || "none");</script>`, who)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Elsewhere</title><p>elsewhere</p>`)
	})
	s.srv = httptest.NewUnstartedServer(mux)
	if overTLS {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	t.Cleanup(s.srv.Close)
	return s
}

// stack is the BAP API over a fresh database and the shared browser.
type stack struct {
	srv *httptest.Server
	db  *pgxpool.Pool
	svc *app.Service
	// audit records the requests' authorization (the local profile's, as the daemon wires it).
	audit *auth.Audit
	// opClient dials the stack's Unix socket (the operator); client and base, when set, are
	// where this stack's calls go instead of srv (see operator_test.go).
	opClient *http.Client
	client   *http.Client
	base     string
	// orch is the model port the stack's service was built with (its workers get it too).
	orch app.Orchestrator
}

func newStack(t *testing.T, opts ...func(*app.Config)) *stack {
	t.Helper()
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: "node_e2e", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	cfg := app.Config{NodeID: "node_e2e", Browser: daemon.Chromium(shared),
		InterruptedResponse: api.InterruptedResponse, SoftwareVersion: "1.2.3", ProtocolVersion: "1.0.0",
		Logger: testLogger(t)}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := app.NewService(store.New(db), cfg)
	if err != nil {
		t.Fatal(err)
	}
	go svc.RunBrowserEvents(ctx)
	go svc.RunSessionCloser(ctx)
	audit := auth.NewAudit(db, nil) // as the daemon's local profile records requests' authorization
	if err := audit.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(audit.Stop)
	h, err := api.New(api.Options{Service: svc, Authenticator: api.Local{}, Registry: prometheus.NewRegistry(), Audit: audit, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &stack{srv: srv, db: db, svc: svc, opClient: serveSocket(t, h), audit: audit, orch: cfg.Orchestrator}
}

type reply struct {
	status int
	raw    []byte
	body   map[string]any
}

func (r reply) str(path ...string) string {
	var v any = r.body
	for _, p := range path {
		m, _ := v.(map[string]any)
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func (s *stack) call(t *testing.T, method, path, key string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	client, base := s.endpoint()
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	assertResponseMatchesSpec(t, method, path, resp.StatusCode, resp.Header.Get("Content-Type"), raw)
	return r
}

func (s *stack) must(t *testing.T, want int, method, path, key string, body any) reply {
	t.Helper()
	r := s.call(t, method, path, key, body)
	if r.status != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, r.status, r.raw, want)
	}
	assertNoCDPIDs(t, r.raw)
	if method == "GET" && r.status == 200 && strings.Contains(path, "/events") {
		assertEventsMatchSchemas(t, r.raw)
	}
	return r
}

// cdpID matches the shapes of raw CDP identifiers: 32 upper-case hex characters (target, frame,
// loader and browser-context ids) or the "N.M.K" form of remote object ids, whose first part is
// a large random number (a version such as "1.0.0" is not one).
var cdpID = regexp.MustCompile(`\b[0-9A-F]{32}\b|"-?\d{4,}\.\d+\.\d+"`)

func assertNoCDPIDs(t *testing.T, raw []byte) {
	t.Helper()
	if m := cdpID.Find(raw); m != nil {
		t.Fatalf("a client-visible response carries a CDP-shaped id %q: %s", m, raw)
	}
}

// openShop creates a task allowed on the shop and a session on its checkout page.
func openShop(t *testing.T, s *stack, sh *shop, name string) (taskID, sessionID string) {
	t.Helper()
	return openShopOn(t, s, sh, name, "")
}

// openShopOn is openShop on engine ("": the node's default).
func openShopOn(t *testing.T, s *stack, sh *shop, name, engine string) (taskID, sessionID string) {
	t.Helper()
	r := s.must(t, 201, "POST", "/bap/v1/tasks", name+"-task", map[string]any{
		"goal": "place an order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		"postcondition": map[string]any{"all": []any{map[string]any{"text_present": "Thank you"}}},
	})
	taskID = r.str("task", "task_id")
	body := map[string]any{}
	if engine != "" {
		body["engine"] = engine
	}
	r = s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", name+"-session", body)
	sessionID = r.str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", name+"-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	return taskID, sessionID
}

func (s *stack) query(t *testing.T, sessionID string, q map[string]any) string {
	t.Helper()
	r := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/query-nodes", "", map[string]any{"query": q})
	nodes, _ := r.body["nodes"].([]any)
	if len(nodes) == 0 {
		t.Fatalf("query %v matched nothing: %s", q, r.raw)
	}
	id, _ := nodes[0].(map[string]any)["node_id"].(string)
	return id
}

// A new user's checkout: observe, query fields by label, fill, select, check and click.
func TestCheckoutThroughTheAPI(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	taskID, sess := openShop(t, s, sh, "checkout")
	base := "/bap/v1/browser-sessions/" + sess

	obs := s.must(t, 200, "POST", base+"/observe", "", map[string]any{})
	if !strings.Contains(string(obs.raw), "Place order") || obs.str("epoch_id") == "" {
		t.Fatalf("observe lacks the page: %s", obs.raw)
	}
	name := s.query(t, sess, map[string]any{"label": "Full name"})
	s.must(t, 200, "POST", base+"/act", "fill-name", map[string]any{"action": "fill", "node_id": name, "value": "Ada Lovelace"})
	s.must(t, 200, "POST", base+"/act", "fill-email", map[string]any{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "ada@example.com"})
	s.must(t, 200, "POST", base+"/act", "select", map[string]any{"action": "select_option", "query": map[string]any{"label": "Country"}, "values": []string{"France"}})
	s.must(t, 200, "POST", base+"/act", "terms", map[string]any{"action": "check", "query": map[string]any{"role": "checkbox", "name": "terms"}})
	r := s.must(t, 200, "POST", base+"/act", "place", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}})
	if r.body["navigated"] != true || sh.orders.Load() != 1 {
		t.Fatalf("click did not place the order (orders %d): %s", sh.orders.Load(), r.raw)
	}
	ex := s.must(t, 200, "POST", base+"/extract", "", map[string]any{"kind": "text"})
	if !strings.Contains(string(ex.raw), "Thank you for your order 1") {
		t.Fatalf("extract text: %s", ex.raw)
	}
	// Filled values are protected input: never in the task's history.
	evs := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
	if strings.Contains(string(evs.raw), "Ada Lovelace") || strings.Contains(string(evs.raw), "ada@example.com") {
		t.Fatalf("history holds filled values: %s", evs.raw)
	}
	if !strings.Contains(string(evs.raw), `"action.performed"`) {
		t.Fatalf("history lacks the actions: %s", evs.raw)
	}
	// The postcondition ("Thank you" on the page) holds on the context the task used last.
	closed := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/close", "close", map[string]any{})
	if closed.str("task", "state") != "succeeded" || closed.str("task", "verification") != "verified" ||
		closed.body["postcondition"].(map[string]any)["satisfied"] != true {
		t.Fatalf("close_task: %s", closed.raw)
	}
	// Success comes with evidence of the page it held on: a screenshot and an MHTML snapshot whose
	// bytes match their SHA-256, tied to the close command.
	evidence, _ := closed.body["evidence"].([]any)
	kinds := map[string]bool{}
	for _, e := range evidence {
		a := e.(map[string]any)
		kinds[a["kind"].(string)] = true
		status, _, b := s.getRaw(t, "/bap/v1/artifacts/"+a["artifact_id"].(string))
		sum := sha256.Sum256(b)
		if status != 200 || hex.EncodeToString(sum[:]) != a["sha256"] {
			t.Fatalf("close evidence %v: status %d, bytes hash %x", a, status, sum)
		}
		v := s.must(t, 200, "POST", "/bap/v1/artifacts/"+a["artifact_id"].(string)+"/verify", "", map[string]any{})
		if v.body["valid"] != true || !strings.Contains(string(v.raw), "close_task") && !strings.Contains(string(v.raw), "cmd_") {
			t.Fatalf("close evidence does not verify: %s", v.raw)
		}
	}
	if len(evidence) != 2 || !kinds["screenshot"] || !kinds["dom_snapshot"] {
		t.Fatalf("close_task evidence: %s", closed.raw)
	}
	// The whole history, close included, matches the event schemas (checked by must).
	s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events?limit=1000", "", nil)
}

// 100 requests with one key place one order: the click is recorded before dispatch and replayed
// after, never run twice.
func TestHundredSameKeyClicksPlaceOneOrder(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	_, sess := openShop(t, s, sh, "once")
	base := "/bap/v1/browser-sessions/" + sess
	for _, step := range []map[string]any{
		{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Grace"},
		{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "grace@example.com"},
		{"action": "check", "query": map[string]any{"role": "checkbox"}},
	} {
		s.must(t, 200, "POST", base+"/act", fmt.Sprint(step["action"], step["value"]), step)
	}
	click := map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[int]int{}
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.call(t, "POST", base+"/act", "the-click", click)
			mu.Lock()
			outcomes[r.status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Whatever was in flight, the key settles to the one response.
	waitfor.Until(t, 30*time.Second, "the key settles (the first click is running)", func() (bool, string) {
		r := s.call(t, "POST", base+"/act", "the-click", click)
		if r.status != 200 && r.status != 409 {
			t.Fatalf("replay: %d %s", r.status, r.raw)
		}
		return r.status == 200, fmt.Sprintf("%d %s", r.status, r.raw)
	})
	if sh.orders.Load() != 1 || outcomes[200]+outcomes[409] != 100 {
		t.Fatalf("orders %d, outcomes %v", sh.orders.Load(), outcomes)
	}
}

// After a navigation, a handle of the old document is stale: 409, never another element.
func TestStaleHandleAfterNavigation(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	taskID, sess := openShop(t, s, sh, "stale")
	base := "/bap/v1/browser-sessions/" + sess
	old := s.query(t, sess, map[string]any{"label": "Full name"})
	s.must(t, 200, "POST", base+"/navigate", "reload", map[string]any{"url": sh.srv.URL + "/checkout"})
	r := s.call(t, "POST", base+"/act", "stale-fill", map[string]any{"action": "fill", "node_id": old, "value": "x"})
	if r.status != 409 || r.body["code"] != "stale_node_handle" {
		t.Fatalf("old handle: %d %s", r.status, r.raw)
	}
	// No order was placed: the postcondition does not hold and the task fails, naming the clause.
	closed := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/close", "close", map[string]any{})
	pc := closed.body["postcondition"].(map[string]any)
	if closed.str("task", "state") != "failed" || pc["satisfied"] != false || len(pc["unmet"].([]any)) != 1 {
		t.Fatalf("close_task: %s", closed.raw)
	}
}

// A task whose policy holds form submissions: the click waits for a person; the agent (TCP) cannot
// resolve it, the operator (the Unix socket) approves and it runs exactly once, deny never runs it.
func TestApprovalHoldsFormSubmission(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"chromium", "firefox"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			sh := newShop(t)
			s := newStack(t, bothEngines(t))
			r := s.must(t, 201, "POST", "/bap/v1/tasks", "held-task", map[string]any{
				"goal": "order, but ask first",
				"policy": map[string]any{"allowed_origins": []string{sh.srv.URL},
					"approval_rules": []any{map[string]any{"effect": "form_submission"}}},
			})
			taskID := r.str("task", "task_id")
			sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "held-session", map[string]any{"engine": engine}).str("session", "session_id")
			base := "/bap/v1/browser-sessions/" + sess
			s.must(t, 200, "POST", base+"/navigate", "held-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
			for _, step := range []map[string]any{
				{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Edsger"},
				{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "ewd@example.com"},
				{"action": "check", "query": map[string]any{"role": "checkbox"}},
			} {
				s.must(t, 200, "POST", base+"/act", fmt.Sprint("held-", step["action"], step["value"]), step)
			}
			click := map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}}
			held := s.must(t, 202, "POST", base+"/act", "held-click", click)
			if held.str("approval", "state") != "pending" || held.str("receipt", "outcome") != "pending_approval" || sh.orders.Load() != 0 {
				t.Fatalf("held click: orders %d, %s", sh.orders.Load(), held.raw)
			}
			if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "waiting_for_approval" {
				t.Fatalf("task %s while the click is held", st)
			}
			apr := held.str("approval", "approval_id")
			if held.str("approval", "expires_at") == "" || held.str("approval", "channel") != "approver" || held.str("approval", "requested_by") != "agent:local" {
				t.Fatalf("held approval: %s", held.raw)
			}
			// The agent that was held cannot resolve it, either way: it has no bap:approvals.resolve.
			for _, d := range []string{"approve", "deny"} {
				self := s.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "agent-"+d, map[string]any{"decision": d})
				if self.status != 403 || self.body["code"] != "insufficient_scope" || !strings.Contains(self.str("detail"), "operator") || sh.orders.Load() != 0 {
					t.Fatalf("the agent's own %s: orders %d, %d %s", d, sh.orders.Load(), self.status, self.raw)
				}
			}
			op := s.operator()
			ok := op.must(t, 200, "POST", "/bap/v1/approvals/"+apr+"/resolve", "approve-1", map[string]any{"decision": "approve"})
			if ok.str("approval", "state") != "approved" || ok.str("action_receipt", "outcome") != "applied" || sh.orders.Load() != 1 ||
				ok.str("approval", "resolved_by") != "operator:local" || ok.str("approval", "resolved_via") != "socket" {
				t.Fatalf("approve: orders %d, %s", sh.orders.Load(), ok.raw)
			}
			again := op.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "approve-2", map[string]any{"decision": "approve"})
			if again.status != 409 || again.body["code"] != "approval_not_pending" || sh.orders.Load() != 1 {
				t.Fatalf("second approve: orders %d, %d %s", sh.orders.Load(), again.status, again.raw)
			}
			if st := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil).str("task", "state"); st != "running" {
				t.Fatalf("task %s after the approval", st)
			}

			// Deny: back on the checkout, the next submission is held and never runs.
			s.must(t, 200, "POST", base+"/navigate", "held-nav-2", map[string]any{"url": sh.srv.URL + "/checkout"})
			for _, step := range []map[string]any{
				{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Tony"},
				{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "tony@example.com"},
				{"action": "check", "query": map[string]any{"role": "checkbox"}},
			} {
				s.must(t, 200, "POST", base+"/act", fmt.Sprint("held2-", step["action"], step["value"]), step)
			}
			held2 := s.must(t, 202, "POST", base+"/act", "held-click-2", click)
			no := op.must(t, 200, "POST", "/bap/v1/approvals/"+held2.str("approval", "approval_id")+"/resolve", "deny-1", map[string]any{"decision": "deny"})
			if no.str("approval", "state") != "denied" || no.body["action_receipt"] != nil || sh.orders.Load() != 1 {
				t.Fatalf("deny: orders %d, %s", sh.orders.Load(), no.raw)
			}
			// A click that submits nothing is not held by a form_submission rule.
			s.must(t, 200, "POST", base+"/act", "plain-link", map[string]any{"action": "hover", "query": map[string]any{"role": "link", "name": "Back to cart"}})
		})
	}
}
