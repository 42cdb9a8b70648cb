package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/auth"
	"github.com/originweave/bap/server/internal/pgcluster"
	"github.com/originweave/bap/server/internal/store"
	"github.com/originweave/bap/server/internal/version"
)

// Database is an open, migrated database and whatever must be stopped after the pool closes.
type Database struct {
	Pool    *pgxpool.Pool
	cluster *pgcluster.Cluster
	unlock  func()
}

// OpenDatabase connects to cfg.DatabaseURL, or starts (or adopts) the embedded cluster under
// cfg.DataDir when it is empty, and applies pending migrations. A database a newer release
// migrated is refused (*store.SchemaTooNewError, naming both versions).
func OpenDatabase(ctx context.Context, cfg Config) (*Database, error) {
	return openDatabase(ctx, cfg, true)
}

// CheckDatabase opens the database like OpenDatabase but applies nothing, and reports its schema
// against this build's migrations (`bap migrate --check`).
func CheckDatabase(ctx context.Context, cfg Config) (store.SchemaStatus, error) {
	db, err := openDatabase(ctx, cfg, false)
	if err != nil {
		return store.SchemaStatus{}, err
	}
	defer db.Close(context.WithoutCancel(ctx))
	return store.Status(ctx, db.Pool)
}

func openDatabase(ctx context.Context, cfg Config, migrate bool) (*Database, error) {
	cfg.setDefaults()
	db := &Database{}
	dsn := cfg.DatabaseURL
	if dsn == "" {
		// 0711: the cluster's own user (postgres, when bap runs as root) must traverse it; nobody
		// else may list it.
		if err := os.MkdirAll(cfg.DataDir, 0o711); err != nil {
			return nil, fmt.Errorf("creating data dir: %w", err)
		}
		unlock, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		db.unlock = unlock
		c, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: cfg.DataDir, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("starting embedded PostgreSQL: %w", err)
		}
		db.cluster = c
		dsn = c.ConnString("bap")
	}
	pool, err := store.Open(ctx, dsn, cfg.DBMaxConns)
	if err != nil {
		db.Close(ctx)
		return nil, err
	}
	db.Pool = pool
	if !migrate {
		return db, nil
	}
	applied, err := store.Migrate(ctx, pool)
	if err != nil {
		db.Close(ctx)
		return nil, err
	}
	if len(applied) > 0 {
		cfg.Logger.Info("migrations applied", "versions", applied)
	}
	return db, nil
}

// Close closes the pool and stops an embedded cluster.
func (d *Database) Close(ctx context.Context) {
	if d.Pool != nil {
		d.Pool.Close()
	}
	if d.cluster != nil {
		_ = d.cluster.Stop(ctx)
	}
	if d.unlock != nil {
		d.unlock()
	}
}

// lockDataDir holds an exclusive lock on <dir>/bap.lock for as long as this process owns the
// embedded cluster or serves from the data dir, so that a second `bap serve` or a `bap migrate`
// cannot take over (and then stop) the database of a running server, and two live nodes never
// share one data dir. The kernel drops the lock when the process dies, so a killed bap never
// blocks the next start.
func lockDataDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "bap.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another bap process (one `bap serve` per data dir, whatever its database; a running `bap serve` applies migrations itself): %w", dir, ErrDataDirInUse)
		}
		return nil, fmt.Errorf("locking data dir: %w", err)
	}
	return func() { _ = f.Close() }, nil
}

// holdNodeDataDir creates dir if need be and takes its lock (lockDataDir) for a node that uses a
// database URL: one live node per data dir, and the lock is what proves the node that used the
// data dir before gone (succeedDataDirNode). With the embedded cluster OpenDatabase takes it.
func holdNodeDataDir(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o711); err != nil { // as OpenDatabase would
		return nil, fmt.Errorf("creating data dir: %w", err)
	}
	return lockDataDir(dir)
}

// openNodeDatabase is OpenDatabase for `bap serve`, whose process holds its data dir's lock until
// the database closes, embedded cluster or database URL alike.
func openNodeDatabase(ctx context.Context, cfg Config) (*Database, error) {
	if cfg.DatabaseURL == "" {
		return OpenDatabase(ctx, cfg) // it holds the data dir of the embedded cluster
	}
	unlock, err := holdNodeDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	db, err := OpenDatabase(ctx, cfg)
	if err != nil {
		unlock()
		return nil, err
	}
	db.unlock = unlock
	return db, nil
}

// announceNode registers this node, records the protocol adapters it serves (for GET /bap/v1,
// browser.go) and takes over from the node that used its data dir before (this process holds the
// data-dir lock, embedded cluster or database URL alike), and loads the audit keys that sign anchors.
func announceNode(ctx context.Context, cfg Config, svc *app.Service, nodeID string, br *Engines, log *slog.Logger) error {
	if err := svc.RegisterNode(ctx, cfg.AdvertiseURL, version.Software); err != nil {
		return err
	}
	if err := svc.RecordAdapters(ctx, nodeAdapters(br)); err != nil {
		return err
	}
	if err := svc.LoadAuditKeys(ctx); err != nil { // before any task can end and be anchored
		return fmt.Errorf("loading the audit keys: %w", err)
	}
	return succeedDataDirNode(ctx, svc, cfg.DataDir, nodeID, log)
}

// Run starts the server and blocks until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	var early net.Listener // the remote profile listens first: its URLs need the real port
	if cfg.Profile == ProfileRemote {
		l, err := prelisten(&cfg)
		if err != nil {
			return err
		}
		early = l
		defer early.Close()
	}
	nodeID := newNodeID()
	// Tracing first (app.NoTracer without --otlp-endpoint): every component below records into it.
	tracer, stopTracing, err := startTracing(ctx, cfg, nodeID, log) // tracing.go
	if err != nil {
		return err
	}
	defer stopTracing()
	cfg.tracer = tracer
	// The model orchestrator first: a bad --orchestrator-config fails before anything starts.
	orch, err := newOrchestrator(ctx, cfg, log) // nil without --orchestrator-url (orchestrator.go)
	if err != nil {
		return err
	}
	db, err := openNodeDatabase(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close(context.WithoutCancel(ctx))

	serverKey, err := loadServerKey(ctx, cfg, db.Pool) // serverkey.go
	if err != nil {
		return err
	}
	ev, err := newEventDelivery(ctx, db.Pool, nodeID, log)
	if err != nil {
		return err
	}
	bp := newBackpressure(cfg)                                             // caps per tenant and per node (backpressure.go)
	br, closeBrowsers := startEngines(ctx, cfg, cfg.engineRegistry(), log) // engines.go
	defer closeBrowsers()
	st := store.New(db.Pool, cfg.storeOptions(ev.storeOptions(), tracer))
	svc, err := app.NewService(st, app.Config{
		NodeID: nodeID, IdempotencyTTL: cfg.IdempotencyTTL, MaxActiveTasksPerTenant: cfg.MaxActiveTasksPerTenant, Logger: log,
		Browser: br, Recording: NewRecordings(filepath.Join(cfg.DataDir, "records"), cfg.RecordMaxBytes, cfg.RecordMaxBodyBytes, log), Orchestrator: orch, MaxSessionsPerTenant: bp.sessionsPerTenant, MaxQueuedTasksPerTenant: bp.queuedPerTenant, Refusals: bp.refusals,
		CancelDeadline:      cfg.CancelDeadline,
		InterruptedResponse: api.InterruptedResponse,
		ServerKey:           serverKey,
		SoftwareVersion:     version.Software, ProtocolVersion: version.BAP, CheckpointMaxAge: cfg.CheckpointMaxAge,
		Tracer: tracer, // a span per command and browser call
	})
	if err != nil {
		return err
	}
	if err := announceNode(ctx, cfg, svc, nodeID, br, log); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ev.registerMetrics(reg)
	registerGroupCommitMetrics(reg, st)
	bp.registerMetrics(reg, svc, br, store.New(db.Pool), log)
	if col, ok := orch.(prometheus.Collector); ok {
		reg.MustRegister(col) // model calls, tokens, cost, discovery (orchestrator/metrics.go)
	}
	workers, err := newWorkers(cfg, svc, orch, reg, log) // delegated tasks (workers.go)
	if err != nil {
		return err
	}
	opts := api.Options{
		Service: svc, Logger: log, Registry: reg, MaxBodyBytes: cfg.MaxBodyBytes,
		Ready:         func(ctx context.Context) error { return checkReady(ctx, db.Pool) },
		Warnings:      func() []string { return browserWarnings(cfg, br) },
		Authenticator: api.Local{}, // the operator on the socket, the agent on TCP (BaseContext below)
		Streams:       ev.streams(svc),
		Admission:     bp.api(),
		Tracer:        tracer, // a span per request, the child of its traceparent
	}
	keys, err := loadClusterKeys(ctx, db.Pool, serverKey)
	if err != nil {
		return err
	}
	opts.Cluster = &api.Cluster{NodeID: nodeID, Key: keys.node} // forwarding to owner nodes (cluster.go)
	if cfg.Profile == ProfileRemote {
		rm, err := newRemote(ctx, cfg, db.Pool, serverKey, log, early)
		if err != nil {
			return err
		}
		rm.apply(&opts)
		if err := rm.auth.Start(ctx); err != nil {
			return err
		}
		defer rm.auth.Stop()
		log.Info("authorization server", "issuer", rm.auth.Issuer(), "resource", rm.auth.Resource(), "tls", cfg.TLSCert != "")
	} else {
		// The local profile's callers (the operator on the socket, the agent on TCP, the console's
		// sessions) have their requests' authorization recorded too, by the same batched writer
		// (ADR 0021): off the command's transaction, one INSERT batch per flush.
		audit := auth.NewAudit(db.Pool, log)
		if err := audit.Start(ctx); err != nil {
			return err
		}
		defer audit.Stop()
		opts.Audit = audit
	}
	setMCPAPI, err := mountMCP(cfg, &opts, log, keys.mcp, store.New(db.Pool), nodeID)
	if err != nil {
		return err
	}
	// After the MCP adapter took the profile's authenticator: the console's session cookie is
	// for the console's own requests to the HTTP API, not for /mcp.
	setPublicURL, err := mountConsole(ctx, cfg, &opts, svc, db.Pool, log) // console.go
	if err != nil {
		return err
	}
	handler, err := api.New(opts)
	if err != nil {
		return err
	}
	setMCPAPI(handler)
	if cfg.Profile == ProfileLocal {
		handler = api.LoopbackHostOnly(handler)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	var listeners []net.Listener
	var socket net.Listener
	// Requests accepted on the Unix socket carry its mark (api.OnSocket): in the local profile
	// their caller is the operator. Only the listener decides it, never anything a request sends.
	srv.BaseContext = func(l net.Listener) context.Context {
		if socket != nil && l == socket {
			return api.OnSocket(context.Background())
		}
		return context.Background()
	}
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	tcp := early
	if tcp == nil {
		if tcp, err = net.Listen("tcp", cfg.Listen); err != nil {
			return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
		}
		if cfg.advertiseDefaulted {
			// --listen with port 0: other nodes reach this one at the port chosen (the upkeep's
			// first heartbeat records it).
			cfg.AdvertiseURL = "http://" + tcp.Addr().String()
		}
	}
	listeners = append(listeners, tcp)
	setPublicURL(tcp.Addr().String())
	// This node holds the address now: a node registered at it before is gone (kill -9 and a
	// restart on the same address), whatever its last heartbeat says.
	if prev, err := svc.SucceedNodesAt(ctx, cfg.AdvertiseURL); err != nil {
		closeAll()
		return err
	} else if len(prev) > 0 {
		log.Info("nodes previously at this address marked stopped", "node_ids", prev, "advertise_url", cfg.AdvertiseURL)
	}
	if cfg.Socket != "" {
		ul, err := listenUnix(cfg.Socket)
		if err != nil {
			closeAll()
			return err
		}
		socket = ul
		listeners = append(listeners, ul)
	}

	// The relay runs before the server accepts requests, so that every stream sees every event
	// committed after it subscribed.
	if err := ev.Start(ctx); err != nil {
		closeAll()
		return err
	}
	defer ev.Stop()

	upkeepCtx, stopUpkeep := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		svc.Upkeep(upkeepCtx, cfg.UpkeepInterval, cfg.AdvertiseURL, version.Software)
	}()
	go func() {
		defer wg.Done()
		svc.RunBrowserEvents(upkeepCtx)
	}()
	go func() {
		defer wg.Done()
		svc.RunSessionCloser(upkeepCtx)
	}()
	if workers != nil {
		// Stopped with the upkeep: running steps finish (bounded), leases go back to the queue.
		wg.Add(1)
		go func() {
			defer wg.Done()
			workers.Run(upkeepCtx)
		}()
	}

	errc := make(chan error, len(listeners))
	for _, l := range listeners {
		go func(l net.Listener) {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serving %s: %w", l.Addr(), err)
			}
		}(l)
	}
	log.Info("ready", "listen", tcp.Addr().String(), "socket", cfg.Socket, "profile", string(cfg.Profile),
		"node_id", nodeID, "version", version.Software)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	ev.closeStreams() // open streams end now instead of holding up the graceful shutdown
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("graceful shutdown incomplete", "err", err)
		_ = srv.Close()
	}
	stopUpkeep()
	wg.Wait()
	if err := svc.StopNode(sctx); err != nil {
		log.Warn("marking node stopped", "err", err)
	}
	if cfg.Socket != "" {
		_ = os.Remove(cfg.Socket)
	}
	log.Info("stopped")
	return serveErr
}

// SchemaVersion is the highest migration version this build knows.
func SchemaVersion() int { return store.SchemaVersion() }

// AppliedVersion reports the database's applied schema version.
func (d *Database) AppliedVersion(ctx context.Context) (int, error) {
	return store.AppliedVersion(ctx, d.Pool)
}

// checkReady reports whether every migration this build knows is applied.
func checkReady(ctx context.Context, pool *pgxpool.Pool) error {
	v, err := store.AppliedVersion(ctx, pool)
	if err != nil {
		return err
	}
	if want := store.SchemaVersion(); v < want {
		return fmt.Errorf("schema version %d, want %d", v, want)
	}
	return nil
}

// listenUnix listens on a Unix socket with mode 0600, removing a stale socket file left by a dead
// process but refusing to steal one a live server still answers on.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating socket dir: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket path %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("socket %s: another server is listening on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
		}
	}
	// Create the socket 0600 from the start (no window in which others could connect); the umask
	// is process-wide, which is acceptable only because this runs once, before any other work.
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("restricting socket %s: %w", path, err)
	}
	return l, nil
}

func newNodeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "node_" + hex.EncodeToString(b[:])
}

// OperatorService builds the use-cases over an admin database connection, for the operator
// commands of the CLI (bap reconcile): no browser, no event delivery, a node id of its own.
func (d *Database) OperatorService(log *slog.Logger) (*app.Service, error) {
	return app.NewService(store.New(d.Pool), app.Config{NodeID: "cli_" + newNodeID(), Logger: log})
}
