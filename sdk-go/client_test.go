package bap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fake is an httptest server that records requests and answers from a queue.
type fake struct {
	mu      sync.Mutex
	reqs    []recorded
	replies []reply
}

type recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

type reply struct {
	status int
	header map[string]string
	body   string
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), body})
	rep := reply{status: 200, body: "{}"}
	if len(f.replies) > 0 {
		rep, f.replies = f.replies[0], f.replies[1:]
	}
	f.mu.Unlock()
	if _, ok := rep.header["Content-Type"]; !ok {
		w.Header().Set("Content-Type", "application/json")
	}
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
}

func (f *fake) push(status int, body string, header ...string) {
	h := map[string]string{}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	f.replies = append(f.replies, reply{status, h, body})
}

func problemJSON(status int, code string) string {
	return `{"type":"urn:bap:problem:` + code + `","title":"T","status":` + itoa(status) + `,"detail":"detail of ` + code + `","code":"` + code + `"}`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func newTestClient(t *testing.T, opts ...Option) (*Client, *fake) {
	t.Helper()
	f := &fake{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c := NewClient(srv.URL, opts...)
	c.backoff = func(int) time.Duration { return 0 }
	return c, f
}

var uuidV7 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestIdempotencyKeyGeneratedAndReusedOnRetry(t *testing.T) {
	c, f := newTestClient(t)
	f.push(503, problemJSON(503, "overloaded"), "Content-Type", "application/problem+json", "Retry-After", "0")
	f.push(409, problemJSON(409, "idempotency_in_flight"), "Content-Type", "application/problem+json", "Retry-After", "0")
	f.push(200, `{"task":{"task_id":"tsk_1","state":"cancelled"},"receipt":{"receipt_id":"rcp_1","outcome":"applied"}}`, "Idempotent-Replayed", "true")
	var meta ResponseMeta
	reason := "stop"
	res, err := c.CancelTask(context.Background(), "tsk_1", CancelTaskRequest{Reason: &reason}, WithResponseMeta(&meta))
	if err != nil {
		t.Fatal(err)
	}
	if res.Task.TaskId != "tsk_1" || res.Receipt.ReceiptId != "rcp_1" {
		t.Fatalf("decoded %+v", res)
	}
	if len(f.reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(f.reqs))
	}
	key := f.reqs[0].Header.Get("Idempotency-Key")
	if !uuidV7.MatchString(key) {
		t.Fatalf("key %q is not a UUID v7", key)
	}
	for i, r := range f.reqs {
		if got := r.Header.Get("Idempotency-Key"); got != key {
			t.Fatalf("attempt %d sent key %q, want %q", i+1, got, key)
		}
	}
	if !meta.Replayed || meta.Status != 200 || meta.Attempts != 3 || meta.IdempotencyKey != key {
		t.Fatalf("meta %+v", meta)
	}
	// A second call gets a fresh key.
	if _, err := c.CancelTask(context.Background(), "tsk_1", CancelTaskRequest{}); err != nil {
		t.Fatal(err)
	}
	if f.reqs[3].Header.Get("Idempotency-Key") == key {
		t.Fatal("a new call reused the previous call's key")
	}
}

func TestGivenIdempotencyKeyAndReadOnlyCalls(t *testing.T) {
	c, f := newTestClient(t)
	f.push(201, `{"task":{"task_id":"tsk_1"},"receipt":{}}`)
	if _, err := c.CreateTask(context.Background(), CreateTaskRequest{Goal: "g"}, WithIdempotencyKey("k-123")); err != nil {
		t.Fatal(err)
	}
	if got := f.reqs[0].Header.Get("Idempotency-Key"); got != "k-123" {
		t.Fatalf("key %q", got)
	}
	f.push(200, `{"task":{"task_id":"tsk_1"}}`)
	if _, err := c.GetTask(context.Background(), "tsk_1", WithIdempotencyKey("ignored")); err != nil {
		t.Fatal(err)
	}
	if got := f.reqs[1].Header.Get("Idempotency-Key"); got != "" {
		t.Fatalf("read-only call sent key %q", got)
	}
	if f.reqs[1].Method != http.MethodGet || len(f.reqs[1].Body) != 0 || f.reqs[1].Header.Get("Content-Type") != "" {
		t.Fatalf("GET request %+v", f.reqs[1])
	}
}

func TestBodySentVerbatim(t *testing.T) {
	c, f := newTestClient(t)
	deadline := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	req := CreateTaskRequest{
		Goal:     "ünïcode <b>&</b>",
		Policy:   Policy{AllowedOrigins: []string{"https://shop.example.com"}},
		Deadline: &deadline,
	}
	f.push(201, `{"task":{},"receipt":{}}`)
	if _, err := c.CreateTask(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(req)
	if !bytes.Equal(f.reqs[0].Body, want) {
		t.Fatalf("body\n got %s\nwant %s", f.reqs[0].Body, want)
	}
	if f.reqs[0].Path != "/bap/v1/tasks" || f.reqs[0].Header.Get("Content-Type") != "application/json" {
		t.Fatalf("request %+v", f.reqs[0])
	}
	// The empty request types are maps; nil means {}.
	if _, err := c.CloseTask(context.Background(), "tsk_1", nil); err != nil {
		t.Fatal(err)
	}
	if string(f.reqs[1].Body) != "{}" || f.reqs[1].Path != "/bap/v1/tasks/tsk_1/close" {
		t.Fatalf("close_task sent %s to %s", f.reqs[1].Body, f.reqs[1].Path)
	}
}

func TestProblemDecoding(t *testing.T) {
	c, f := newTestClient(t)
	f.push(403, `{"type":"urn:bap:problem:origin_not_allowed","title":"Origin not allowed","status":403,"detail":"https://evil.example is outside the policy","code":"origin_not_allowed","receipt":{"receipt_id":"rcp_1","outcome":"rejected"}}`, "Content-Type", "application/problem+json")
	_, err := c.Navigate(context.Background(), "bs_1", NavigateRequest{Url: "https://evil.example/"})
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatalf("error %T %v is not a *Problem", err, err)
	}
	if p.Status != 403 || p.Code != ProblemCodeOriginNotAllowed || p.Title != "Origin not allowed" ||
		p.Detail != "https://evil.example is outside the policy" || p.Type != "urn:bap:problem:origin_not_allowed" {
		t.Fatalf("problem %+v", p)
	}
	if p.Receipt == nil || p.Receipt.Outcome != ReceiptOutcomeRejected || !bytes.Contains(p.Body, []byte("evil.example")) {
		t.Fatalf("problem receipt/body %+v", p)
	}
	if !IsProblem(err, ProblemCodeOriginNotAllowed) || len(f.reqs) != 1 {
		t.Fatalf("IsProblem false or retried (%d requests)", len(f.reqs))
	}
	if want := "bap: 403 origin_not_allowed: https://evil.example is outside the policy"; err.Error() != want {
		t.Fatalf("Error() = %q", err.Error())
	}

	f.push(502, "<h1>bad gateway</h1>", "Content-Type", "text/html")
	_, err = c.GetTask(context.Background(), "tsk_1")
	if !errors.As(err, &p) || p.Status != 502 || p.Code != "" || string(p.Body) != "<h1>bad gateway</h1>" {
		t.Fatalf("non-problem error: %v %+v", err, p)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	c, f := newTestClient(t, WithRetry(2))
	for i := 0; i < 3; i++ {
		f.push(429, problemJSON(429, "rate_limited"), "Content-Type", "application/problem+json", "Retry-After", "0")
	}
	_, err := c.Navigate(context.Background(), "bs_1", NavigateRequest{Url: "https://a.example/"})
	if !IsProblem(err, ProblemCodeRateLimited) || len(f.reqs) != 2 {
		t.Fatalf("err %v after %d requests", err, len(f.reqs))
	}
	// A Retry-After beyond the bound is not waited for.
	f.replies = nil
	f.push(503, problemJSON(503, "overloaded"), "Content-Type", "application/problem+json", "Retry-After", "3600")
	_, err = c.GetTask(context.Background(), "tsk_1")
	if !IsProblem(err, ProblemCodeOverloaded) || len(f.reqs) != 3 {
		t.Fatalf("err %v after %d requests", err, len(f.reqs))
	}
	// 422 and 409 other than idempotency_in_flight are final.
	f.push(409, problemJSON(409, "invalid_transition"), "Content-Type", "application/problem+json")
	_, err = c.CloseTask(context.Background(), "tsk_1", CloseTaskRequest{})
	if !IsProblem(err, ProblemCodeInvalidTransition) || len(f.reqs) != 4 {
		t.Fatalf("err %v after %d requests", err, len(f.reqs))
	}
}

func TestNetworkErrorRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	accepted := 0
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			conn.Close() // drop every request without an answer
		}
	}()
	defer ln.Close()
	c := NewClient("http://"+ln.Addr().String(), WithRetry(3))
	c.backoff = func(int) time.Duration { return 0 }
	_, err = c.GetTask(context.Background(), "tsk_1")
	var p *Problem
	if err == nil || errors.As(err, &p) {
		t.Fatalf("err = %v, want a network error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if accepted < 3 {
		t.Fatalf("%d connections, want 3 attempts", accepted)
	}
}

func TestUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "bap.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: f}}
	srv.Start()
	defer srv.Close()
	f.push(200, `{"task":{"task_id":"tsk_9","state":"running"}}`)
	c := NewClient("", WithUnixSocket(sock))
	res, err := c.GetTask(context.Background(), "tsk_9")
	if err != nil {
		t.Fatal(err)
	}
	if res.Task.TaskId != "tsk_9" || f.reqs[0].Path != "/bap/v1/tasks/tsk_9" {
		t.Fatalf("res %+v reqs %+v", res, f.reqs)
	}
}

func TestTokenAndPathEscaping(t *testing.T) {
	calls := 0
	c, f := newTestClient(t, WithTokenSource(func(context.Context) (string, error) { calls++; return "tok", nil }))
	if _, err := c.GetTask(context.Background(), "tsk_a/b c"); err != nil {
		t.Fatal(err)
	}
	if got := f.reqs[0].Header.Get("Authorization"); got != "Bearer tok" || calls != 1 {
		t.Fatalf("Authorization %q after %d calls", got, calls)
	}
	if f.reqs[0].Path != "/bap/v1/tasks/tsk_a%2Fb%20c" {
		t.Fatalf("path %q", f.reqs[0].Path)
	}
	f.push(200, `{"events":[],"next_after":null}`)
	res, err := c.ListTaskEvents(context.Background(), "tsk_1", 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	if res.NextAfter != nil || f.reqs[1].RawQuery != "after=5&limit=10" {
		t.Fatalf("res %+v query %q", res, f.reqs[1].RawQuery)
	}
	if _, err := c.ListTaskEvents(context.Background(), "tsk_1", 0, 0); err != nil {
		t.Fatal(err)
	}
	if f.reqs[2].RawQuery != "" {
		t.Fatalf("zero query parameters sent: %q", f.reqs[2].RawQuery)
	}
}

func TestGetArtifact(t *testing.T) {
	c, f := newTestClient(t)
	data := []byte("\x89PNG fake bytes")
	sum := sha256.Sum256(data)
	f.push(200, string(data), "Content-Type", "image/png", "Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":")
	b, err := c.GetArtifact(context.Background(), "art_1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Body, data) || b.MediaType != "image/png" || b.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("blob %+v", b)
	}
	if f.reqs[0].Header.Get("Accept") != "*/*" {
		t.Fatalf("Accept %q", f.reqs[0].Header.Get("Accept"))
	}
	other := sha256.Sum256([]byte("other"))
	f.push(200, string(data), "Content-Type", "image/png", "Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(other[:])+":")
	if _, err := c.GetArtifact(context.Background(), "art_1"); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("err = %v, want ErrDigestMismatch", err)
	}
}

func TestAlternativeAnswerThroughMeta(t *testing.T) {
	c, f := newTestClient(t)
	f.push(202, `{"approval":{"approval_id":"apr_1","state":"pending"},"receipt":{"receipt_id":"rcp_1","outcome":"pending_approval"}}`)
	var meta ResponseMeta
	res, err := c.Act(context.Background(), "bs_1", ActRequest{Action: ActActionClick}, WithResponseMeta(&meta))
	if err != nil {
		t.Fatal(err)
	}
	if meta.Status != 202 || res.Receipt.Outcome != ReceiptOutcomePendingApproval {
		t.Fatalf("meta %+v res %+v", meta, res)
	}
	var held ActPendingApprovalResponse
	if err := meta.Decode(&held); err != nil || held.Approval.ApprovalId != "apr_1" {
		t.Fatalf("decode: %v %+v", err, held)
	}
}

// TestInterruptedReplayIsTyped: the replay of a key whose command a crash interrupted (200 with
// only the receipt) is told from the operation's result by the result's Interrupted method, for
// an operation whose result shares the 200 (act, cancel_task, navigate) and one whose result is
// a 201 (create_task); a normal result, and act's 202 pending approval (whose decoded result also
// holds only the receipt), are not taken for it.
func TestInterruptedReplayIsTyped(t *testing.T) {
	const rc = `{"receipt_id":"rcp_1","command_id":"cmd_1","task_id":"tsk_1","operation":"act","outcome":"%s","issued_at":"2026-11-20T09:15:02Z"}`
	receipt := func(outcome string) string { return strings.Replace(rc, "%s", outcome, 1) }
	task := `{"task_id":"tsk_1","state":"cancelled","goal":"g","policy":{"allowed_origins":["https://a.example"]},"created_at":"2026-11-20T09:15:00Z","updated_at":"2026-11-20T09:15:02Z"}`
	type answer interface {
		Interrupted() (*InterruptedCommandResponse, bool)
	}
	cases := []struct {
		name    string
		status  int
		body    string
		call    func(c *Client) (answer, error)
		outcome ReceiptOutcome // "" when the answer is the operation's result
	}{
		{"act interrupted", 200, `{"receipt":` + receipt("reconciliation_required") + `}`, func(c *Client) (answer, error) {
			return c.Act(context.Background(), "bs_1", ActRequest{Action: ActActionClick})
		}, ReceiptOutcomeReconciliationRequired},
		{"act result", 200, `{"receipt":` + receipt("applied") + `,"epoch_id":"ep_1","navigated":false}`, func(c *Client) (answer, error) {
			return c.Act(context.Background(), "bs_1", ActRequest{Action: ActActionClick})
		}, ""},
		{"act held for approval", 202, `{"approval":{"approval_id":"apr_1","state":"pending"},"receipt":` + receipt("pending_approval") + `}`, func(c *Client) (answer, error) {
			return c.Act(context.Background(), "bs_1", ActRequest{Action: ActActionClick})
		}, ""},
		{"navigate interrupted", 200, `{"receipt":` + receipt("unknown_outcome") + `}`, func(c *Client) (answer, error) {
			return c.Navigate(context.Background(), "bs_1", NavigateRequest{Url: "https://a.example/"})
		}, ReceiptOutcomeUnknownOutcome},
		{"cancel_task interrupted", 200, `{"receipt":` + receipt("unknown_outcome") + `}`, func(c *Client) (answer, error) {
			return c.CancelTask(context.Background(), "tsk_1", CancelTaskRequest{})
		}, ReceiptOutcomeUnknownOutcome},
		{"cancel_task result", 200, `{"task":` + task + `,"receipt":` + receipt("applied") + `}`, func(c *Client) (answer, error) {
			return c.CancelTask(context.Background(), "tsk_1", CancelTaskRequest{})
		}, ""},
		{"create_task interrupted", 200, `{"receipt":` + receipt("unknown_outcome") + `}`, func(c *Client) (answer, error) {
			return c.CreateTask(context.Background(), CreateTaskRequest{Goal: "g"})
		}, ReceiptOutcomeUnknownOutcome},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newTestClient(t)
			f.push(tc.status, tc.body)
			res, err := tc.call(c)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := res.Interrupted()
			if ok != (tc.outcome != "") {
				t.Fatalf("Interrupted() = %+v, %v; want interrupted=%v", got, ok, tc.outcome != "")
			}
			if ok && (got.Receipt.Outcome != tc.outcome || got.Receipt.ReceiptId != "rcp_1") {
				t.Fatalf("Interrupted() = %+v", got)
			}
			if !ok && got != nil {
				t.Fatalf("Interrupted() = %+v, false", got)
			}
		})
	}
	var none *CancelTaskResponse
	if got, ok := none.Interrupted(); ok || got != nil {
		t.Fatalf("a nil result is interrupted: %+v", got)
	}
}

func TestEventDecodeData(t *testing.T) {
	var e Event
	if err := json.Unmarshal([]byte(`{"event_id":"evt_1","task_id":"tsk_1","seq":3,"type":"task.state_changed","time":"2026-11-20T09:15:02Z","data":{"from":"admitted","to":"running"}}`), &e); err != nil {
		t.Fatal(err)
	}
	v, err := e.DecodeData()
	if err != nil {
		t.Fatal(err)
	}
	d, ok := v.(*TaskStateChangedData)
	if !ok || d.From != TaskStateAdmitted || d.To != TaskStateRunning {
		t.Fatalf("data %T %+v", v, v)
	}
	if len(EventTypes) != len(EventDataTypes) {
		t.Fatalf("%d types, %d data types", len(EventTypes), len(EventDataTypes))
	}
	e.Type = "something.new"
	if _, err := e.DecodeData(); err == nil {
		t.Fatal("unknown type decoded")
	}
}

func TestUUIDv7(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		k := newUUIDv7()
		if !uuidV7.MatchString(k) || seen[k] {
			t.Fatalf("bad or repeated key %q", k)
		}
		seen[k] = true
	}
	ms, _ := hex.DecodeString(strings.ReplaceAll(newUUIDv7()[:13], "-", ""))
	var ts int64
	for _, b := range ms {
		ts = ts<<8 | int64(b)
	}
	if d := time.Since(time.UnixMilli(ts)); d < 0 || d > time.Minute {
		t.Fatalf("timestamp off by %v", d)
	}
}

// TestProblemMatchesSchema keeps the hand-written Problem in step with spec/schemas/Problem.json.
func TestProblemMatchesSchema(t *testing.T) {
	raw, err := os.ReadFile("../server/internal/apigen/openapi.gen.json")
	if err != nil {
		t.Fatal("the OpenAPI bundle (make generate writes it):", err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	rt := reflect.TypeOf(Problem{})
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		fields[name] = true
	}
	for prop := range doc.Components.Schemas["Problem"].Properties {
		if !fields[prop] {
			t.Errorf("Problem.json has %q but sdk-go's Problem has no such field", prop)
		}
	}
}
