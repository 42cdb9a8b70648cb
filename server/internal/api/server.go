package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/originweave/bap/server/internal/admission"
	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/idempotency"
	"github.com/originweave/bap/server/internal/version"
)

// Options configures the transport.
type Options struct {
	// Service runs the use-cases.
	Service *app.Service
	// Authenticator identifies callers of non-anonymous routes.
	Authenticator Authenticator
	// Logger receives one line per request (no bodies, no query strings).
	Logger *slog.Logger
	// Registry receives the transport's metrics and is served at /metrics (loopback callers only).
	Registry *prometheus.Registry
	// MaxBodyBytes bounds request bodies; larger → 413 payload_too_large (default 1 MiB).
	MaxBodyBytes int64
	// Ready reports whether the server may take requests (for /readyz).
	Ready func(ctx context.Context) error
	// Warnings, when set, lists the node's standing warnings (e.g. a browser without its sandbox);
	// a ready /readyz carries them as its detail, so monitoring sees them.
	Warnings func() []string
	// Audit, when set, records refused requests (401, 403, 429) in the authorization audit trail.
	Audit AuditLog
	// Limiter, when set, bounds each client's request rate (429 rate_limited with Retry-After).
	Limiter Limiter
	// Mount serves more anonymous routes (pattern → handler, e.g. the OAuth endpoints of the
	// remote profile) behind the same request log and metrics; they label metrics by Label.
	Mount []Mount
	// Streams opens the event streams (stream.go); nil answers them 501 not_implemented.
	Streams EventStreams
	// StreamHeartbeat is the idle interval between keep-alives on a stream (default 15 s).
	StreamHeartbeat time.Duration
	// Admission bounds the requests in flight per tenant and per node (admission.go).
	Admission Admission
	// Cluster, when set, forwards requests for objects another live node owns to that node and
	// accepts the other nodes' node credentials (forward.go, ADR 0012).
	Cluster *Cluster
	// Tracer, when set, records a server span per request, the child of its traceparent
	// (tracing.go); nil records none.
	Tracer app.Tracer
}

// Mount is an extra anonymous route of the transport.
type Mount struct {
	Pattern string
	Label   string
	Handler http.Handler
}

// server implements the generated apigen.ServerInterface: one method per route of the spec.
type server struct {
	svc     *app.Service
	auth    Authenticator
	log     *slog.Logger
	maxBody int64
	ready   func(ctx context.Context) error
	warn    func() []string
	spec    *specIndex
	audit   AuditLog
	limiter Limiter
	// opMux maps a request to the operation whose route it matches (before any handler runs).
	opMux  *http.ServeMux
	stream streamOptions
	fwd    *forwarder // nil: a single node
	// admission bounds the requests in flight (admission.go).
	admission Admission
}

var _ apigen.ServerInterface = (*server)(nil)

type principalKey struct{}
type opCtxKey struct{}

// New builds the HTTP handler of the BAP API.
func New(o Options) (http.Handler, error) {
	if o.Service == nil || o.Authenticator == nil {
		return nil, errors.New("api: Service and Authenticator are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.Ready == nil {
		o.Ready = func(context.Context) error { return nil }
	}
	idx, err := loadSpec(apigen.OpenAPI)
	if err != nil {
		return nil, err
	}
	s := &server{svc: o.Service, auth: o.Authenticator, log: o.Logger, maxBody: o.MaxBodyBytes,
		ready: o.Ready, warn: o.Warnings, spec: idx, opMux: http.NewServeMux(), audit: o.Audit, limiter: o.Limiter}
	s.stream = newStreamOptions(o)
	s.admission = o.Admission
	if o.Cluster != nil {
		if s.fwd, err = newForwarder(o.Cluster, o.Logger); err != nil {
			return nil, err
		}
	}
	for _, op := range idx.ops {
		op := op
		s.opMux.Handle(op.Method+" "+op.Path, opHandler{op})
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	apigen.HandlerWithOptions(s, apigen.StdHTTPServerOptions{BaseRouter: mux, ErrorHandlerFunc: s.bindError})
	mux.HandleFunc("GET /bap/v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		setOpLabel(r.Context(), "openapi_document")
		writeRaw(w, http.StatusOK, "application/json", apigen.OpenAPI)
	})
	mux.HandleFunc("GET /bap/v1/asyncapi.json", func(w http.ResponseWriter, r *http.Request) {
		setOpLabel(r.Context(), "asyncapi_document")
		writeRaw(w, http.StatusOK, "application/json", apigen.AsyncAPI)
	})
	metricsHandler := promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		setOpLabel(r.Context(), "metrics")
		if !fromLoopback(r) {
			writeProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "no such route"})
			return
		}
		metricsHandler.ServeHTTP(w, r)
	})
	for _, m := range o.Mount {
		m := m
		mux.HandleFunc(m.Pattern, func(w http.ResponseWriter, r *http.Request) {
			setOpLabel(r.Context(), m.Label)
			m.Handler.ServeHTTP(w, r)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, &app.Error{Code: app.CodeNotFound, Detail: "no such route"})
	})
	return observeRequests(s.traceRequests(s.authenticate(mux), app.TracerOrNone(o.Tracer)), o.Logger, m), nil
}

// opHandler marks a route of opMux with its operation.
type opHandler struct{ op *operation }

func (opHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// fromLoopback reports whether the request came over loopback TCP or the Unix socket.
func fromLoopback(r *http.Request) bool {
	if r.RemoteAddr == "" || r.RemoteAddr == "@" {
		return true // Unix socket
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authenticate identifies the caller of every route that needs a capability and checks the
// capability, before any parameter or body is looked at: 401 and 403 come before 400.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, _ := s.opMux.Handler(r)
		oh, ok := h.(opHandler)
		if !ok || oh.op.Scope == "" {
			next.ServeHTTP(w, r)
			return
		}
		setOpLabel(r.Context(), oh.op.ID)
		challenger, _ := s.auth.(Challenger)
		p, forwarded, err := s.authenticateRequest(w, r, oh.op)
		if err != nil {
			e := app.AsError(err)
			if e == nil {
				s.log.Warn("authentication failed", "operation", oh.op.ID, "err", err)
				e = &app.Error{Code: app.CodeUnauthenticated, Detail: "the request could not be authenticated"}
			}
			if challenger != nil && e.Code == app.CodeUnauthenticated {
				w.Header().Set("WWW-Authenticate", challenger.Challenge(e, ""))
			}
			s.refused(r, oh.op, Principal{}, string(e.Code))
			writeProblem(w, e)
			return
		}
		if !p.Scopes[oh.op.Scope] && !elicitedAnswer(oh.op, p) {
			if challenger != nil {
				w.Header().Set("WWW-Authenticate", challenger.Challenge(nil, oh.op.Scope))
			}
			s.refused(r, oh.op, p, string(app.CodeInsufficientScope))
			writeProblem(w, &app.Error{Code: app.CodeInsufficientScope, Detail: scopeDetail(p, oh.op.Scope)})
			return
		}
		if s.limiter != nil && p.ClientID != "" && !forwarded { // the forwarding node counted it
			if ok, wait := s.limiter.Allow(p.ClientID); !ok {
				s.admission.Refusals.Add(admission.ClientRate)
				s.refused(r, oh.op, p, string(app.CodeRateLimited))
				writeProblem(w, &app.Error{Code: app.CodeRateLimited, Detail: "this client sends requests faster than its rate limit", RetryAfter: wait})
				return
			}
		}
		release, admitted := s.admit(w, r, oh.op, p) // in-flight caps (admission.go)
		if !admitted {
			return
		}
		defer release()
		if !forwarded {
			s.decided(r, oh.op, p, app.AuthAllowed, "") // the owner node, when it forwards, records nothing again
		}
		if !forwarded && s.forward(w, r, oh.op, p) {
			return // its owner node answered
		}
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		ctx = context.WithValue(ctx, opCtxKey{}, oh.op)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// elicitedAnswer reports whether r is the MCP adapter's resolve_approval for the answer its caller
// gave to the elicitation of the caller's own held act (Via is set in-process only). It needs the
// act's capability instead of bap:approvals.resolve; the use-case then accepts it only for an
// approval whose rule has channel elicitation, requested by this caller (app.mayResolve).
func elicitedAnswer(op *operation, p Principal) bool {
	return op.ID == "resolve_approval" && p.Via == app.ViaElicitation && p.Scopes["bap:browser.act"]
}

// refused records a refused request in the audit trail (when one is configured).
func (s *server) refused(r *http.Request, op *operation, p Principal, reason string) {
	s.decided(r, op, p, app.AuthRefused, reason)
}

// decided records the request's authorization in the audit trail (when one is configured): the
// authenticated principal (actor, workload, tenant, channel) and what the route names (task,
// session, approval; the writer adds a session's or approval's task), never anything of the body. The policy's own decisions are recorded by the commands
// that take them (app/decisions.go).
func (s *server) decided(r *http.Request, op *operation, p Principal, outcome, reason string) {
	if s.audit == nil {
		return
	}
	via := p.Via
	if via == "" && p.Actor.Subject != "" {
		via = app.ViaAPI
	}
	s.audit.RecordAuthDecision(r.Context(), app.AuthDecision{
		Time: time.Now(), Tenant: p.Actor.Tenant, Subject: p.Actor.Subject, ClientID: p.ClientID,
		Operation: op.ID, TaskID: taskIDOf(r.URL.Path), Scope: op.Scope, Outcome: outcome, Reason: reason,
		Point: app.PointRequest, Via: via, SessionID: sessionIDOf(r.URL.Path), ApprovalID: approvalIDOf(r.URL.Path),
	})
}

// approvalIDOf returns the approval id of a /bap/v1/approvals/{approval_id}… path: the audit
// writer records the approval's task with it, tenant-scoped (a route that names no task).
func approvalIDOf(path string) string { return routeID(path, "/bap/v1/approvals/", "apr_") }

// sessionIDOf returns the session id of a /bap/v1/browser-sessions/{session_id}… path.
func sessionIDOf(path string) string { return routeID(path, "/bap/v1/browser-sessions/", "bs_") }

// taskIDOf returns the task id of a /bap/v1/tasks/{task_id}… path (the router has not run yet).
func taskIDOf(path string) string { return routeID(path, "/bap/v1/tasks/", "tsk_") }

// routeID returns the path segment after route when it looks like an id of kind (its prefix);
// "" otherwise.
func routeID(path, route, kind string) string {
	rest, ok := strings.CutPrefix(path, route)
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	if len(id) > 80 || !strings.HasPrefix(id, kind) {
		return ""
	}
	return id
}

// bindError answers a parameter the generated router could not bind.
func (s *server) bindError(w http.ResponseWriter, r *http.Request, err error) {
	var req *apigen.RequiredHeaderError
	if errors.As(err, &req) && strings.EqualFold(req.ParamName, "Idempotency-Key") {
		writeProblem(w, &app.Error{Code: app.CodeIdempotencyKeyRequired, Detail: "mutating operations need an Idempotency-Key header"})
		return
	}
	name := "a parameter"
	var inv *apigen.InvalidParamFormatError
	if errors.As(err, &inv) {
		name = "parameter " + strconv.Quote(inv.ParamName)
	}
	var tm *apigen.TooManyValuesForParamError
	if errors.As(err, &tm) {
		name = "parameter " + strconv.Quote(tm.ParamName)
	}
	writeProblem(w, app.Errorf(app.CodeInvalidRequest, "%s is missing or malformed", name))
}

// request is a validated request, ready for a use-case.
type request struct {
	op        *operation
	principal Principal
	body      []byte
	decoded   any // body as decoded for validation (numbers as json.Number)
	call      app.Call
}

// begin validates what the generated router does not: path and query parameters against their
// schemas, the body (size, media type, schema), and for mutating operations the Idempotency-Key.
// It answers the problem itself and returns ok=false when the request is refused.
func (s *server) begin(w http.ResponseWriter, r *http.Request, target ...string) (*request, bool) {
	op, _ := r.Context().Value(opCtxKey{}).(*operation)
	p, _ := r.Context().Value(principalKey{}).(Principal)
	if op == nil {
		writeProblem(w, &app.Error{Code: app.CodeInternal, Detail: "route without operation"})
		return nil, false
	}
	req := &request{op: op, principal: p}
	var violations []Violation
	for name, prm := range op.params {
		var raw string
		var present bool
		if prm.in == "path" {
			raw = r.PathValue(name)
			present = raw != ""
		} else {
			vals, ok := r.URL.Query()[name]
			present = ok
			if ok {
				raw = vals[0]
			}
		}
		if !present {
			continue
		}
		var v any = raw
		if prm.integer {
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil {
				violations = append(violations, Violation{Pointer: "/" + prm.in + "/" + name, Message: "must be an integer"})
				continue
			}
			v = jsonNumber(n)
		}
		violations = append(violations, validateValue(prm.schema, v, "/"+prm.in+"/"+name)...)
	}
	if len(violations) > 0 {
		writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request's parameters do not match the specification"}, violations...)
		return nil, false
	}
	if op.body != nil {
		body, ok := s.readBody(w, r)
		if !ok {
			return nil, false
		}
		v, err := decodeBody(body)
		if err != nil {
			writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body is not valid JSON"})
			return nil, false
		}
		if vs := validateValue(op.body, v, ""); len(vs) > 0 {
			writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body does not match the specification"}, vs...)
			return nil, false
		}
		req.body = body
		req.decoded = v
	}
	if op.Mutating {
		raw := r.Header.Get("Idempotency-Key")
		if raw == "" {
			writeProblem(w, &app.Error{Code: app.CodeIdempotencyKeyRequired, Detail: "mutating operations need an Idempotency-Key header"})
			return nil, false
		}
		key, err := idempotency.ParseKey(raw)
		if err != nil {
			writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: err.Error()})
			return nil, false
		}
		var decoded any = map[string]any{}
		if req.decoded != nil {
			decoded = req.decoded
		}
		canon, err := idempotency.CanonicalValue(decoded)
		if err != nil {
			writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body is not valid JSON"})
			return nil, false
		}
		// Keyed (ADR 0015); the unkeyed one is only compared with records of earlier releases.
		req.call = app.Call{Actor: p.Actor, ClientID: p.ClientID, Via: p.Via, Operation: op.ID, IdempotencyKey: key,
			Fingerprint: s.svc.Fingerprints().Sum(op.ID, target, canon), LegacyFingerprint: idempotency.LegacySum(op.ID, target, canon),
			Delivery: p.delivery}
	}
	return req, true
}

// readBody reads at most maxBody bytes of a JSON body. A body comes as application/json or not
// at all (415 unsupported_media_type): a cross-site "simple" request — a form or a fetch without
// a preflight — can only send text/plain, form or multipart bodies, so no page can post one here
// on its visitor's behalf. An absent body (optional ones count as {}) needs no Content-Type.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	cts := r.Header.Values("Content-Type")
	if len(cts) > 1 || (len(cts) == 1 && !IsJSONMediaType(cts[0])) {
		writeProblem(w, &app.Error{Code: app.CodeUnsupportedMediaType, Detail: "a request body must be sent as Content-Type: application/json"})
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, app.Errorf(app.CodePayloadTooLarge, "the body is larger than %d bytes", s.maxBody))
			return nil, false
		}
		writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the body could not be read"})
		return nil, false
	}
	if len(body) > 0 && len(cts) == 0 {
		writeProblem(w, &app.Error{Code: app.CodeUnsupportedMediaType, Detail: "a request body must be sent as Content-Type: application/json"})
		return nil, false
	}
	return body, true
}

// IsJSONMediaType reports whether a Content-Type field value is application/json, with no
// parameter but an optional charset=utf-8 (JSON is UTF-8: RFC 8259).
func IsJSONMediaType(v string) bool {
	mt, params, err := mime.ParseMediaType(v)
	if err != nil || mt != "application/json" {
		return false
	}
	for k, p := range params {
		if k != "charset" || !strings.EqualFold(p, "utf-8") {
			return false
		}
	}
	return true
}

// reply writes the response of a mutating use-case, or its refusal.
func (s *server) reply(w http.ResponseWriter, r *http.Request, resp app.Response, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if resp.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	ct := "application/json"
	if resp.Status >= 400 {
		ct = "application/problem+json"
	}
	writeRaw(w, resp.Status, ct, resp.Body)
}

// fail answers an error of a use-case: its problem, or a 500 that hides the internal cause.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if e := app.AsError(err); e != nil {
		writeProblem(w, e)
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away; nothing to answer
	}
	s.log.Error("request failed", "operation", r.Context().Value(opCtxKey{}).(*operation).ID, "err", err)
	writeProblem(w, &app.Error{Code: app.CodeInternal, Detail: "the server failed while handling this request"})
}

// decode unmarshals a validated body into v.
func decode(body []byte, v any) error {
	if len(body) == 0 {
		return nil
	}
	return json.Unmarshal(body, v)
}

// GetServiceInfo implements apigen.ServerInterface.
func (s *server) GetServiceInfo(w http.ResponseWriter, r *http.Request) {
	setOpLabel(r.Context(), "get_service_info")
	// The adapters this node recorded at start (protocol_adapter), not a list kept in code.
	recorded, err := s.svc.ProtocolAdapters(r.Context())
	if err != nil {
		s.log.Error("reading the protocol adapters", "err", err)
		writeProblem(w, &app.Error{Code: app.CodeOverloaded, Detail: "the protocol adapters cannot be read now; retry", RetryAfter: time.Second})
		return
	}
	adapters := make([]apigen.ProtocolAdapter, 0, len(recorded))
	for _, a := range recorded {
		pa := apigen.ProtocolAdapter{AdapterId: a.ID, Name: a.Name, ProtocolVersion: a.ProtocolVersion}
		if a.Implementation != "" {
			pa.Implementation = ptr(a.Implementation)
		}
		adapters = append(adapters, pa)
	}
	writeJSON(w, http.StatusOK, apigen.ServiceInfo{Protocol: "bap", Version: version.BAP, Adapters: adapters, Engines: toEngines(s.svc.Engines())})
}

// GetHealthz implements apigen.ServerInterface.
func (s *server) GetHealthz(w http.ResponseWriter, r *http.Request) {
	setOpLabel(r.Context(), "healthz")
	writeJSON(w, http.StatusOK, apigen.HealthStatus{Status: apigen.HealthStateOk})
}

// GetReadyz implements apigen.ServerInterface.
func (s *server) GetReadyz(w http.ResponseWriter, r *http.Request) {
	setOpLabel(r.Context(), "readyz")
	if err := s.ready(r.Context()); err != nil {
		detail := "not ready"
		writeJSON(w, http.StatusServiceUnavailable, apigen.HealthStatus{Status: apigen.HealthStateNotReady, Detail: &detail})
		return
	}
	ready := apigen.HealthStatus{Status: apigen.HealthStateReady}
	if s.warn != nil {
		if ws := s.warn(); len(ws) > 0 {
			detail := "warning: " + strings.Join(ws, "; warning: ")
			ready.Detail = &detail
		}
	}
	writeJSON(w, http.StatusOK, ready)
}

// toEngines is the engine registry's view of this node's engines, its default first (ADR 0025).
func toEngines(engines []app.Engine) []apigen.Engine {
	out := make([]apigen.Engine, 0, len(engines))
	for i, e := range engines {
		caps := make([]apigen.EngineCapability, 0, len(e.Capabilities))
		for _, c := range e.Capabilities {
			caps = append(caps, apigen.EngineCapability(c))
		}
		out = append(out, apigen.Engine{Engine: apigen.BrowserEngine(e.Name), AdapterId: e.AdapterID, Version: nonEmpty(e.Version),
			Default: i == 0, Available: e.Available, Capabilities: caps})
	}
	return out
}
