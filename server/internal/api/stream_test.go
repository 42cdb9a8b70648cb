package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/coder/websocket"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/events"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"

	"github.com/originweave/bap/server/internal/waitfor"
)

// streamBundle is an API server with event delivery wired as the daemon wires it.
type streamBundle struct {
	*bundle
	broker *app.Broker
}

func setupStreams(t *testing.T, cfg app.BrokerConfig) *streamBundle {
	t.Helper()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `INSERT INTO tenant_account (tenant_id) VALUES ('acme'), ('globex')`); err != nil {
		t.Fatal(err)
	}
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: "node_api", SoftwareVersion: "test"}); err != nil {
		t.Fatal(err)
	}
	broker := app.NewBroker(cfg)
	relay, err := events.NewRelay(events.RelayConfig{DB: wsql.BeginnerFromPgx(db), Broker: broker, NodeID: "node_api"})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(db, store.Options{Outbox: events.NewOutbox(), EventsCommitted: relay.Wake})
	svc, err := app.NewService(st, app.Config{NodeID: "node_api"})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Options{Service: svc, Authenticator: headerAuth{}, Streams: app.NewStreams(svc, st, broker),
		StreamHeartbeat: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { broker.Close(); srv.Close(); relay.Stop() })
	return &streamBundle{bundle: &bundle{srv: srv}, broker: broker}
}

// sseEvent is one SSE message as a client parses it.
type sseEvent struct {
	id, typ string
	data    map[string]any
}

type sseReader struct {
	resp     *http.Response
	sc       *bufio.Scanner
	comments []string
	lastID   string
}

func (b *streamBundle) openSSE(t *testing.T, path string, headers ...string) *sseReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", b.srv.URL+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("X-Test-Tenant", "acme")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, raw)
	}
	return &sseReader{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next reads the next event (skipping comments); ok=false at the end of the stream.
func (r *sseReader) next(t *testing.T) (sseEvent, bool) {
	t.Helper()
	var e sseEvent
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "":
			if e.typ != "" {
				return e, true
			}
			e = sseEvent{}
		case strings.HasPrefix(line, ":"):
			r.comments = append(r.comments, line)
		case strings.HasPrefix(line, "id: "):
			e.id = strings.TrimPrefix(line, "id: ")
			r.lastID = e.id
		case strings.HasPrefix(line, "event: "):
			e.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e.data); err != nil {
				t.Fatalf("data line %q: %v", line, err)
			}
		}
	}
	return e, false
}

func (r *sseReader) take(t *testing.T, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	for len(out) < n {
		e, ok := r.next(t)
		if !ok {
			t.Fatalf("stream ended after %d of %d events (comments %v)", len(out), n, r.comments)
		}
		out = append(out, e)
	}
	return out
}

func (b *streamBundle) cancel(t *testing.T, taskID string) {
	t.Helper()
	r := b.do(t, "POST", "/bap/v1/tasks/"+taskID+"/cancel", `{}`, "Idempotency-Key", "cancel-"+taskID)
	if r.status != 200 {
		t.Fatalf("cancel_task: %d %s", r.status, r.raw)
	}
}

func TestTaskStreamSSEReplaysThenLiveThenResumes(t *testing.T) {
	t.Parallel()
	b := setupStreams(t, app.BrokerConfig{})
	id := b.createTask(t) // seq 1..4
	s := b.openSSE(t, "/bap/v1/tasks/"+id+"/events/stream?after=1")
	got := s.take(t, 3)
	b.cancel(t, id) // seq 5..7, live
	got = append(got, s.take(t, 3)...)
	for i, e := range got {
		if want := strconv.Itoa(i + 2); e.id != want || e.data["seq"] != float64(i+2) || e.data["type"] != e.typ || e.data["task_id"] != id {
			t.Fatalf("event %d: id %s seq %v type %s/%v; want seq %s", i, e.id, e.data["seq"], e.typ, e.data["type"], want)
		}
	}
	if got[len(got)-1].typ != "receipt.issued" {
		t.Fatalf("last event %s", got[len(got)-1].typ)
	}
	// Heartbeats keep an idle stream alive.
	deadline := time.Now().Add(10 * time.Second)
	for !containsPrefix(s.comments, ": keep-alive") && time.Now().Before(deadline) {
		s.sc.Scan()
		if strings.HasPrefix(s.sc.Text(), ":") {
			s.comments = append(s.comments, s.sc.Text())
		}
	}
	if !containsPrefix(s.comments, ": keep-alive") {
		t.Fatal("no keep-alive comment on an idle stream")
	}
	// Reconnect with Last-Event-ID (which wins over ?after=): only what came later.
	r := b.openSSE(t, "/bap/v1/tasks/"+id+"/events/stream?after=0", "Last-Event-ID", "6")
	if e := r.take(t, 1)[0]; e.id != "7" {
		t.Fatalf("resumed at %s, want 7", e.id)
	}
}

func containsPrefix(list []string, p string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func TestStreamsAreTenantScoped(t *testing.T) {
	t.Parallel()
	b := setupStreams(t, app.BrokerConfig{})
	id := b.createTask(t) // acme's
	r := b.do(t, "GET", "/bap/v1/tasks/"+id+"/events/stream", "", "X-Test-Tenant", "globex")
	if r.status != 404 || r.code() != "not_found" {
		t.Fatalf("another tenant's task stream: %d %s", r.status, r.raw)
	}
	if r := b.do(t, "GET", "/bap/v1/events/stream", "", "X-Test-Scopes", "bap:tasks.read"); r.status != 403 {
		t.Fatalf("without bap:events.read: %d", r.status)
	}
	if r := b.do(t, "GET", "/bap/v1/events/stream?after=nonsense", ""); r.status != 400 || r.code() != "invalid_request" {
		t.Fatalf("bad cursor: %d %s", r.status, r.raw)
	}
	globex := b.openSSE(t, "/bap/v1/events/stream?after="+app.FeedPosition{}.Cursor(), "X-Test-Tenant", "globex")
	acme := b.openSSE(t, "/bap/v1/events/stream?after="+app.FeedPosition{}.Cursor())
	acme.take(t, 4)
	// globex creates a task of its own: the first event globex sees is its own.
	rq := b.do(t, "POST", "/bap/v1/tasks", taskBody, "Idempotency-Key", "globex-1", "X-Test-Tenant", "globex")
	if rq.status != 201 {
		t.Fatal(rq.status)
	}
	if e := globex.take(t, 1)[0]; e.data["task_id"] != rq.field("task", "task_id") {
		t.Fatalf("globex saw %v", e.data["task_id"])
	}
}

func TestAllTasksStreamOverWebSocketResumesOverSSE(t *testing.T) {
	t.Parallel()
	b := setupStreams(t, app.BrokerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(b.srv.URL, "http")+"/bap/v1/events/stream",
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Test-Tenant": {"acme"}}})
	if err != nil {
		t.Fatalf("dial: %v %v", err, resp)
	}
	defer c.CloseNow()
	var ids []string
	for i := 0; i < 3; i++ {
		r := b.do(t, "POST", "/bap/v1/tasks", taskBody, "Idempotency-Key", fmt.Sprintf("ws-%d", i))
		if r.status != 201 {
			t.Fatalf("create_task: %d %s", r.status, r.raw)
		}
		ids = append(ids, r.field("task", "task_id").(string))
	}
	var cursors []string
	seen := map[string]int{}
	for len(cursors) < 12 {
		_, raw, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read after %d: %v", len(cursors), err)
		}
		var e map[string]any
		_ = json.Unmarshal(raw, &e)
		task := e["task_id"].(string)
		seen[task]++
		if e["seq"] != float64(seen[task]) {
			t.Fatalf("task %s: seq %v, want %d", task, e["seq"], seen[task])
		}
		cursors = append(cursors, e["cursor"].(string))
	}
	for i := 1; i < len(cursors); i++ {
		p, _ := app.ParseCursor(cursors[i-1])
		q, err := app.ParseCursor(cursors[i])
		if err != nil || !p.Less(q) {
			t.Fatalf("cursor %s not after %s (%v)", cursors[i], cursors[i-1], err)
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
	// Resume over SSE after the 5th event: exactly the 7 that followed, then live ones.
	s := b.openSSE(t, "/bap/v1/events/stream", "Last-Event-ID", cursors[4])
	got := s.take(t, 7)
	for i, e := range got {
		if e.id != cursors[5+i] {
			t.Fatalf("resumed event %d has cursor %s, want %s", i, e.id, cursors[5+i])
		}
	}
	b.cancel(t, ids[0])
	if e := s.take(t, 1)[0]; e.data["task_id"] != ids[0] || e.data["seq"] != float64(5) {
		t.Fatalf("live after resume: %v", e.data)
	}
}

func TestSlowSubscriberIsCutWithAReason(t *testing.T) {
	t.Parallel()
	b := setupStreams(t, app.BrokerConfig{Buffer: 8})
	id := b.createTask(t)
	s := b.openSSE(t, "/bap/v1/tasks/"+id+"/events/stream?after=4")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(b.srv.URL, "http")+"/bap/v1/tasks/"+id+"/events/stream?after=4",
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Test-Tenant": {"acme"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	waitfor.True(t, 10*time.Second, "both streams registered", func() bool { return b.broker.Subscribers() >= 2 })
	// A burst far larger than the buffer, published faster than any connection drains it.
	big := strings.Repeat("x", 4096)
	burst := make([]app.FeedEvent, 0, 5000)
	for i := 0; i < 5000; i++ {
		burst = append(burst, app.FeedEvent{Event: app.Event{ID: fmt.Sprintf("evt_burst%d", i), TaskID: id, Tenant: "acme",
			Seq: int64(5 + i), Type: "task.state_changed", Time: time.Now(), Actor: "system:runtime", Data: map[string]any{"pad": big}},
			Pos: app.FeedPosition{XID: 1 << 60, Offset: 1, Seq: int64(5 + i)}})
	}
	b.broker.Publish(burst)
	for {
		if _, ok := s.next(t); !ok {
			break
		}
	}
	if !containsPrefix(s.comments, ": closed slow_consumer") {
		t.Fatalf("SSE stream ended without the slow_consumer comment: %v", s.comments)
	}
	for {
		if _, _, err = ws.Read(ctx); err != nil {
			break
		}
	}
	if websocket.CloseStatus(err) != websocket.StatusTryAgainLater {
		t.Fatalf("WebSocket closed with %v, want 1013 (try again later)", err)
	}
}

func TestTooManySubscribersAnswer429(t *testing.T) {
	t.Parallel()
	b := setupStreams(t, app.BrokerConfig{MaxPerTenant: 1})
	b.openSSE(t, "/bap/v1/events/stream")
	r := b.do(t, "GET", "/bap/v1/events/stream", "", "Accept", "text/event-stream")
	if r.status != 429 || r.code() != "rate_limited" || r.header.Get("Retry-After") == "" {
		t.Fatalf("second subscriber: %d %s (Retry-After %q)", r.status, r.raw, r.header.Get("Retry-After"))
	}
}
