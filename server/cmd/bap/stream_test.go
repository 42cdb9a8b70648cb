package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	bapsdk "github.com/originweave/bap/sdk-go"

	"github.com/originweave/bap/server/internal/waitfor"
)

// feedEvent is what the test keeps of a delivered event.
type feedEvent struct {
	ID     string `json:"event_id"`
	TaskID string `json:"task_id"`
	Seq    int64  `json:"seq"`
	Cursor string `json:"cursor"`
}

// subscriber follows the all-tasks stream over SSE or WebSocket and resumes from its last cursor
// whenever the connection drops, against whatever address the server has now.
type subscriber struct {
	name string
	addr *atomic.Value // "host:port" of the server currently running
	ws   bool

	mu     sync.Mutex
	events []feedEvent
	cursor string
	conns  int
}

func (s *subscriber) snapshot() ([]feedEvent, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]feedEvent(nil), s.events...), s.conns
}

func (s *subscriber) add(e feedEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	s.cursor = e.Cursor
}

func (s *subscriber) run(ctx context.Context) {
	for ctx.Err() == nil {
		s.mu.Lock()
		after := s.cursor
		s.conns++
		s.mu.Unlock()
		if s.ws {
			s.followWS(ctx, after)
		} else {
			s.followSSE(ctx, after)
		}
		select { // the server is down or restarting: try again shortly
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *subscriber) followSSE(ctx context.Context, after string) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.addr.Load().(string)+"/bap/v1/events/stream", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", after)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var e feedEvent
			if json.Unmarshal([]byte(data), &e) == nil {
				s.add(e)
			}
		}
	}
}

func (s *subscriber) followWS(ctx context.Context, after string) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, _, err := websocket.Dial(dctx, "ws://"+s.addr.Load().(string)+"/bap/v1/events/stream?after="+after, nil)
	cancel()
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	for {
		_, raw, err := c.Read(ctx)
		if err != nil {
			return
		}
		var e feedEvent
		if json.Unmarshal(raw, &e) == nil {
			s.add(e)
		}
	}
}

// TestStreamsLoseAndRepeatNothingAcrossKill kills `bap serve` with SIGKILL in the middle of a
// burst of commands, restarts it, and checks that a resuming SSE subscriber and a resuming
// WebSocket subscriber (and the Go SDK's Subscribe iterator) each received every committed event exactly once, in feed order (so in seq
// order per task), the same sequence a fresh reader of the whole feed sees.
func TestStreamsLoseAndRepeatNothingAcrossKill(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	r := start(t, bin, dir)
	var addr atomic.Value
	addr.Store(r.listen)
	origin := "c1.0.0.0" // the start of the feed: both subscribers read everything

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subs := []*subscriber{{name: "sse", addr: &addr, cursor: origin}, {name: "ws", addr: &addr, ws: true, cursor: origin}}
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	// A third subscriber: the Go SDK's resuming iterator, over the Unix socket (whose path, unlike
	// the TCP port, survives the restart).
	sdk := &subscriber{name: "sdk-go"}
	subs = append(subs, sdk)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := bapsdk.NewClient("", bapsdk.WithUnixSocket(r.socket))
		for ev, err := range c.SubscribeAll(ctx, origin) {
			if err != nil {
				return
			}
			sdk.add(feedEvent{ID: ev.EventId, TaskID: ev.TaskId, Seq: int64(ev.Seq), Cursor: *ev.Cursor})
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	// The burst: writers create and cancel tasks until the server dies under them.
	var confirmed sync.Map // task ids whose create_task answered 201
	var stop atomic.Bool
	var writers sync.WaitGroup
	var created atomic.Int64
	for w := 0; w < 6; w++ {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for i := 0; !stop.Load(); i++ {
				status, body := tryCreate(r.listen, fmt.Sprintf("burst-%d-%d", w, i))
				if status != 201 {
					continue
				}
				id := body["task"].(map[string]any)["task_id"].(string)
				confirmed.Store(id, true)
				created.Add(1)
				tryCancel(r.listen, id)
			}
		}()
	}
	waitfor.True(t, 2*time.Minute, "the burst is well under way", func() bool { return created.Load() >= 60 })
	_ = r.stop(t, syscall.SIGKILL)
	stop.Store(true)
	writers.Wait()

	r = start(t, bin, dir)
	addr.Store(r.listen)
	status, body := tryCreate(r.listen, "after-restart")
	if status != 201 {
		t.Fatalf("create_task after restart: %d %v", status, body)
	}
	final := body["task"].(map[string]any)["task_id"].(string)
	confirmed.Store(final, true)

	// The truth: a fresh reader of the whole feed, up to the final task's receipt (seq 4).
	truth := &subscriber{name: "truth", addr: &addr, cursor: origin}
	waitFor(t, "the fresh reader", truth, final, func() { go truth.run(ctx) })
	for _, s := range subs {
		waitFor(t, s.name, s, final, nil)
	}
	want, _ := truth.snapshot()
	want = upTo(want, final)
	confirmed.Range(func(k, _ any) bool {
		if !containsTask(want, k.(string)) {
			t.Errorf("task %s answered 201 but none of its events is in the feed", k)
		}
		return true
	})
	perTask := map[string]int64{}
	for _, e := range want {
		if e.Seq != perTask[e.TaskID]+1 {
			t.Fatalf("feed: task %s seq %d after %d", e.TaskID, e.Seq, perTask[e.TaskID])
		}
		perTask[e.TaskID] = e.Seq
	}
	for _, s := range subs {
		got, conns := s.snapshot()
		got = upTo(got, final)
		if conns < 2 && s.name != "sdk-go" { // the SDK reconnects inside its iterator
			t.Errorf("%s connected %d times; the kill should have made it reconnect", s.name, conns)
		}
		if len(got) != len(want) {
			t.Errorf("%s received %d events, the feed holds %d", s.name, len(got), len(want))
		}
		for i := range min(len(got), len(want)) {
			if got[i].ID != want[i].ID {
				t.Fatalf("%s: event %d is %s (task %s seq %d), want %s (task %s seq %d)", s.name, i,
					got[i].ID, got[i].TaskID, got[i].Seq, want[i].ID, want[i].TaskID, want[i].Seq)
			}
		}
	}
	t.Logf("%d events of %d tasks; each subscriber got all of them once, in order", len(want), len(perTask))
}

func waitFor(t *testing.T, name string, s *subscriber, task string, begin func()) {
	t.Helper()
	if begin != nil {
		begin()
	}
	waitfor.Until(t, 60*time.Second, name+" receives the final task's events", func() (bool, string) {
		evs, _ := s.snapshot()
		for _, e := range evs {
			if e.TaskID == task && e.Seq == 4 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs))
	})
}

func upTo(evs []feedEvent, task string) []feedEvent {
	for i, e := range evs {
		if e.TaskID == task && e.Seq == 4 {
			return evs[:i+1]
		}
	}
	return evs
}

func containsTask(evs []feedEvent, task string) bool {
	for _, e := range evs {
		if e.TaskID == task {
			return true
		}
	}
	return false
}

func tryCreate(listen, key string) (int, map[string]any) {
	return post(listen, "/bap/v1/tasks", key, `{"goal":"burst","policy":{"allowed_origins":["https://shop.example.com"]}}`)
}

func tryCancel(listen, id string) { post(listen, "/bap/v1/tasks/"+id+"/cancel", "cancel-"+id, `{}`) }

func post(listen, path, key, body string) (int, map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+listen+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m
}

// TestStreamsSpanNodesOnOneDatabase runs two `bap serve` processes on one database (the second
// uses the first one's embedded cluster through BAP_DATABASE_URL): a subscriber on either node
// sees the events committed on both, in the same feed order.
func TestStreamsSpanNodesOnOneDatabase(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dirA := dataDir(t)
	a := start(t, bin, dirA)
	pidfile, err := os.ReadFile(filepath.Join(dirA, "pgdata", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(pidfile), "\n")
	if len(lines) < 5 {
		t.Fatalf("postmaster.pid: %q", pidfile)
	}
	url := fmt.Sprintf("postgres://bap@/bap?host=%s&port=%s", strings.TrimSpace(lines[4]), strings.TrimSpace(lines[3]))
	b := start(t, bin, dataDir(t), "BAP_DATABASE_URL="+url, "BAP_MASTER_KEY_FILE="+filepath.Join(dirA, "master.key")) // one key per database (ADR 0015)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var addrA, addrB atomic.Value
	addrA.Store(a.listen)
	addrB.Store(b.listen)
	subs := []*subscriber{{name: "on node A", addr: &addrA, cursor: "c1.0.0.0"}, {name: "on node B", addr: &addrB, ws: true, cursor: "c1.0.0.0"}}
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Add(1)
		go func() { defer wg.Done(); s.run(ctx) }()
	}
	defer func() { cancel(); wg.Wait() }()

	var last string
	for i := 0; i < 5; i++ {
		for _, n := range []*running{a, b} {
			status, body := tryCreate(n.listen, fmt.Sprintf("node-%s-%d", n.listen, i))
			if status != 201 {
				t.Fatalf("create_task on %s: %d %v", n.listen, status, body)
			}
			last = body["task"].(map[string]any)["task_id"].(string)
		}
	}
	for _, s := range subs {
		waitFor(t, s.name, s, last, nil)
	}
	evA, _ := subs[0].snapshot()
	evB, _ := subs[1].snapshot()
	evA, evB = upTo(evA, last), upTo(evB, last)
	if len(evA) != 40 || len(evB) != 40 {
		t.Fatalf("node A's subscriber got %d events, node B's %d; want 40 each", len(evA), len(evB))
	}
	for i := range evA {
		if evA[i].ID != evB[i].ID {
			t.Fatalf("event %d: %s on node A, %s on node B; the feed order must be the same everywhere", i, evA[i].ID, evB[i].ID)
		}
	}
}

// TestPythonSDKFollowsARealServer runs the Python SDK's resuming generator (sdk-py, stdlib only)
// against `bap serve`: a task's history, then its live events, in seq order.
func TestPythonSDKFollowsARealServer(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 not installed (scripts/install-deps.sh installs it)")
	}
	bin := buildBinary(t)
	r := start(t, bin, dataDir(t))
	status, body := tryCreate(r.listen, "py-sdk")
	if status != 201 {
		t.Fatalf("create_task: %d %v", status, body)
	}
	id := body["task"].(map[string]any)["task_id"].(string)
	script := `
import sys, urllib.request
sys.path.insert(0, sys.argv[1])
import bap
c = bap.Client("http://" + sys.argv[2])
seqs = []
for ev in c.subscribe(sys.argv[3], after=1):
    seqs.append((ev["seq"], ev["type"]))
    if ev["seq"] == 4:
        req = urllib.request.Request("http://" + sys.argv[2] + "/bap/v1/tasks/" + sys.argv[3] + "/cancel", data=b"{}",
            headers={"Content-Type": "application/json", "Idempotency-Key": "py-cancel"}, method="POST")
        urllib.request.urlopen(req).read()
    if ev["seq"] == 7:
        break
print(seqs)
`
	root, _ := filepath.Abs(filepath.Join("..", "..", "..", "sdk-py"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", script, root, r.listen, id).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	want := "[(2, 'command.recorded'), (3, 'task.state_changed'), (4, 'receipt.issued'), (5, 'command.recorded'), (6, 'task.state_changed'), (7, 'receipt.issued')]"
	if strings.TrimSpace(string(out)) != want {
		t.Fatalf("python saw %s\nwant %s", out, want)
	}
}
