package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/task"
)

const correctUsage = "usage: bap correct outcome TASK_ID --state succeeded|failed [--verification unverified|unmet] --reason TEXT [--tenant T] | " +
	"bap correct decision APPROVAL_ID --reason TEXT [--tenant T]"

// correctCommand runs `bap correct outcome|decision`: an operator's correction of how a task ended
// or of an approver's decision record. Each is a new record that supersedes the current one
// (migration 0013); nothing is updated in place, and nothing that happened is undone. It prints
// the task or approval as it now stands, with its chain, as one JSON line.
func correctCommand(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger, stderr io.Writer) error {
	if len(args) < 2 {
		return errors.New(correctUsage)
	}
	cfg := daemon.Config{Logger: logger}
	fs := flag.NewFlagSet("bap correct "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	tenant := fs.String("tenant", "local", "the tenant of the task or approval")
	state := fs.String("state", "", "outcome: succeeded or failed")
	verification := fs.String("verification", "", "outcome: unverified or unmet (only the runtime verifies)")
	reason := fs.String("reason", "", "why (kept with the correction)")
	id := args[1]
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	if fs.NArg() != 0 || *reason == "" {
		return errors.New(correctUsage)
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
	operator := app.Actor{Tenant: *tenant, Subject: "operator:" + operatorName()}
	var out any
	switch args[0] {
	case "outcome":
		out, err = svc.CorrectTaskOutcome(ctx, operator, id, app.OutcomeCorrection{
			State: task.State(*state), Verification: *verification, Reason: *reason})
	case "decision":
		out, err = svc.CorrectApprovalDecision(ctx, operator, id, *reason)
	default:
		return fmt.Errorf("bap correct: unknown subcommand %q (outcome or decision)", args[0])
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(out)
}
