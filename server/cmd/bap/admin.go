package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/originweave/bap/server/internal/auth"
	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/redact"
)

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// agentScopes is every capability but bap:approvals.resolve and bap:secrets.write: what `bap
// client create` grants without --scopes. A client gets those two only when --scopes names them.
func agentScopes() []string {
	var out []string
	for _, s := range auth.Scopes {
		if s != "bap:approvals.resolve" && s != "bap:secrets.write" {
			out = append(out, s)
		}
	}
	return out
}

// clientCommand runs `bap client create|revoke`.
func clientCommand(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: bap client create --tenant T --name N [--scopes \"S …\"] [--grant client_credentials|authorization_code] [--redirect-uri URI]… | bap client revoke CLIENT_ID")
	}
	cfg := daemon.Config{Logger: logger}
	switch args[0] {
	case "create":
		fs := flag.NewFlagSet("bap client create", flag.ContinueOnError)
		fs.SetOutput(stderr)
		baseFlags(fs, &cfg)
		var spec auth.ClientSpec
		var scopes string
		var redirects repeated
		fs.StringVar(&spec.Tenant, "tenant", "", "tenant the client belongs to (created if new)")
		fs.StringVar(&spec.Name, "name", "", "a name people recognise on the consent page")
		fs.StringVar(&scopes, "scopes", "", "space-separated capabilities, e.g. \"bap:tasks.read bap:tasks.write\" (default: every capability but bap:approvals.resolve and bap:secrets.write, which a client gets only when named here)")
		fs.StringVar(&spec.Grant, "grant", "client_credentials", "client_credentials (a workload, gets a secret) or authorization_code (people, PKCE, public)")
		fs.Var(&redirects, "redirect-uri", "redirect URI of an authorization_code client (repeatable)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("bap client create: unexpected argument %q", fs.Arg(0))
		}
		spec.Scopes = strings.Fields(scopes)
		if len(spec.Scopes) == 0 {
			spec.Scopes = agentScopes() // an agent's: resolving approvals is an approver's, asked for by name
		}
		spec.RedirectURIs = redirects
		db, err := daemon.OpenAdminDatabase(ctx, cfg)
		if err != nil {
			return err
		}
		defer db.Close(context.WithoutCancel(ctx))
		nc, err := auth.CreateClient(ctx, db.Pool, spec)
		if err != nil {
			return err
		}
		redact.Global.Add(nc.Secret) // printed once on stdout; never in a log line
		return json.NewEncoder(stdout).Encode(nc)
	case "revoke":
		fs := flag.NewFlagSet("bap client revoke", flag.ContinueOnError)
		fs.SetOutput(stderr)
		baseFlags(fs, &cfg)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return errors.New("usage: bap client revoke [--data-dir DIR] CLIENT_ID")
		}
		db, err := daemon.OpenAdminDatabase(ctx, cfg)
		if err != nil {
			return err
		}
		defer db.Close(context.WithoutCancel(ctx))
		if err := auth.RevokeClient(ctx, db.Pool, fs.Arg(0)); err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"client_id": fs.Arg(0), "revoked": true})
	default:
		return fmt.Errorf("bap client: unknown subcommand %q (create or revoke)", args[0])
	}
}

// userCommand runs `bap user create`.
func userCommand(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, logger *slog.Logger, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return errors.New("usage: bap user create --tenant T --name N --password-stdin")
	}
	cfg := daemon.Config{Logger: logger}
	fs := flag.NewFlagSet("bap user create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	var tenant, name string
	var fromStdin bool
	fs.StringVar(&tenant, "tenant", "", "tenant the person belongs to (created if new)")
	fs.StringVar(&name, "name", "", "the name the person signs in with")
	fs.BoolVar(&fromStdin, "password-stdin", false, "read the password from the first line of standard input (required)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if !fromStdin {
		return errors.New("bap user create: --password-stdin is required (a password never goes on the command line)")
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading the password: %w", err)
	}
	password := strings.TrimRight(line, "\r\n")
	redact.Global.Add(password)
	db, err := daemon.OpenAdminDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close(context.WithoutCancel(ctx))
	id, err := auth.CreatePerson(ctx, db.Pool, tenant, name, password)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(map[string]string{"user_id": id, "tenant": tenant, "name": name})
}
