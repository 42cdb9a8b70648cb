package api

import (
	"net/http"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
)

// The browser operations: decode the validated body into the page vocabulary, call the use-case,
// render the result. Mutating ones store their rendered response with the command (see
// convert.go's responders); reads answer directly.

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// CreateBrowserSession implements apigen.ServerInterface.
func (s *server) CreateBrowserSession(w http.ResponseWriter, r *http.Request, taskID apigen.TaskId, _ apigen.CreateBrowserSessionParams) {
	req, ok := s.begin(w, r, taskID)
	if !ok {
		return
	}
	var body apigen.CreateBrowserSessionRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	sr := app.SessionRequest{FromCheckpoint: deref(body.FromCheckpoint)}
	if body.Engine != nil {
		if !body.Engine.Valid() { // the schema's enum, checked again where it is read
			writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "engine must be one of the spec's browser engines (chromium, firefox)"})
			return
		}
		sr.Engine = string(*body.Engine)
	}
	resp, err := s.svc.CreateBrowserSession(r.Context(), req.call, taskID, sr, sessionResponder(201, true))
	s.reply(w, r, resp, err)
}

// CloseBrowserSession implements apigen.ServerInterface.
func (s *server) CloseBrowserSession(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.CloseBrowserSessionParams) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	resp, err := s.svc.CloseBrowserSession(r.Context(), req.call, id, sessionResponder(200, false))
	s.reply(w, r, resp, err)
}

// Navigate implements apigen.ServerInterface.
func (s *server) Navigate(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.NavigateParams) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	var body apigen.NavigateRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	in := page.NavigateRequest{ContextID: deref(body.ContextId), URL: body.Url, WaitUntil: string(deref(body.WaitUntil))}
	resp, err := s.svc.Navigate(r.Context(), req.call, id, in, deref(body.TimeoutMs), navigateResponder)
	s.reply(w, r, resp, err)
}

// Act implements apigen.ServerInterface.
func (s *server) Act(w http.ResponseWriter, r *http.Request, id apigen.SessionId, _ apigen.ActParams) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	var body apigen.ActRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	if !s.allowUpload(w, r, req.principal, body.Action == apigen.ActActionUploadFile) { // upload.go
		return
	}
	in := page.ActRequest{
		ContextID: deref(body.ContextId), Action: string(body.Action), NodeID: deref(body.NodeId),
		Value: deref(body.Value), SecretRef: deref(body.SecretRef), Values: deref(body.Values), Key: deref(body.Key), Query: fromQuery(body.Query),
	}
	resp, err := s.svc.Act(r.Context(), req.call, id, in, deref(body.ArtifactId), deref(body.TimeoutMs), actResponder)
	s.reply(w, r, resp, err)
}

// Observe implements apigen.ServerInterface.
func (s *server) Observe(w http.ResponseWriter, r *http.Request, id apigen.SessionId) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	var body apigen.ObserveRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	snap, err := s.svc.Observe(r.Context(), req.principal.Actor, id, page.ObserveRequest{
		ContextID: deref(body.ContextId), Within: deref(body.Within), MaxNodes: deref(body.MaxNodes), Mode: string(deref(body.Mode)),
		Since: deref(body.Since), Cursor: deref(body.Cursor), MaxBytes: deref(body.MaxBytes),
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apigen.ObserveResponse{ContextId: snap.ContextID, EpochId: snap.EpochID, Url: snap.URL, Title: snap.Title,
		Nodes: toNodes(snap.Nodes), ObservationId: snap.ObservationID, Since: nonEmpty(snap.Since), ApproxTokens: snap.ApproxTokens}
	if snap.Truncated {
		out.Truncated = ptr(true)
	}
	if c := snap.Continuation; c != nil {
		out.Continuation = &apigen.ObserveContinuation{Cursor: c.Cursor, Part: c.Part, RemainingNodes: c.RemainingNodes}
	}
	writeJSON(w, http.StatusOK, out)
}

// QueryNodes implements apigen.ServerInterface.
func (s *server) QueryNodes(w http.ResponseWriter, r *http.Request, id apigen.SessionId) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	var body apigen.QueryNodesRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	res, err := s.svc.QueryNodes(r.Context(), req.principal.Actor, id, page.QueryRequest{
		ContextID: deref(body.ContextId), Query: *fromQuery(&body.Query), Limit: deref(body.Limit),
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apigen.QueryNodesResponse{EpochId: res.EpochID, Nodes: toNodes(res.Nodes)}
	if body.ContextId != nil {
		out.ContextId = body.ContextId
	}
	writeJSON(w, http.StatusOK, out)
}

// Extract implements apigen.ServerInterface.
func (s *server) Extract(w http.ResponseWriter, r *http.Request, id apigen.SessionId) {
	req, ok := s.begin(w, r, id)
	if !ok {
		return
	}
	var body apigen.ExtractRequest
	if !s.decodeBody(w, req, &body) {
		return
	}
	in := page.ExtractRequest{ContextID: deref(body.ContextId), Kind: string(body.Kind), NodeID: deref(body.NodeId), Query: fromQuery(body.Query)}
	if body.Schema != nil {
		raw, err := jsonMarshal(*body.Schema)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		in.Schema = raw
	}
	if body.Fields != nil && len(*body.Fields) > 0 {
		in.Fields = map[string]page.Query{}
		for k, q := range *body.Fields {
			in.Fields[k] = *fromQuery(&q)
		}
	}
	res, err := s.svc.Extract(r.Context(), req.principal.Actor, id, in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apigen.ExtractResponse{EpochId: res.EpochID, Data: res.Data, Kind: ptr(body.Kind), ContextId: body.ContextId})
}

// decodeBody decodes a validated body, answering the problem itself on failure.
func (s *server) decodeBody(w http.ResponseWriter, req *request, v any) bool {
	if err := decode(req.body, v); err != nil {
		writeProblem(w, &app.Error{Code: app.CodeInvalidRequest, Detail: "the request body does not match the specification"})
		return false
	}
	return true
}
