package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/originweave/bap/server/internal/daemon"
)

// masterKeyFlag is --master-key-file, shared by every command that opens the server key.
func masterKeyFlag(fs *flag.FlagSet, cfg *daemon.Config) {
	fs.StringVar(&cfg.MasterKeyFile, "master-key-file", os.Getenv("BAP_MASTER_KEY_FILE"),
		"the 32-byte master key that wraps the server key in the database (ADR 0017); it must exist (default: <data-dir>/master.key, created at the first start)")
}

// keysCommand runs `bap keys rotate [--new-master-key-file F] [--keep-old]` and
// `bap keys retire MASTER_KEY_ID`: the master key is replaced without stopping the server.
func keysCommand(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger, stderr io.Writer) error {
	const usage = "usage: bap keys rotate [--new-master-key-file FILE] [--keep-old] | bap keys retire MASTER_KEY_ID"
	if len(args) == 0 {
		return errors.New(usage)
	}
	cfg := daemon.Config{Logger: logger}
	fs := flag.NewFlagSet("bap keys "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	masterKeyFlag(fs, &cfg)
	newFile := fs.String("new-master-key-file", "", "a new master key file the operator made (and mounts on every node); default: a fresh key replaces the master key file")
	keepOld := fs.Bool("keep-old", false, "keep the old master key able to open the server key until `bap keys retire` (nodes move to the new file one by one)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	db, err := daemon.OpenAdminDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close(context.WithoutCancel(ctx))
	switch args[0] {
	case "rotate":
		if fs.NArg() != 0 {
			return errors.New(usage)
		}
		rot, err := daemon.RotateMasterKey(ctx, cfg, db.Pool, *newFile, *keepOld)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(rot)
	case "retire":
		if fs.NArg() != 1 {
			return errors.New(usage)
		}
		if err := daemon.RetireMasterKey(ctx, db.Pool, fs.Arg(0)); err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(map[string]any{"master_key_id": fs.Arg(0), "retired": true})
	default:
		return fmt.Errorf("bap keys: unknown subcommand %q (rotate or retire)", args[0])
	}
}
