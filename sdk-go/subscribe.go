package bap

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Subscribe follows one task's events with seq > after (0: from the first), over Server-Sent
// Events. The iterator resumes by itself: when the connection drops or the server restarts it
// reconnects with the last seq it yielded (Last-Event-ID), so every event is yielded exactly once
// and in seq order. It ends when the loop breaks, when ctx ends (yielding ctx's error), or on a
// problem a reconnect cannot fix (404, 401, 403, 400: yielded as *Problem). A Timeout on the
// client's http.Client also ends each connection; the iterator then simply reconnects.
//
//	for ev, err := range c.Subscribe(ctx, taskID, 0) {
//		if err != nil { return err }
//		fmt.Println(ev.Seq, ev.Type)
//	}
func (c *Client) Subscribe(ctx context.Context, taskID string, after int64) iter.Seq2[Event, error] {
	path := "/bap/v1/tasks/" + url.PathEscape(taskID) + "/events/stream"
	last := after
	return c.follow(ctx, "stream_task_events", path,
		func() string { return strconv.FormatInt(last, 10) },
		func(id string, ev *Event) bool {
			if ev == nil || int64(ev.Seq) <= last {
				return false // already yielded (a replay overlap): drop it
			}
			last = int64(ev.Seq)
			return true
		})
}

// SubscribeAll follows every event of every task the caller may see, after the opaque cursor
// (Event.Cursor of an earlier event; "" starts from now), with the same resuming behaviour as
// Subscribe. Events of one task come in seq order.
func (c *Client) SubscribeAll(ctx context.Context, cursor string) iter.Seq2[Event, error] {
	last := cursor
	return c.follow(ctx, "stream_events", "/bap/v1/events/stream",
		func() string { return last },
		func(id string, ev *Event) bool {
			if id == "" {
				return false
			}
			last = id
			return ev != nil
		})
}

// follow runs the reconnect loop of a subscription. accept is called with each SSE id and its
// event (nil for an id-only message) and says whether to yield it.
func (c *Client) follow(ctx context.Context, op, path string, cursor func() string, accept func(id string, ev *Event) bool) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		failures := 0
		for {
			stopped := false
			progressed := false
			err := c.streamOnce(ctx, op, path, cursor(), func(id string, ev *Event) bool {
				if !accept(id, ev) {
					return true
				}
				progressed = true
				if !yield(*ev, nil) {
					stopped = true
					return false
				}
				return true
			})
			if stopped {
				return
			}
			if ctx.Err() != nil {
				yield(Event{}, ctx.Err())
				return
			}
			wait := time.Duration(0)
			var p *Problem
			if errors.As(err, &p) {
				if p.Status != http.StatusTooManyRequests && p.Status < 500 {
					yield(Event{}, err)
					return
				}
				if d, ok := retryAfter(p.Header.Get("Retry-After"), time.Now()); ok {
					wait = d
				}
			}
			if progressed {
				failures = 0
			}
			failures++
			if wait == 0 {
				wait = c.backoff(failures)
			}
			if err := sleep(ctx, min(wait, c.maxWait)); err != nil {
				yield(Event{}, err)
				return
			}
		}
	}
}

// streamOnce holds one SSE connection and hands its messages to emit until the stream ends, emit
// returns false, or ctx ends. It returns why the connection ended.
func (c *Client) streamOnce(ctx context.Context, op, path, lastID string, emit func(id string, ev *Event) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+path, nil)
	if err != nil {
		return fmt.Errorf("bap: %s: %w", op, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if c.tokenSource != nil {
		tok, err := c.tokenSource(ctx)
		if err != nil {
			return fmt.Errorf("bap: %s: token: %w", op, err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("bap: %s: %w", op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return newProblem(resp.StatusCode, resp.Header, body)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var id, data string
	hasID, hasData := false, false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("bap: %s: the stream ended", op)
			}
			return fmt.Errorf("bap: %s: %w", op, err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" { // dispatch
			var ev *Event
			if hasData {
				ev = new(Event)
				if err := json.Unmarshal([]byte(data), ev); err != nil {
					return fmt.Errorf("bap: %s: decoding an event: %w", op, err)
				}
			}
			if (hasID || ev != nil) && !emit(id, ev) {
				return nil
			}
			id, data, hasID, hasData = "", "", false, false
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // comment: keep-alive or the server's closing reason
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id, hasID = value, true
		case "data":
			if hasData {
				data += "\n"
			}
			data += value
			hasData = true
		}
	}
}
