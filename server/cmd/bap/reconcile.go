package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/user"

	"github.com/originweave/bap/server/internal/daemon"
)

// reconcileCommand runs `bap reconcile list [--all]`,
// `bap reconcile resolve ID --outcome applied|no_side_effect --note TEXT` and
// `bap reconcile correct ID --outcome applied|no_side_effect --note TEXT`: an operator settles a
// side-effecting command that a crash interrupted, or corrects that finding (a new resolution that
// supersedes the current one; the command still never runs again).
func reconcileCommand(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger, stderr io.Writer) error {
	const usage = "usage: bap reconcile list [--all] | bap reconcile resolve ID --outcome applied|no_side_effect --note TEXT | " +
		"bap reconcile correct ID --outcome applied|no_side_effect --note TEXT"
	if len(args) == 0 {
		return errors.New(usage)
	}
	cfg := daemon.Config{Logger: logger}
	fs := flag.NewFlagSet("bap reconcile "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	all := fs.Bool("all", false, "list resolved reconciliations too")
	outcome := fs.String("outcome", "", "applied (the effect happened) or no_side_effect (it did not)")
	note := fs.String("note", "", "what the operator found (kept with the reconciliation)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	open := func() (*daemon.Database, error) { return daemon.OpenAdminDatabase(ctx, cfg) }
	switch args[0] {
	case "list":
		if fs.NArg() != 0 {
			return errors.New(usage)
		}
		db, err := open()
		if err != nil {
			return err
		}
		defer db.Close(context.WithoutCancel(ctx))
		svc, err := db.OperatorService(logger)
		if err != nil {
			return err
		}
		recs, err := svc.ListReconciliations(ctx, *all)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		for _, r := range recs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	case "resolve", "correct":
		if fs.NArg() != 1 || *outcome == "" || *note == "" {
			return errors.New(usage)
		}
		db, err := open()
		if err != nil {
			return err
		}
		defer db.Close(context.WithoutCancel(ctx))
		svc, err := db.OperatorService(logger)
		if err != nil {
			return err
		}
		settle := svc.ResolveReconciliation
		if args[0] == "correct" {
			settle = svc.CorrectReconciliation
		}
		rec, err := settle(ctx, "operator:"+operatorName(), fs.Arg(0), *outcome, *note)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(rec)
	default:
		return fmt.Errorf("bap reconcile: unknown subcommand %q (list, resolve or correct)", args[0])
	}
}

// operatorName names the person running the CLI in the decision they record.
func operatorName() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "local"
}
