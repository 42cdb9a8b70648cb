package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/redact"
)

// secretCommand runs `bap secret put|list|rotate|delete`: a tenant's operator stores a value
// (read from standard input, never the command line) with the origins it may be typed into;
// agents name it by reference and never see it. Nothing prints a value.
func secretCommand(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, logger *slog.Logger, stderr io.Writer) error {
	const usage = "usage: bap secret put --tenant T --name N --origin https://host… [--note TEXT] < value | bap secret list --tenant T [--origin URL…] | bap secret rotate --tenant T SECRET_ID < value | bap secret delete --tenant T SECRET_ID"
	if len(args) == 0 {
		return errors.New(usage)
	}
	cfg := daemon.Config{Logger: logger}
	fs := flag.NewFlagSet("bap secret "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	masterKeyFlag(fs, &cfg)
	tenant := fs.String("tenant", "local", "the tenant the secret belongs to")
	name := fs.String("name", "", "the secret's name (put)")
	note := fs.String("note", "", "an optional note (put)")
	var origins repeated
	fs.Var(&origins, "origin", "an origin the value may be typed into, https://host[:port] (repeatable; put, or a filter of list)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	actor := app.Actor{Tenant: *tenant, Subject: "operator:" + operatorName()}
	open := func() (*daemon.Database, *app.Service, error) {
		db, err := daemon.OpenAdminDatabase(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		svc, err := db.KeyedOperatorService(ctx, cfg, logger)
		if err != nil {
			db.Close(context.WithoutCancel(ctx))
			return nil, nil, err
		}
		return db, svc, nil
	}
	enc := json.NewEncoder(stdout)
	switch args[0] {
	case "put", "rotate":
		if (args[0] == "put") != (fs.NArg() == 0) {
			return errors.New(usage)
		}
		value, err := readSecretValue(stdin)
		if err != nil {
			return err
		}
		redact.Global.Add(string(value)) // never in a log line, whatever fails below
		db, svc, err := open()
		if err != nil {
			return err
		}
		defer db.Close(context.WithoutCancel(ctx))
		var info *app.SecretInfo
		if args[0] == "put" {
			info, err = svc.PutSecret(ctx, actor, app.SecretInput{Name: *name, Origins: origins, Note: *note, Value: value})
		} else {
			info, err = svc.RotateSecret(ctx, actor, fs.Arg(0), value)
		}
		if err != nil {
			return err
		}
		return enc.Encode(info)
	case "list":
		db, svc, err := open()
		if err != nil {
			return err
		}
		defer db.Close(context.WithoutCancel(ctx))
		var filter []string
		for _, o := range origins {
			n, err := app.NormalizeOrigin(o)
			if err != nil {
				return err
			}
			filter = append(filter, n)
		}
		list, err := svc.ListSecrets(ctx, actor, filter)
		if err != nil {
			return err
		}
		for _, s := range list {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
		return nil
	case "delete":
		if fs.NArg() != 1 {
			return errors.New(usage)
		}
		db, svc, err := open()
		if err != nil {
			return err
		}
		defer db.Close(context.WithoutCancel(ctx))
		if err := svc.DeleteSecret(ctx, actor, fs.Arg(0)); err != nil {
			return err
		}
		return enc.Encode(map[string]any{"secret_id": fs.Arg(0), "deleted": true})
	default:
		return fmt.Errorf("bap secret: unknown subcommand %q (put, list, rotate or delete)", args[0])
	}
}

// readSecretValue reads the value from standard input: all of it, without one trailing newline
// (what `echo` or a heredoc adds).
func readSecretValue(stdin io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(stdin, 4097))
	if err != nil {
		return nil, fmt.Errorf("reading the value from standard input: %w", err)
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r")
	if v == "" {
		return nil, errors.New("bap secret: the value is read from standard input, and it was empty")
	}
	return []byte(v), nil
}
