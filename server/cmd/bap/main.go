// Command bap is the BAP runtime: `bap serve` runs the server, `bap migrate` applies database
// migrations, `bap version` prints the versions this build speaks. This file only turns flags and
// the environment into a daemon.Config and runs it.
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
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/originweave/bap/server/internal/daemon"
	"github.com/originweave/bap/server/internal/redact"
	"github.com/originweave/bap/server/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: bap <command> [flags]

commands:
  serve     run the server (see bap serve -h)
  migrate   apply database migrations and exit (migrate --check: apply nothing, report what is pending)
  version   print the BAP, MCP and schema versions
  client    register (client create) or revoke (client revoke) an OAuth client
  user      add a person who signs in on the login page (user create)
  reconcile settle commands a crash interrupted (reconcile list | reconcile resolve ID --outcome applied|no_side_effect --note TEXT | reconcile correct ID …)
  decisions the recorded authorization and policy decisions with what each is bound to (decisions list [--tenant T] [--task ID] [--limit N])
  correct   correct how a task ended or an approval's decision record: a new record that supersedes it (correct outcome TASK_ID --state S --reason TEXT | correct decision APPROVAL_ID --reason TEXT)
  keys      rotate the master key that wraps the server key (keys rotate [--new-master-key-file F] [--keep-old] | keys retire MASTER_KEY_ID)
  secret    a tenant's secrets, typed by reference (secret put --tenant T --name N --origin URL… < value | list | rotate ID < value | delete ID)
  approvals the local operator's approvals, over the server's Unix socket (approvals list | approvals approve ID [--reason TEXT] | approvals deny ID [--reason TEXT])
  console   print a one-time login URL of the operator console (/console), over the server's Unix socket
  tasks     the tasks, over the server's Unix socket (tasks list [--state S] [--origin O] [--since D] | tasks show ID | tasks events ID [--follow])
  audit     verify the keyed hash chain over every task's history and its signed anchors, with the
            server key (audit verify [--task ID]); prints one JSON line per task, exits 1 if any breaks
  bundle    evidence bundles (bundle export TASK_ID [--out FILE] over the server's Unix socket |
            bundle verify FILE --jwks FILE|URL, offline: the manifest, its signature, the history
            chain and its anchors; names each member that changed, exits 1 if any)
  database-url
            print the connection string of the embedded database of --data-dir, for another node
            on this machine to share it (BAP_DATABASE_URL) while its server runs
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	// Every log line passes the redaction layer: protected keys, credential-shaped strings and
	// secrets registered at run time never reach stderr.
	logger := slog.New(redact.NewHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}), nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], logger, stderr)
	case "client":
		err = clientCommand(ctx, args[1:], stdout, logger, stderr)
	case "user":
		err = userCommand(ctx, args[1:], os.Stdin, stdout, logger, stderr)
	case "reconcile":
		err = reconcileCommand(ctx, args[1:], stdout, logger, stderr)
	case "correct":
		err = correctCommand(ctx, args[1:], stdout, logger, stderr)
	case "decisions":
		err = decisionsCommand(ctx, args[1:], stdout, logger, stderr)
	case "approvals":
		err = approvalsCommand(ctx, args[1:], stdout, stderr)
	case "console":
		err = consoleCommand(ctx, args[1:], stdout, stderr)
	case "tasks":
		err = tasksCommand(ctx, args[1:], stdout, stderr)
	case "keys":
		err = keysCommand(ctx, args[1:], stdout, logger, stderr)
	case "audit":
		err = auditCommand(ctx, args[1:], stdout, logger, stderr)
	case "bundle":
		err = bundleCommand(ctx, args[1:], stdout, stderr)
	case "secret":
		err = secretCommand(ctx, args[1:], os.Stdin, stdout, logger, stderr)
	case "migrate":
		err = migrate(ctx, args[1:], stdout, logger, stderr)
	case "version":
		err = printVersion(stdout)
	case "database-url":
		err = printDatabaseURL(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "bap: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		logger.Error(err.Error())
		return 1
	}
	return 0
}

// baseFlags are the flags every database-using command shares.
func baseFlags(fs *flag.FlagSet, cfg *daemon.Config) {
	fs.StringVar(&cfg.DataDir, "data-dir", daemon.DefaultDataDir(), "directory for the embedded database, socket and artifacts")
	cfg.DatabaseURL = os.Getenv("BAP_DATABASE_URL")
}

// serveGCPercent is the Go collector's GOGC for bap serve when the environment sets none. The
// server's live heap is small (about 20 MB under create_task load) and it allocates per request, so
// at Go's default of 100 the collector ran 17 times a second and took a fifth of bap's CPU; at 200
// bap's CPU per create_task fell 15-20 % for about 20 MB more resident memory at its peak
// (docs/benchmarks.md). A GOGC in the environment (not empty) still decides, and so does GOMEMLIMIT.
const serveGCPercent = 200

func serve(ctx context.Context, args []string, logger *slog.Logger, stderr io.Writer) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
	cfg := daemon.Config{Logger: logger, Chromium: os.Getenv("BAP_CHROMIUM"), Firefox: os.Getenv("BAP_FIREFOX")}
	fs := flag.NewFlagSet("bap serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	profile := fs.String("profile", "local", "local (Unix socket + loopback, local operator) or remote (OAuth bearer tokens)")
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:7777", "TCP address to serve")
	fs.StringVar(&cfg.Socket, "socket", "", "Unix socket path (local profile; default <data-dir>/bap.sock)")
	fs.StringVar(&cfg.Issuer, "issuer", "", "OAuth issuer URL (remote profile; default http(s)://<listen>)")
	fs.StringVar(&cfg.AdvertiseURL, "advertise-url", "", "URL other nodes reach this one at (default: the listen URL)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate file (remote profile)")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "TLS key file (remote profile)")
	masterKeyFlag(fs, &cfg) // keys.go
	fs.StringVar(&cfg.ServerKeyFile, "server-key-file", os.Getenv("BAP_SERVER_KEY_FILE"), "a server key file of a release before the master key, read once to wrap it under the master key (default: <data-dir>/server.key when it exists)")
	fs.BoolVar(&cfg.InsecureHTTP, "insecure-http", false, "serve the remote profile over plain HTTP (tests only)")
	fs.DurationVar(&cfg.AccessTokenTTL, "access-token-ttl", 0, "access token lifetime (default 15m; at most 15m)")
	fs.BoolVar(&cfg.MCPConformanceFixtures, "mcp-conformance-fixtures", false, "mount /mcp-conformance fixtures (local profile, tests)")
	fs.DurationVar(&cfg.IdempotencyTTL, "idempotency-retention", 0, "how long completed Idempotency-Keys are kept (default 24h)")
	fs.IntVar(&cfg.MaxActiveTasksPerTenant, "max-active-tasks", 0, "admitted tasks per tenant before new ones wait in created (0: no cap)")
	fs.Int64Var(&cfg.RecordMaxBytes, "record-max-bytes", 0, "cap in bytes of the WARC archive of one task with policy.record on this node (default 64 MiB)")
	fs.IntVar(&cfg.DBGroupCommit, "db-group-commit", 0, "transactions that read nothing (create_task) committing at once before the next ones commit together as one (default 1; -1: each alone)")
	fs.Int64Var(&cfg.RecordMaxBodyBytes, "record-max-body-bytes", 0, "cap in bytes of one request or response body stored in such an archive (default 8 MiB)")
	fs.DurationVar(&cfg.CheckpointMaxAge, "checkpoint-max-age", 0, "how old a checkpoint may be when a session is restored from it (default 24h)")
	sod := fs.Bool("separation-of-duties", true, "always on, kept for old scripts: whoever requested or caused an approval never resolves it (false is refused)")
	fs.DurationVar(&cfg.CancelDeadline, "cancel-deadline", 0, "how long cancel_task waits for the task's in-flight browser commands to stop and record their outcome (default 3s)")
	limitFlags(fs, &cfg) // backpressure caps (limits.go)
	fs.IntVar(&cfg.Workers, "workers", 4, "delegated tasks (plans) this node runs at once; 0 runs none")
	fs.DurationVar(&cfg.LeaseTTL, "lease-ttl", 0, "how long a worker's lease on a delegated task lasts unless renewed (default 15s)")
	fs.StringVar(&cfg.OrchestratorURL, "orchestrator-url", "", "OpenAI-compatible model orchestrator of goal-driven tasks (GET /v1/models, POST /v1/chat/completions); empty: autonomous tasks are refused")
	fs.StringVar(&cfg.OrchestratorConfigFile, "orchestrator-config", "", "JSON file: roles → ordered approved model ids, and model metadata (default: every listed model for every role)")
	fs.StringVar(&cfg.OrchestratorCredentialFile, "orchestrator-credential-file", "", "file holding BAP's bearer token for the orchestrator (default: $BAP_ORCHESTRATOR_TOKEN)")
	fs.DurationVar(&cfg.OrchestratorCallTimeout, "orchestrator-call-timeout", 0, "bound on each model call before the next approved model is tried (default 60s)")
	fs.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", os.Getenv("BAP_OTLP_ENDPOINT"), "OTLP/HTTP collector URL that spans are exported to, e.g. http://127.0.0.1:4318 (default $BAP_OTLP_ENDPOINT; empty: tracing is off)")
	browserFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bap serve: unexpected argument %q", fs.Arg(0))
	}
	if !*sod {
		return errors.New("bap serve: --separation-of-duties=false is no longer possible: whoever requested or caused an approval never resolves it (give approvers their own identity, or use `bap approvals` on the local socket)")
	}
	cfg.Profile = daemon.Profile(*profile)
	// The orchestrator's workload credential: read once, registered with the redaction layer, and
	// kept from the processes bap starts (Chromium, PostgreSQL), which inherit the environment.
	if tok, ok := os.LookupEnv("BAP_ORCHESTRATOR_TOKEN"); ok {
		cfg.OrchestratorToken = tok
		redact.Global.Add(tok)
		_ = os.Unsetenv("BAP_ORCHESTRATOR_TOKEN")
	}
	return daemon.Run(ctx, cfg)
}

func migrate(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger, stderr io.Writer) error {
	cfg := daemon.Config{Logger: logger}
	fs := flag.NewFlagSet("bap migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	check := fs.Bool("check", false, "apply nothing: print the applied and known schema versions and the pending migrations, and fail when any is pending")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *check {
		return migrateCheck(ctx, cfg, stdout)
	}
	db, err := daemon.OpenDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close(context.WithoutCancel(ctx))
	v, err := db.AppliedVersion(ctx)
	if err != nil {
		return err
	}
	logger.Info("database is migrated", "schema_version", v)
	return nil
}

// errMigrationsPending fails `bap migrate --check` when the database lacks migrations.
var errMigrationsPending = errors.New("migrations pending: run bap migrate (or start bap serve, which applies them)")

// migrateCheck prints the database's schema against this build's and fails when migrations are
// pending or the database is newer than this build.
func migrateCheck(ctx context.Context, cfg daemon.Config, stdout io.Writer) error {
	st, err := daemon.CheckDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	pending := []string{}
	for _, m := range st.Pending {
		pending = append(pending, m.Name)
	}
	if err := json.NewEncoder(stdout).Encode(map[string]any{
		"schema_applied": st.Applied, "schema_known": st.Known, "pending": pending,
	}); err != nil {
		return err
	}
	if len(pending) > 0 {
		return errMigrationsPending
	}
	return nil
}

func printVersion(w io.Writer) error {
	v := map[string]any{
		"bap": version.BAP, "mcp": version.MCP, "schema": daemon.SchemaVersion(), "software": version.Software,
	}
	addBrowserVersion(v)
	return json.NewEncoder(w).Encode(v)
}

// printDatabaseURL prints the connection string of the embedded cluster of --data-dir.
func printDatabaseURL(args []string, stdout, stderr io.Writer) error {
	var cfg daemon.Config
	fs := flag.NewFlagSet("bap database-url", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return err
	}
	dsn, err := daemon.EmbeddedDatabaseURL(cfg.DataDir)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, dsn)
	return err
}
