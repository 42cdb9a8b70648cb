package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
)

// EventStreams opens event streams; app.Streams implements it. A returned stream is already
// registered for live events, so nothing committed after Open is missed.
type EventStreams interface {
	// OpenTaskStream subscribes to one task's events with seq > after.
	OpenTaskStream(ctx context.Context, actor app.Actor, taskID string, after int64) (*app.Stream, error)
	// OpenAllStream subscribes to every event of the actor's tenant after cursor (nil: from now).
	OpenAllStream(ctx context.Context, actor app.Actor, cursor *app.FeedPosition) (*app.Stream, error)
}

// streamOptions is the event-stream part of the server.
type streamOptions struct {
	streams   EventStreams
	heartbeat time.Duration
	// writeTimeout bounds one write to a subscriber; a subscriber that does not read for that
	// long is dropped (it resumes from its cursor).
	writeTimeout time.Duration
}

func newStreamOptions(o Options) streamOptions {
	so := streamOptions{streams: o.Streams, heartbeat: o.StreamHeartbeat, writeTimeout: 10 * time.Second}
	if so.heartbeat <= 0 {
		so.heartbeat = 15 * time.Second
	}
	return so
}

// StreamTaskEvents implements apigen.ServerInterface.
func (s *server) StreamTaskEvents(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, params apigen.StreamTaskEventsParams) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	if s.stream.streams == nil {
		s.streamsUnavailable(w, r, req, taskID)
		return
	}
	after := int64(0)
	if params.After != nil {
		after = int64(*params.After)
	}
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		n, ok := parseLastSeq(h)
		if !ok {
			writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "Last-Event-ID must be the seq of the last event received"},
				Violation{Pointer: "/header/Last-Event-ID", Message: "must be a non-negative integer"})
			return
		}
		after = n
	}
	st, err := s.stream.streams.OpenTaskStream(r.Context(), req.principal.Actor, taskID, after)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.serveStream(w, r, st, false)
}

// parseLastSeq reads the Last-Event-ID of a task stream: a seq exactly as this server sends it
// as the SSE id (decimal digits, no sign, no leading zero).
func parseLastSeq(h string) (int64, bool) {
	n, err := strconv.ParseInt(h, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != h {
		return 0, false
	}
	return n, true
}

// StreamEvents implements apigen.ServerInterface.
func (s *server) StreamEvents(w http.ResponseWriter, r *http.Request, params apigen.StreamEventsParams) {
	req, ok := s.begin(w, r)
	if !ok {
		return
	}
	if s.stream.streams == nil {
		s.streamsUnavailable(w, r, req, "")
		return
	}
	raw := ""
	if params.After != nil {
		raw = *params.After
	}
	if h := r.Header.Get("Last-Event-ID"); h != "" {
		raw = h
	}
	var cursor *app.FeedPosition
	if raw != "" {
		p, err := app.ParseCursor(raw)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		cursor = &p
	}
	st, err := s.stream.streams.OpenAllStream(r.Context(), req.principal.Actor, cursor)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.serveStream(w, r, st, cursor == nil)
}

func (s *server) streamsUnavailable(w http.ResponseWriter, r *http.Request, req *request, taskID string) {
	if taskID != "" {
		if _, err := s.svc.GetTask(r.Context(), req.principal.Actor, taskID); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeProblem(w, &app.Error{Code: app.CodeNotImplemented, Detail: "event streams are not enabled on this server; page list_task_events instead"})
}

// wantsWebSocket reports a WebSocket upgrade request.
func wantsWebSocket(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		if strings.EqualFold(strings.TrimSpace(v), "websocket") {
			return true
		}
	}
	return false
}

// serveStream answers an accepted stream as WebSocket or SSE; announceStart sends the start cursor
// first (an all-tasks stream opened without one).
func (s *server) serveStream(w http.ResponseWriter, r *http.Request, st *app.Stream, announceStart bool) {
	defer st.Close()
	all := r.PathValue("task_id") == ""
	// The server's ReadTimeout must not end a long-lived stream; the write deadline is set per write.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	if wantsWebSocket(r) {
		s.serveWebSocket(w, r, st, all)
		return
	}
	s.serveSSE(w, r, rc, st, all, announceStart)
}

// frame encodes one event as the wire Event JSON and its cursor.
func frame(fe app.FeedEvent, all bool) (id string, body []byte, err error) {
	ev := toEvent(&fe.Event)
	if all {
		c := fe.Pos.Cursor()
		ev.Cursor = &c
		id = c
	} else {
		id = strconv.FormatInt(fe.Seq, 10)
	}
	body, err = json.Marshal(ev)
	return id, body, err
}

// closeReason is the reason given to a subscriber whose stream the server ended.
func closeReason(err error) (code string, text string) {
	switch {
	case errors.Is(err, app.ErrSubscriberTooSlow):
		return "slow_consumer", "the subscriber did not keep up; reconnect with the last cursor to resume"
	case errors.Is(err, app.ErrFeedClosed):
		return "server_shutdown", "the server is shutting down; reconnect with the last cursor to resume"
	default:
		return "", ""
	}
}

func (s *server) serveSSE(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, st *app.Stream, all, announceStart bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	var mu sync.Mutex
	write := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		_ = rc.SetWriteDeadline(time.Now().Add(s.stream.writeTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	// writeEvent holds back the flush while more events are already waiting (one syscall for a
	// burst instead of one per event); the last event of a burst is flushed at once.
	writeEvent := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		_ = rc.SetWriteDeadline(time.Now().Add(s.stream.writeTimeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		if st.Pending() > 0 {
			return nil
		}
		return rc.Flush()
	}
	hello := []byte("retry: 1000\n")
	if announceStart {
		hello = append(hello, "id: "+st.StartPosition().Cursor()+"\n"...)
	}
	hello = append(hello, ": stream open\n\n"...)
	if err := write(hello); err != nil {
		return
	}

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// The heartbeat must be gone before the handler returns: the ResponseWriter is dead after that.
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		t := time.NewTicker(s.stream.heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ctx.Err() != nil || write([]byte(": keep-alive\n\n")) != nil {
					cancel()
					return
				}
			}
		}
	}()

	var buf bytes.Buffer
	err := st.Run(ctx, func(fe app.FeedEvent) error {
		id, body, err := frame(fe, all)
		if err != nil {
			return err
		}
		buf.Reset()
		buf.WriteString("id: ")
		buf.WriteString(id)
		buf.WriteString("\nevent: ")
		buf.WriteString(fe.Type)
		buf.WriteString("\ndata: ")
		buf.Write(body)
		buf.WriteString("\n\n")
		return writeEvent(buf.Bytes())
	})
	cancel()
	<-beat
	if code, text := closeReason(err); code != "" {
		_ = write([]byte(": closed " + code + ": " + text + "\n\n"))
	}
}

func (s *server) serveWebSocket(w http.ResponseWriter, r *http.Request, st *app.Stream, all bool) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the request
	}
	defer func() { _ = c.CloseNow() }()
	// The client never sends data: CloseRead answers pings and closes, and ends ctx on disconnect.
	ctx := c.CloseRead(context.WithoutCancel(r.Context()))
	ctx, cancel := context.WithCancel(ctx)
	beat := make(chan struct{})
	defer func() { cancel(); <-beat }()
	go func() {
		defer close(beat)
		t := time.NewTicker(s.stream.heartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				pctx, pcancel := context.WithTimeout(ctx, s.stream.writeTimeout)
				err := c.Ping(pctx)
				pcancel()
				if err != nil {
					cancel()
					return
				}
			}
		}
	}()
	last := ""
	err = st.Run(ctx, func(fe app.FeedEvent) error {
		id, body, err := frame(fe, all)
		if err != nil {
			return err
		}
		wctx, wcancel := context.WithTimeout(ctx, s.stream.writeTimeout)
		defer wcancel()
		if err := c.Write(wctx, websocket.MessageText, body); err != nil {
			return err
		}
		last = id
		return nil
	})
	code, _ := closeReason(err)
	switch code {
	case "slow_consumer":
		_ = c.Close(websocket.StatusTryAgainLater, closeText(code, last))
	case "server_shutdown":
		_ = c.Close(websocket.StatusGoingAway, closeText(code, last))
	default:
		if ctx.Err() == nil {
			_ = c.Close(websocket.StatusInternalError, "stream ended")
		}
	}
}

// closeText is a WebSocket close reason (at most 123 bytes) naming the resume cursor.
func closeText(code, last string) string {
	t := code
	if last != "" {
		t += "; resume after=" + last
	}
	if len(t) > 123 {
		t = code
	}
	return t
}
