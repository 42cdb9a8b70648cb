package bap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// sseFake answers each stream connection with the next scripted handler and records the
// Last-Event-ID each connection sent.
type sseFake struct {
	mu      sync.Mutex
	lastIDs []string
	script  []func(w http.ResponseWriter)
}

func (f *sseFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.lastIDs = append(f.lastIDs, r.Header.Get("Last-Event-ID"))
	var h func(w http.ResponseWriter)
	if len(f.script) > 0 {
		h, f.script = f.script[0], f.script[1:]
	}
	f.mu.Unlock()
	if h == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h(w)
}

func sse(lines ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, l := range lines {
			io.WriteString(w, l)
		}
	}
}

func taskEvent(seq int) string {
	return fmt.Sprintf("id: %d\nevent: task.state_changed\ndata: {\"event_id\":\"evt_%d\",\"task_id\":\"tsk_a\",\"seq\":%d,\"type\":\"task.state_changed\",\"time\":\"2026-11-29T12:00:00Z\",\"data\":{}}\n\n", seq, seq, seq)
}

func TestSubscribeResumesWithLastSeqAndDropsRepeats(t *testing.T) {
	t.Parallel()
	f := &sseFake{script: []func(http.ResponseWriter){
		sse("retry: 1000\n: stream open\n\n", taskEvent(1), taskEvent(2)), // then the connection drops
		func(w http.ResponseWriter) { // a restarting server
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
			io.WriteString(w, `{"status":503,"code":"overloaded"}`)
		},
		sse(taskEvent(2), ": keep-alive\n\n", taskEvent(3), taskEvent(4)),
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := NewClient(srv.URL)
	c.backoff = func(int) time.Duration { return 0 }
	var got []int
	for ev, err := range c.Subscribe(context.Background(), "tsk_a", 0) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Seq)
		if ev.Seq == 4 {
			break
		}
	}
	if fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("yielded %v, want [1 2 3 4]", got)
	}
	if fmt.Sprint(f.lastIDs) != "[0 2 2]" {
		t.Fatalf("Last-Event-ID sent %v, want [0 2 2]", f.lastIDs)
	}
}

func TestSubscribeEndsOnAProblemReconnectingCannotFix(t *testing.T) {
	t.Parallel()
	f := &sseFake{script: []func(http.ResponseWriter){func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(404)
		io.WriteString(w, `{"status":404,"code":"not_found","detail":"no such task"}`)
	}}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	n := 0
	for _, err := range NewClient(srv.URL).Subscribe(context.Background(), "tsk_gone", 3) {
		n++
		var p *Problem
		if !errors.As(err, &p) || p.Code != ProblemCodeNotFound {
			t.Fatalf("got %v, want a not_found *Problem", err)
		}
	}
	if n != 1 || f.lastIDs[0] != "3" {
		t.Fatalf("%d yields, Last-Event-ID %q", n, f.lastIDs[0])
	}
}

func TestSubscribeAllKeepsTheCursorOfIdOnlyMessages(t *testing.T) {
	t.Parallel()
	ev := `id: c1.b.1.1` + "\nevent: task.created\ndata: {\"event_id\":\"evt_1\",\"task_id\":\"tsk_a\",\"seq\":1,\"type\":\"task.created\",\"time\":\"2026-11-29T12:00:00Z\",\"cursor\":\"c1.b.1.1\",\"data\":{}}\n\n"
	f := &sseFake{script: []func(http.ResponseWriter){
		sse("retry: 1000\nid: c1.a.0.0\n: stream open\n\n"), // drops before any event
		sse(ev),
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := NewClient(srv.URL)
	c.backoff = func(int) time.Duration { return 0 }
	for ev, err := range c.SubscribeAll(context.Background(), "") {
		if err != nil || ev.Cursor == nil || *ev.Cursor != "c1.b.1.1" {
			t.Fatalf("%v %v", ev, err)
		}
		break
	}
	if fmt.Sprint(f.lastIDs) != "[ c1.a.0.0]" {
		t.Fatalf("Last-Event-ID sent %q, want none then the announced start cursor", f.lastIDs)
	}
}

func TestSubscribeStopsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	defer close(block)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	for _, err := range NewClient(srv.URL).Subscribe(ctx, "tsk_a", 0) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	}
}
