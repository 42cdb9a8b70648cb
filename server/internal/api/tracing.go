package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/originweave/bap/server/internal/app"
)

// errServerFailed marks the span of a request answered 5xx (its problem is in the response).
var errServerFailed = errors.New("the server failed the request")

// traceRequests starts one server span per request, a child of the W3C traceparent the request
// carries (a client's, or an MCP tool call's _meta as the adapter passes it on). It runs inside
// observeRequests and names the span by the route template once the request is routed: a span
// holds the method, the route, the operation and the status — never the path (ids), the query, a
// header or the body.
func (s *server) traceRequests(next http.Handler, tr app.Tracer) http.Handler {
	if _, off := tr.(app.NoTracer); off {
		return next // tracing off: not in the request path at all
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := tr.Remote(r.Context(), r.Header.Get("Traceparent"), r.Header.Get("Tracestate"))
		ctx, sp := tr.Start(ctx, r.Method, app.SpanServer)
		sp.SetAttr("http.request.method", r.Method)
		route := s.route(r)
		if route != "" {
			sp.SetAttr("http.route", route)
		}
		defer func() {
			name := r.Method
			if route != "" {
				name += " " + route
			}
			var status int
			if rec, ok := w.(*statusRecorder); ok {
				status = rec.status
			}
			if l, ok := ctx.Value(opKey{}).(*operationLabel); ok && l.name != "other" {
				sp.SetAttr("bap.operation", l.name)
				if route == "" {
					name += " " + l.name
				}
			}
			sp.SetName(name)
			sp.SetInt("http.response.status_code", int64(status))
			var err error
			if status == 0 || status >= 500 {
				err = errServerFailed // 0: a panic, which observeRequests answers 500
			}
			sp.End(err)
		}()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// route is the path template of the operation r is routed to ("" when it is none of the spec's).
func (s *server) route(r *http.Request) string {
	if h, _ := s.opMux.Handler(r); h != nil {
		if oh, ok := h.(opHandler); ok && strings.HasPrefix(oh.op.Path, "/") {
			return oh.op.Path
		}
	}
	return ""
}
