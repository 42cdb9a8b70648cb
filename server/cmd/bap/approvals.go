package main

import (
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

	bap "github.com/originweave/bap/sdk-go"
	"github.com/originweave/bap/server/internal/daemon"
)

const approvalsUsage = "usage: bap approvals list [--state pending|approved|denied|cancelled|expired] | " +
	"bap approvals approve ID [--reason TEXT] | bap approvals deny ID [--reason TEXT]   " +
	"(each takes [--socket PATH] [--data-dir DIR])"

// approvalsCommand runs `bap approvals list|approve|deny`: the local operator's approvals, over the
// running server's Unix socket (mode 0600: whoever can open it is the operator). It answers one
// JSON line per approval (list) or the resolve_approval answer (approve, deny); a refusal is the
// server's problem document on stdout (for scripts), its summary on stderr and exit status 1.
func approvalsCommand(ctx context.Context, args []string, stdout io.Writer, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New(approvalsUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("bap approvals "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", daemon.DefaultDataDir(), "data directory of the local server (its socket is <data-dir>/bap.sock)")
	socket := fs.String("socket", "", "the local server's Unix socket (default <data-dir>/bap.sock)")
	state := fs.String("state", "pending", "list: which approvals (pending, approved, denied, cancelled, expired)")
	limit := fs.Int("limit", 100, "list: at most this many (1-1000)")
	reason := fs.String("reason", "", "approve, deny: why (kept with the decision)")
	key := fs.String("idempotency-key", "", "approve, deny: the request's Idempotency-Key (default: a new one; repeat it to retry safely)")
	// The approval id may come before or after the flags.
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	var pos []string
	for fs.NArg() > 0 {
		pos = append(pos, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return err
		}
	}
	path := *socket
	if path == "" {
		path = filepath.Join(*dataDir, "bap.sock")
	}
	c := bap.NewClient("", bap.WithUnixSocket(path), bap.WithUserAgent("bap-cli"))
	enc := json.NewEncoder(stdout)
	switch sub {
	case "list":
		if len(pos) != 0 {
			return errors.New(approvalsUsage)
		}
		res, err := listApprovals(ctx, path, *state, *limit)
		if err != nil {
			return socketError(path, err)
		}
		for _, a := range res.Approvals {
			if err := enc.Encode(a); err != nil {
				return err
			}
		}
		return nil
	case "approve", "deny":
		if len(pos) != 1 || !strings.HasPrefix(pos[0], "apr_") {
			return errors.New(approvalsUsage)
		}
		body := bap.ResolveApprovalRequest{Decision: bap.ApprovalDecision(sub)}
		if *reason != "" {
			body.Reason = reason
		}
		var opts []bap.CallOption
		if *key != "" {
			opts = append(opts, bap.WithIdempotencyKey(*key))
		}
		res, err := c.ResolveApproval(ctx, pos[0], body, opts...)
		var p *bap.Problem
		if errors.As(err, &p) && json.Valid(p.Body) {
			_, _ = fmt.Fprintf(stdout, "%s\n", bytes.TrimSpace(p.Body))
		}
		if err != nil {
			return socketError(path, err)
		}
		return enc.Encode(res)
	default:
		return fmt.Errorf("bap approvals: unknown subcommand %q\n%s", sub, approvalsUsage)
	}
}

// listApprovals calls list_approvals on the socket (the SDKs carry only the MCP catalog's
// operations, so this one GET is made here).
func listApprovals(ctx context.Context, socket, state string, limit int) (*bap.ListApprovalsResponse, error) {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	q := url.Values{"state": {state}, "limit": {strconv.Itoa(limit)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/bap/v1/approvals?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		p := &bap.Problem{Status: resp.StatusCode, Body: body, Header: resp.Header}
		_ = json.Unmarshal(body, p)
		return nil, p
	}
	out := new(bap.ListApprovalsResponse)
	if err := json.Unmarshal(body, out); err != nil {
		return nil, fmt.Errorf("reading list_approvals: %w", err)
	}
	return out, nil
}

// socketError explains a failed call: the server's problem as it is, or where the socket was
// looked for when no server answered there.
func socketError(path string, err error) error {
	var p *bap.Problem
	if errors.As(err, &p) {
		return err
	}
	return fmt.Errorf("no BAP server answers on %s (is `bap serve` running with this --data-dir or --socket?): %w", path, err)
}
