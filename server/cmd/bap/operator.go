package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bap "github.com/originweave/bap/sdk-go"
	"github.com/originweave/bap/server/internal/daemon"
)

// The operator's terminal commands beside `bap approvals`: `bap console` (a one-time login URL for
// the console) and `bap tasks list|show|events`. Like `bap approvals`, they talk to the running
// server over its Unix socket (mode 0600), so they are the operator.

const consoleUsage = "usage: bap console [--socket PATH] [--data-dir DIR]"

const tasksUsage = "usage: bap tasks list [--state S] [--origin interactive|delegated|autonomous] [--since DURATION] [--limit N] | " +
	"bap tasks show ID | bap tasks events ID [--after SEQ] [--follow]   (each takes [--socket PATH] [--data-dir DIR])"

// socketFlags adds --data-dir and --socket and returns the socket path they name.
func socketFlags(fs *flag.FlagSet) func() string {
	dataDir := fs.String("data-dir", daemon.DefaultDataDir(), "data directory of the local server (its socket is <data-dir>/bap.sock)")
	socket := fs.String("socket", "", "the local server's Unix socket (default <data-dir>/bap.sock)")
	return func() string {
		if *socket != "" {
			return *socket
		}
		return filepath.Join(*dataDir, "bap.sock")
	}
}

// parseInterleaved parses flags that may come before or after the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var pos []string
	for fs.NArg() > 0 {
		pos = append(pos, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return nil, err
		}
	}
	return pos, nil
}

// socketHTTP is an HTTP client that dials the server's Unix socket (no timeout: streams).
func socketHTTP(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
}

// socketCall sends one request over the socket and returns its JSON answer; a refusal is the
// server's problem (*bap.Problem), a server that does not answer is explained by socketError.
func socketCall(ctx context.Context, socket, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := socketHTTP(socket).Do(req)
	if err != nil {
		return nil, socketError(socket, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, problemOf(resp, raw)
	}
	return raw, nil
}

// problemOf is the server's refusal resp, whose body is raw, as a *bap.Problem.
func problemOf(resp *http.Response, raw []byte) *bap.Problem {
	p := &bap.Problem{Status: resp.StatusCode, Body: raw, Header: resp.Header}
	_ = json.Unmarshal(raw, p)
	return p
}

// consoleCommand runs `bap console`: it prints a one-time login URL of the console (valid for 5
// minutes, once) that opens an operator session in the browser.
func consoleCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bap console", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := socketFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return errors.New(consoleUsage)
	}
	raw, err := socketCall(ctx, socket(), http.MethodPost, "/console/login-links", []byte("{}"))
	if err != nil {
		return err
	}
	var link struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(raw, &link); err != nil || link.URL == "" {
		return fmt.Errorf("bap console: unexpected answer %q", raw)
	}
	fmt.Fprintf(stderr, "Open this URL in your browser to sign in to the BAP console as the operator (it works once, until %s):\n",
		link.ExpiresAt.Local().Format(time.Kitchen))
	_, err = fmt.Fprintln(stdout, link.URL)
	return err
}

// tasksCommand runs `bap tasks list|show|events`, printing JSON lines (one task or event each)
// or get_task's answer.
func tasksCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(tasksUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("bap tasks "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := socketFlags(fs)
	state := fs.String("state", "", "list: only tasks in this state")
	origin := fs.String("origin", "", "list: only interactive, delegated or autonomous tasks")
	since := fs.Duration("since", 0, "list: only tasks created within this long (e.g. 24h)")
	limit := fs.Int("limit", 100, "list: at most this many (1-500)")
	after := fs.Int64("after", 0, "events: only events with a seq after this")
	follow := fs.Bool("follow", false, "events: keep printing events as they happen (the task's event stream) until interrupted")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if len(pos) != 0 {
			return errors.New(tasksUsage)
		}
		q := url.Values{"limit": {strconv.Itoa(*limit)}}
		if *state != "" {
			q.Set("state", *state)
		}
		if *origin != "" {
			q.Set("origin", *origin)
		}
		if *since > 0 {
			q.Set("created_after", time.Now().Add(-*since).UTC().Format(time.RFC3339Nano))
		}
		raw, err := socketCall(ctx, socket(), http.MethodGet, "/console/api/tasks?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		var res struct {
			Tasks []json.RawMessage `json:"tasks"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return fmt.Errorf("reading the task list: %w", err)
		}
		for _, t := range res.Tasks {
			if _, err := fmt.Fprintf(stdout, "%s\n", t); err != nil {
				return err
			}
		}
		return nil
	case "show":
		if len(pos) != 1 || !strings.HasPrefix(pos[0], "tsk_") {
			return errors.New(tasksUsage)
		}
		raw, err := socketCall(ctx, socket(), http.MethodGet, "/bap/v1/tasks/"+url.PathEscape(pos[0]), nil)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", bytes.TrimSpace(raw))
		return err
	case "events":
		if len(pos) != 1 || !strings.HasPrefix(pos[0], "tsk_") {
			return errors.New(tasksUsage)
		}
		if *follow {
			return followEvents(ctx, socket(), pos[0], *after, stdout)
		}
		return listEvents(ctx, socket(), pos[0], *after, stdout)
	default:
		return fmt.Errorf("bap tasks: unknown subcommand %q\n%s", sub, tasksUsage)
	}
}

// listEvents prints the task's history after seq, page by page (list_task_events).
func listEvents(ctx context.Context, socket, taskID string, after int64, stdout io.Writer) error {
	for {
		raw, err := socketCall(ctx, socket, http.MethodGet, fmt.Sprintf("/bap/v1/tasks/%s/events?after=%d&limit=1000", url.PathEscape(taskID), after), nil)
		if err != nil {
			return err
		}
		var page struct {
			Events []json.RawMessage `json:"events"`
			Next   *int64            `json:"next_after"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return fmt.Errorf("reading events: %w", err)
		}
		for _, e := range page.Events {
			if _, err := fmt.Fprintf(stdout, "%s\n", e); err != nil {
				return err
			}
		}
		if page.Next == nil || len(page.Events) == 0 {
			return nil
		}
		after = *page.Next
	}
}

// followEvents prints the task's events after seq from its SSE stream, resuming after the last
// seq printed when the connection drops, until ctx ends (Ctrl-C).
func followEvents(ctx context.Context, socket, taskID string, after int64, stdout io.Writer) error {
	for {
		err := streamOnce(ctx, socket, taskID, &after, stdout)
		if ctx.Err() != nil {
			return nil
		}
		var p *bap.Problem
		if errors.As(err, &p) {
			return err // refused (unknown task, …): retrying will not help
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func streamOnce(ctx context.Context, socket, taskID string, after *int64, stdout io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://localhost/bap/v1/tasks/%s/events/stream?after=%d", url.PathEscape(taskID), *after), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := socketHTTP(socket).Do(req)
	if err != nil {
		return socketError(socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		p := &bap.Problem{Status: resp.StatusCode, Body: raw, Header: resp.Header}
		_ = json.Unmarshal(raw, p)
		return p
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case line == "" && len(data) > 0:
			ev := strings.Join(data, "\n")
			data = nil
			var e struct {
				Seq int64 `json:"seq"`
			}
			if json.Unmarshal([]byte(ev), &e) == nil && e.Seq > *after {
				*after = e.Seq
			}
			if _, err := fmt.Fprintln(stdout, ev); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}
