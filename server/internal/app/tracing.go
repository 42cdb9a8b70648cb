package app

import (
	"context"
	"strconv"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
)

// Tracer records the runtime's work as spans: per request (the transports), per command (the
// pipeline in service.go and twophase.go), per browser call (tracedSession), per SQL transaction
// (the store) and per model call (the orchestrator adapter). The daemon passes an OpenTelemetry
// tracer when --otlp-endpoint is set (server/internal/tracing); otherwise nothing is recorded and a
// span costs an interface call (NoTracer). Safe for concurrent use.
//
// A span carries identifiers and kinds only — operation, task, command and session ids, an action
// kind, a status, a model id — never a value a request carried (a URL, a typed value, a query, a
// header) nor an error's text: what a protected value may reach, a span never holds (the canary
// tests look).
type Tracer interface {
	// Start begins a span of kind named name, a child of the span (or remote parent) in ctx, and
	// returns ctx carrying it.
	Start(ctx context.Context, name string, kind SpanKind) (context.Context, TraceSpan)
	// Remote returns ctx carrying the remote parent a W3C traceparent (and tracestate) names; ctx
	// as it was when traceparent is empty or malformed.
	Remote(ctx context.Context, traceparent, tracestate string) context.Context
}

// SpanKind says what a span stands for (OpenTelemetry's span kinds).
type SpanKind int

// Span kinds.
const (
	// SpanInternal is work inside the server (a command, a browser call).
	SpanInternal SpanKind = iota
	// SpanServer is a request the server answers (an HTTP request).
	SpanServer
	// SpanClient is a call the server makes (a SQL transaction, a model call).
	SpanClient
)

// TraceSpan is one started span. Its methods take strings and integers, never a slice or an any,
// so that a span of NoTracer allocates nothing.
type TraceSpan interface {
	// SetName renames the span (a transport names it once the route is known).
	SetName(name string)
	// SetAttr records a string attribute. Only keys the tracing package lists are exported.
	SetAttr(key, value string)
	// SetInt records an integer attribute.
	SetInt(key string, value int64)
	// End ends the span. A non-nil err marks it failed with the error's problem code (never its
	// text, which may quote a request).
	End(err error)
}

// NoTracer records nothing: Start returns ctx as it is and a span whose methods do nothing. It is
// the default of every component that takes a Tracer.
type NoTracer struct{}

// Start implements Tracer.
func (NoTracer) Start(ctx context.Context, _ string, _ SpanKind) (context.Context, TraceSpan) {
	return ctx, noSpan{}
}

// Remote implements Tracer.
func (NoTracer) Remote(ctx context.Context, _, _ string) context.Context { return ctx }

type noSpan struct{}

func (noSpan) SetName(string)         {}
func (noSpan) SetAttr(string, string) {}
func (noSpan) SetInt(string, int64)   {}
func (noSpan) End(error)              {}

// TracerOrNone returns t, or NoTracer when t is nil.
func TracerOrNone(t Tracer) Tracer {
	if t == nil {
		return NoTracer{}
	}
	return t
}

// tracing reports whether spans are recorded: the browser sessions are wrapped only then.
func (s *Service) tracing() bool {
	_, off := s.cfg.Tracer.(NoTracer)
	return !off
}

// Span attribute keys the app sets (the tracing package exports these and no others).
const (
	traceOperation = "bap.operation"
	traceTaskID    = "bap.task_id"
	traceCommandID = "bap.command_id"
	traceSessionID = "bap.session_id"
	traceVia       = "bap.via"
	traceStatus    = "bap.response.status"
	traceReplayed  = "bap.response.replayed"
	traceCall      = "bap.browser.call"
	traceAction    = "bap.browser.action"
)

// startCommand begins the span of one command of call (the pipeline's runCommand and runTwoPhase).
func (s *Service) startCommand(ctx context.Context, call Call, taskID string) (context.Context, TraceSpan) {
	ctx, sp := s.cfg.Tracer.Start(ctx, "command "+call.Operation, SpanInternal)
	sp.SetAttr(traceOperation, call.Operation)
	if taskID != "" {
		sp.SetAttr(traceTaskID, taskID)
	}
	if call.Via != "" {
		sp.SetAttr(traceVia, call.Via)
	}
	return ctx, sp
}

// endCommand ends a command's span with what it answered.
func endCommand(sp TraceSpan, cmd *Command, resp Response, err error) {
	if cmd != nil {
		sp.SetAttr(traceCommandID, cmd.ID)
		if cmd.TaskID != "" {
			sp.SetAttr(traceTaskID, cmd.TaskID)
		}
	}
	if resp.Status != 0 {
		sp.SetInt(traceStatus, int64(resp.Status))
		sp.SetAttr(traceReplayed, strconv.FormatBool(resp.Replayed))
	}
	sp.End(err)
}

// tracedSession is the point where the app calls a browser session: one span per call, named for
// the call, with the session id and (for an act) the action kind — never a URL, a value, a query
// or a node's text. Methods it does not list pass through untraced (the embedded session).
type tracedSession struct {
	BrowserSession
	tr Tracer
	id string
}

// traced wraps sess when spans are recorded; otherwise it is sess itself (no cost when off).
func (s *Service) traced(sess BrowserSession, sessionID string) BrowserSession {
	if sess == nil || !s.tracing() {
		return sess
	}
	if _, ok := sess.(*tracedSession); ok {
		return sess
	}
	return &tracedSession{BrowserSession: sess, tr: s.cfg.Tracer, id: sessionID}
}

// openBrowserSession opens a session through b, in a span of its own when spans are recorded.
func (s *Service) openBrowserSession(ctx context.Context, b Browser, engine, sessionID string, pol *policy.Policy, onEvent func(page.Event)) (BrowserSession, error) {
	if !s.tracing() {
		return b.OpenSession(ctx, engine, sessionID, pol, onEvent)
	}
	ctx, sp := s.cfg.Tracer.Start(ctx, "browser open_session", SpanInternal)
	sp.SetAttr(traceCall, "open_session")
	sp.SetAttr(traceSessionID, sessionID)
	sess, err := b.OpenSession(ctx, engine, sessionID, pol, onEvent)
	sp.End(err)
	if err != nil {
		return sess, err
	}
	return s.traced(sess, sessionID), nil
}

func (t *tracedSession) start(ctx context.Context, call string) (context.Context, TraceSpan) {
	ctx, sp := t.tr.Start(ctx, "browser "+call, SpanInternal)
	sp.SetAttr(traceCall, call)
	sp.SetAttr(traceSessionID, t.id)
	return ctx, sp
}

func (t *tracedSession) Navigate(ctx context.Context, req page.NavigateRequest) (*page.NavigateResult, error) {
	ctx, sp := t.start(ctx, "navigate")
	res, err := t.BrowserSession.Navigate(ctx, req)
	sp.End(err)
	return res, err
}

func (t *tracedSession) Observe(ctx context.Context, req page.ObserveRequest) (*page.Snapshot, error) {
	ctx, sp := t.start(ctx, "observe")
	res, err := t.BrowserSession.Observe(ctx, req)
	sp.End(err)
	return res, err
}

func (t *tracedSession) QueryNodes(ctx context.Context, req page.QueryRequest) (*page.QueryResult, error) {
	ctx, sp := t.start(ctx, "query_nodes")
	res, err := t.BrowserSession.QueryNodes(ctx, req)
	sp.End(err)
	return res, err
}

func (t *tracedSession) Act(ctx context.Context, req page.ActRequest) (*page.ActResult, error) {
	ctx, sp := t.start(ctx, "act")
	sp.SetAttr(traceAction, req.Action)
	res, err := t.BrowserSession.Act(ctx, req)
	sp.End(err)
	return res, err
}

func (t *tracedSession) Release(ctx context.Context, holdID string) (*page.ActResult, error) {
	ctx, sp := t.start(ctx, "release")
	res, err := t.BrowserSession.Release(ctx, holdID)
	sp.End(err)
	return res, err
}

func (t *tracedSession) Deny(ctx context.Context, holdID string) error {
	ctx, sp := t.start(ctx, "deny")
	err := t.BrowserSession.Deny(ctx, holdID)
	sp.End(err)
	return err
}

func (t *tracedSession) ClassifyAction(ctx context.Context, req page.ActRequest) (string, string, error) {
	ctx, sp := t.start(ctx, "classify_action")
	sp.SetAttr(traceAction, req.Action)
	effect, origin, err := t.BrowserSession.ClassifyAction(ctx, req)
	sp.End(err)
	return effect, origin, err
}

func (t *tracedSession) Extract(ctx context.Context, req page.ExtractRequest) (*page.ExtractResult, error) {
	ctx, sp := t.start(ctx, "extract")
	res, err := t.BrowserSession.Extract(ctx, req)
	sp.End(err)
	return res, err
}

func (t *tracedSession) Screenshot(ctx context.Context, req page.ScreenshotRequest) ([]byte, error) {
	ctx, sp := t.start(ctx, "screenshot")
	res, err := t.BrowserSession.Screenshot(ctx, req)
	sp.End(err)
	return res, err
}

func (t *tracedSession) CaptureMHTML(ctx context.Context, contextID string) ([]byte, error) {
	ctx, sp := t.start(ctx, "capture_mhtml")
	res, err := t.BrowserSession.CaptureMHTML(ctx, contextID)
	sp.End(err)
	return res, err
}

func (t *tracedSession) ExportState(ctx context.Context) (*page.StorageState, error) {
	ctx, sp := t.start(ctx, "export_state")
	res, err := t.BrowserSession.ExportState(ctx)
	sp.End(err)
	return res, err
}

func (t *tracedSession) RestoreState(ctx context.Context, st *page.StorageState) (*page.RestoreResult, error) {
	ctx, sp := t.start(ctx, "restore_state")
	res, err := t.BrowserSession.RestoreState(ctx, st)
	sp.End(err)
	return res, err
}

func (t *tracedSession) Close(ctx context.Context) error {
	ctx, sp := t.start(ctx, "close")
	err := t.BrowserSession.Close(ctx)
	sp.End(err)
	return err
}
