package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
)

const auditUsage = "usage: bap audit verify [--task TASK_ID] [--data-dir DIR] [--master-key-file FILE]"

// auditLine is what `bap audit verify` prints for one task.
type auditLine struct {
	TaskID        string      `json:"task_id"`
	Tenant        string      `json:"tenant_id"`
	Status        string      `json:"status"`
	EventsChecked int         `json:"events_checked"`
	HeadSeq       int64       `json:"head_seq"`
	Anchors       int         `json:"anchors"`
	BrokenAt      *brokenLine `json:"broken_at,omitempty"`
	HeadDigest    string      `json:"head_digest,omitempty"`
}

type brokenLine struct {
	Seq    int64  `json:"seq"`
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// errChainBroken makes `bap audit verify` exit non-zero once every task was checked.
var errChainBroken = errors.New("history chain broken")

// auditCommand runs `bap audit verify`: it recomputes the keyed hash chain over the history of one
// task or of every task in the database (BAP_DATABASE_URL or the embedded cluster of --data-dir)
// with the server key, which it opens with the master key file, and checks every anchor's
// signature. It prints one JSON line per task — status valid, or broken with the first seq that
// fails — and exits 1 when any chain is broken. Only whoever holds the master key can run it,
// whether or not the server is running.
func auditCommand(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "verify" {
		return errors.New(auditUsage)
	}
	cfg := daemon.Config{Logger: logger}
	fs := flag.NewFlagSet("bap audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	masterKeyFlag(fs, &cfg)
	taskID := fs.String("task", "", "verify only this task (default: every task)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New(auditUsage)
	}
	db, err := daemon.OpenAdminDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close(context.WithoutCancel(ctx))
	svc, err := db.KeyedOperatorService(ctx, cfg, logger)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	checked, broken := 0, 0
	for after := ""; ; {
		refs, err := svc.AuditTasks(ctx, *taskID, after, 200)
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			break
		}
		for _, ref := range refs {
			rep, err := svc.VerifyAudit(ctx, app.Actor{Tenant: ref.Tenant, Subject: "operator:" + operatorName()}, ref.TaskID)
			if err != nil {
				return fmt.Errorf("verifying task %s: %w", ref.TaskID, err)
			}
			r := rep.Report
			line := auditLine{TaskID: ref.TaskID, Tenant: ref.Tenant, Status: "valid", EventsChecked: r.Checked, HeadSeq: r.HeadSeq, Anchors: len(r.Anchors)}
			if r.HeadDigest != nil {
				line.HeadDigest = hex.EncodeToString(r.HeadDigest)
			}
			if b := r.Break; b != nil {
				line.Status, line.BrokenAt = "broken", &brokenLine{Seq: b.Seq, Reason: b.Reason, Detail: b.Detail}
				broken++
			}
			checked++
			if err := enc.Encode(line); err != nil {
				return err
			}
			after = ref.TaskID
		}
	}
	if *taskID != "" && checked == 0 {
		return fmt.Errorf("bap audit verify: no task %s", *taskID)
	}
	if broken > 0 {
		return fmt.Errorf("%w: %d of %d tasks", errChainBroken, broken, checked)
	}
	return nil
}
