package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
)

const decisionsUsage = "usage: bap decisions list [--tenant T] [--task TASK_ID] [--limit N]"

// decisionsCommand runs `bap decisions list`: the operator's view of recorded authorization and
// policy decisions, newest first, one JSON line each with what it is bound to — actor, workload,
// tenant, session, task, purpose, operation, origin scope, data classification and approval state
// (migration 0014). It reads the database (BAP_DATABASE_URL or the embedded cluster of
// --data-dir), so only whoever operates the server can run it.
func decisionsCommand(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "list" {
		return errors.New(decisionsUsage)
	}
	cfg := daemon.Config{Logger: logger}
	fs := flag.NewFlagSet("bap decisions list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	tenant := fs.String("tenant", "", "only this tenant's decisions (default: every tenant)")
	taskID := fs.String("task", "", "only the decisions about this task")
	limit := fs.Int("limit", 100, "at most this many (1-1000)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New(decisionsUsage)
	}
	db, err := daemon.OpenAdminDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close(context.WithoutCancel(ctx))
	svc, err := db.OperatorService(logger)
	if err != nil {
		return err
	}
	ds, err := svc.ListDecisions(ctx, app.DecisionFilter{Tenant: *tenant, TaskID: *taskID, Limit: *limit})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	for _, d := range ds {
		if err := enc.Encode(d); err != nil {
			return err
		}
	}
	return nil
}
