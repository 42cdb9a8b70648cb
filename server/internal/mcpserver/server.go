package mcpserver

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/version"
)

// Options configures the MCP endpoint.
type Options struct {
	// API is the BAP HTTP API. Tool calls send it in-process requests whose context carries the
	// caller (see CallerFrom); the daemon makes the API accept that caller instead of
	// authenticating the request again. Required by New; unused by NewConformance.
	API http.Handler
	// Authenticator identifies callers, as the BAP API does. Required.
	Authenticator Authenticator
	// Logger receives the adapter's warnings (the SDK's own log lines at debug level).
	Logger *slog.Logger
	// Secret keys the HMACs of list cursors and request states (32 random bytes when empty). Nodes
	// behind one load balancer should share it.
	Secret []byte
	// MaxBodyBytes bounds a request body (default 2 MiB: a 1 MiB BAP body plus the JSON-RPC
	// envelope); larger → 413.
	MaxBodyBytes int64
	// PageSize is the number of tools per tools/list page (default 50).
	PageSize int
	// TaskSyncWindow is how long a task-eligible call (navigate, act, close_task) of a client that
	// declared the Tasks extension may take before it is answered with a task instead of its
	// result (default 2 s; negative: always a task).
	TaskSyncWindow time.Duration
	// TaskTTL is how long an MCP task stays readable (default 1 h).
	TaskTTL time.Duration
	// TaskPollInterval is the pollIntervalMs suggested to clients (default 1 s).
	TaskPollInterval time.Duration
	// ApprovalPoll is how often a task held for approval looks for a decision made elsewhere
	// (default 1 s).
	ApprovalPoll time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Tasks, when set, keeps the MCP tasks that outlive TaskSyncWindow in the database, so that
	// every node of a cluster answers their tasks/get (nil: this node's memory only).
	Tasks TaskRecords
	// NodeID is this node's id, recorded as the runner of the tasks it binds (required with Tasks).
	NodeID string
	// NodeStaleAfter is how long a node may miss heartbeats before a task it runs is taken for
	// abandoned (default app.DefaultNodeStaleAfter, the bound the use-cases classify by).
	NodeStaleAfter time.Duration
}

func (o *Options) setDefaults() error {
	if o.Authenticator == nil {
		return errors.New("mcpserver: Authenticator is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if len(o.Secret) == 0 {
		o.Secret = make([]byte, 32)
		if _, err := rand.Read(o.Secret); err != nil {
			return err
		}
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 2 << 20
	}
	if o.PageSize <= 0 {
		o.PageSize = 50
	}
	if o.TaskSyncWindow == 0 {
		o.TaskSyncWindow = 2 * time.Second
	}
	if o.TaskSyncWindow < 0 {
		o.TaskSyncWindow = 0
	}
	if o.TaskTTL <= 0 {
		o.TaskTTL = time.Hour
	}
	if o.TaskPollInterval <= 0 {
		o.TaskPollInterval = time.Second
	}
	if o.ApprovalPoll <= 0 {
		o.ApprovalPoll = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Tasks != nil && o.NodeID == "" {
		return errors.New("mcpserver: NodeID is required with Tasks (the runner of the tasks it binds)")
	}
	if o.NodeStaleAfter <= 0 {
		o.NodeStaleAfter = app.DefaultNodeStaleAfter
	}
	return nil
}

// transport wraps srv in the endpoint's HTTP stack: cross-origin protection (a browser page of
// another origin → 403), the guard, and the SDK's stateless Streamable HTTP handler.
func transport(o Options, srv *mcp.Server, scopeOf func(string) (string, bool)) http.Handler {
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		PropagateRequestCancellation: true,
		Logger:                       slog.New(demote{o.Logger.Handler()}),
		MaxRequestBodyBytes:          o.MaxBodyBytes,
	})
	g := &guard{auth: o.Authenticator, next: sdk, maxBody: o.MaxBodyBytes, scopeOf: scopeOf, log: o.Logger}
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeRPCError(w, http.StatusForbidden, nil, jsonrpc.CodeInvalidRequest, "cross-origin request refused (Origin)", nil)
	}))
	return cop.Handler(g)
}

// serverOptions are the SDK options shared by both endpoints.
func serverOptions(o Options, caps *mcp.ServerCapabilities, instructions string, cache func(context.Context, mcp.Request, *mcp.Cacheable)) *mcp.ServerOptions {
	return &mcp.ServerOptions{
		Instructions:              instructions,
		Logger:                    slog.New(demote{o.Logger.Handler()}),
		Capabilities:              caps,
		SupportedProtocolVersions: []string{version.MCP},
		PageSize:                  o.PageSize,
		SetCacheable:              cache,
	}
}

// demote logs the SDK's lines at debug level: it reports client mistakes (removed methods,
// unknown tools) as errors, which are the client's business and already answered to it.
type demote struct{ h slog.Handler }

func (d demote) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d demote) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	r.AddAttrs(slog.String("component", "mcp-sdk"))
	return d.h.Handle(ctx, r)
}

func (d demote) WithAttrs(as []slog.Attr) slog.Handler { return demote{d.h.WithAttrs(as)} }
func (d demote) WithGroup(n string) slog.Handler       { return demote{d.h.WithGroup(n)} }
