package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/store"
)

// Profile selects how callers are authenticated.
type Profile string

const (
	// ProfileLocal serves the local operator of tenant `local` on a Unix socket and loopback TCP,
	// without tokens.
	ProfileLocal Profile = "local"
	// ProfileRemote requires an OAuth bearer token on every non-anonymous request.
	ProfileRemote Profile = "remote"
)

// Config is everything `bap serve` needs; main fills it from flags and the environment.
type Config struct {
	Profile      Profile
	Listen       string // host:port for TCP
	Socket       string // Unix socket path (local profile); default <DataDir>/bap.sock
	DataDir      string
	DatabaseURL  string // empty: the embedded cluster under DataDir
	Issuer       string
	AdvertiseURL string
	TLSCert      string
	TLSKey       string
	InsecureHTTP bool
	// AccessTokenTTL is the lifetime of issued access tokens (at most 15 minutes).
	AccessTokenTTL time.Duration
	// MasterKeyFile is the master key (ADR 0017; --master-key-file, BAP_MASTER_KEY_FILE) that wraps
	// the server key in the database: it must exist, and every node of one database needs one that
	// opens it. Empty: <DataDir>/master.key, created at the first start only (never once the
	// database holds a wrapped key).
	MasterKeyFile string
	// ServerKeyFile is a server key file of ADR 0015 (--server-key-file, BAP_SERVER_KEY_FILE), read
	// once: when a database used before ADR 0017 is first started with a master key, its server
	// key is taken from this file (default <DataDir>/server.key) and wrapped. Not read afterwards.
	ServerKeyFile string
	// MCPConformanceFixtures mounts /mcp-conformance (local profile only, for tests).
	MCPConformanceFixtures bool
	// Engines are the browser engines this node runs (--engines, BAP_ENGINES), the first the
	// default of create_browser_session; each needs an adapter in the engine registry (engines.go),
	// else the node refuses to start. Empty: chromium.
	Engines []string
	// EngineRegistry is the engines this build can drive; nil: DefaultEngineRegistry (tests
	// narrow an entry's capabilities).
	EngineRegistry EngineRegistry
	// Chromium is the browser binary (BAP_CHROMIUM); empty: looked up on PATH.
	Chromium string
	// Firefox is Firefox ESR's binary for the firefox engine (BAP_FIREFOX); empty: firefox-esr on PATH.
	Firefox string
	// BrowserUser is the OS account Chromium runs as when bap runs as root (--browser-user,
	// BAP_BROWSER_USER); empty: browser.DefaultRunAsUser. Not root: Chromium runs as bap's user.
	BrowserUser string
	// BrowserNoSandbox starts Chromium without its sandbox (--browser-no-sandbox,
	// BAP_BROWSER_NO_SANDBOX=1), where it cannot start; logged at WARN and reported by /readyz.
	BrowserNoSandbox bool
	// IdempotencyTTL is how long completed idempotency keys are kept (default 24 h).
	IdempotencyTTL time.Duration
	// MaxActiveTasksPerTenant caps admitted tasks per tenant (0: no cap).
	MaxActiveTasksPerTenant int
	// CheckpointMaxAge is how old a checkpoint may be when restored (default 24 h).
	CheckpointMaxAge time.Duration
	// CancelDeadline bounds how long cancel_task waits for in-flight browser commands (default 3 s).
	CancelDeadline time.Duration
	// Backpressure caps (backpressure.go; 0 picks the default, a negative value means no cap).
	// MaxSessionsPerTenant caps open browser sessions per tenant → 429 (default 16).
	MaxSessionsPerTenant int
	// MaxSessions caps the browser sessions of this node → 503 (default 32).
	MaxSessions int
	// MaxInflightPerTenant caps a tenant's requests in flight on this node → 429 (default 64).
	MaxInflightPerTenant int
	// MaxInflight caps the requests in flight on this node → 503 (default 256).
	MaxInflight int
	// MaxQueuedTasksPerTenant caps a tenant's waiting tasks → 429 (default 256).
	MaxQueuedTasksPerTenant int
	// Workers is how many delegated tasks (plans) this node runs at once; 0 runs none (ADR 0011).
	Workers int
	// The model orchestrator of goal-driven tasks (issue #11, orchestrator.go). OrchestratorURL
	// empty: none, and autonomous tasks are refused with 503 orchestrator_unavailable.
	OrchestratorURL string
	// OrchestratorConfigFile is the JSON file of roles → approved models and model metadata
	// (orchestrator.FileConfig); empty: every model the orchestrator lists, for every role.
	OrchestratorConfigFile string
	// OrchestratorCredentialFile holds BAP's workload credential (a bearer token); when empty,
	// OrchestratorToken (BAP_ORCHESTRATOR_TOKEN) is used.
	OrchestratorCredentialFile string
	OrchestratorToken          string
	// OrchestratorCallTimeout bounds each model call (default 60 s).
	OrchestratorCallTimeout time.Duration
	// LeaseTTL is how long a worker's lease on a delegated task lasts unless renewed (default 15 s).
	LeaseTTL time.Duration
	// RecordMaxBytes caps the WARC archive of one recording task (policy.record) on this node
	// (--record-max-bytes; 0: 64 MiB); RecordMaxBodyBytes caps one stored body in it
	// (--record-max-body-bytes; 0: 8 MiB). Archives live under <DataDir>/records.
	RecordMaxBytes, RecordMaxBodyBytes int64
	// MaxBodyBytes bounds request bodies (default 1 MiB); larger → 413.
	MaxBodyBytes int64
	// UpkeepInterval is the period of deadline expiry, key purge and heartbeat (default 1 s).
	UpkeepInterval time.Duration
	// ShutdownTimeout bounds graceful shutdown (default 10 s).
	ShutdownTimeout time.Duration
	// DBMaxConns caps the connection pool (default 32).
	DBMaxConns int32
	// DBGroupCommit is how many transactions that read nothing (create_task) commit at once; the
	// ones arriving meanwhile commit together (store.Options.GroupCommit, ADR 0039). Default 1
	// (measured against 2 and 3: docs/benchmarks.md); negative: every transaction commits alone.
	DBGroupCommit int
	Logger        *slog.Logger
	// ClientRateLimit and ClientBurst bound each OAuth client's requests per second in the remote
	// profile (default 100/s, burst 200); more → 429 rate_limited.
	ClientRateLimit float64
	ClientBurst     int
	// OTLPEndpoint is the OTLP/HTTP collector spans are exported to (tracing.go); empty: tracing
	// is off.
	OTLPEndpoint string

	advertiseDefaulted, issuerDefaulted bool       // computed from Listen (see remote.go)
	tracer                              app.Tracer // built by Run from OTLPEndpoint
}

// DefaultDataDir is /var/lib/bap for root, else $XDG_STATE_HOME/bap or ~/.local/state/bap.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/bap"
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "bap")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "bap")
	}
	return filepath.Join(home, ".local", "state", "bap")
}

func (c *Config) setDefaults() {
	if c.Profile == "" {
		c.Profile = ProfileLocal
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7777"
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir()
	}
	if c.Socket == "" && c.Profile == ProfileLocal {
		c.Socket = filepath.Join(c.DataDir, "bap.sock")
	}
	if c.AccessTokenTTL == 0 {
		c.AccessTokenTTL = 15 * time.Minute
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.UpkeepInterval == 0 {
		c.UpkeepInterval = time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.DBMaxConns == 0 {
		c.DBMaxConns = 32
	}
	if c.DBGroupCommit == 0 {
		c.DBGroupCommit = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.Engines) == 0 {
		c.Engines = ParseEngines(DefaultEngines)
	}
	if c.AdvertiseURL == "" {
		scheme := "http"
		if c.TLSCert != "" {
			scheme = "https"
		}
		c.AdvertiseURL = scheme + "://" + c.Listen
		c.advertiseDefaulted = true
	}
	if c.Profile == ProfileRemote && c.Issuer == "" {
		c.Issuer = c.AdvertiseURL
		c.issuerDefaulted = true
	}
}

// Validate reports a configuration that must not start.
func (c *Config) Validate() error {
	switch c.Profile {
	case ProfileLocal:
		host, _, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return fmt.Errorf("--listen %q: %w", c.Listen, err)
		}
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("--listen %q: the local profile serves loopback addresses only (use --profile remote to serve a network)", c.Listen)
		}
		if c.TLSCert != "" || c.TLSKey != "" {
			return errors.New("--tls-cert/--tls-key belong to the remote profile")
		}
	case ProfileRemote:
		if err := c.validateRemote(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--profile %q: must be local or remote", c.Profile)
	}
	if c.MCPConformanceFixtures && c.Profile != ProfileLocal {
		return errors.New("--mcp-conformance-fixtures is for the local profile only")
	}
	if c.AccessTokenTTL < 0 || c.AccessTokenTTL > 15*time.Minute {
		return fmt.Errorf("--access-token-ttl %s: must be positive and at most 15m", c.AccessTokenTTL)
	}
	if c.CheckpointMaxAge < 0 {
		return fmt.Errorf("--checkpoint-max-age must not be negative")
	}
	if c.IdempotencyTTL < 0 {
		return errors.New("idempotency retention must not be negative")
	}
	if c.CancelDeadline < 0 {
		return errors.New("--cancel-deadline must not be negative")
	}
	if c.OrchestratorURL == "" && (c.OrchestratorConfigFile != "" || c.OrchestratorCredentialFile != "") {
		return errors.New("--orchestrator-config and --orchestrator-credential-file need --orchestrator-url")
	}
	if c.OrchestratorCallTimeout < 0 {
		return errors.New("--orchestrator-call-timeout must not be negative")
	}
	if c.Workers < 0 || c.LeaseTTL < 0 {
		return errors.New("--workers and --lease-ttl must not be negative")
	}
	return validateEngines(c.Engines, c.engineRegistry())
}

// engineRegistry is the registry the node starts its engines from.
func (c *Config) engineRegistry() EngineRegistry {
	if c.EngineRegistry == nil {
		return DefaultEngineRegistry()
	}
	return c.EngineRegistry
}

// storeOptions completes the event delivery's store options with this configuration's: a span
// per SQL transaction, and group commit.
func (c Config) storeOptions(o store.Options, tracer app.Tracer) store.Options {
	o.Tracer = tracer
	o.GroupCommit = max(c.DBGroupCommit, 0)
	return o
}
