package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/version"
)

// guard is the HTTP front of the MCP endpoint. It runs before the SDK's StreamableHTTPHandler
// and fails closed on what the SDK leaves open or answers too leniently for a modern-only
// server:
//
//   - POST only (405 with Allow: POST);
//   - the caller is authenticated like every BAP request (401 with the RFC 9728 challenge), and a
//     tools/call for a tool whose capability the caller lacks is refused with 403
//     insufficient_scope (with the challenge, for step-up authorization);
//   - the body is bounded (413), one JSON-RPC request or notification, no batch, no response, no
//     duplicate member names (400 with a JSON-RPC error);
//   - only 2026-07-28: no MCP-Protocol-Version header → 400 -32020 (the SDK would serve the
//     request as 2025-03-26); a header that disagrees with _meta → 400 -32020; another version →
//     400 -32022 with {supported, requested};
//   - Mcp-Name in the =?base64?…?= form is decoded (strictly) before the SDK compares it with the
//     body; tasks/get, tasks/update and tasks/cancel must carry Mcp-Name = params.taskId.
//
// Client notifications (none is defined over HTTP in this revision) are acknowledged with 202
// and dropped. The request reaches the SDK with the caller in its context.
type guard struct {
	auth    Authenticator
	next    http.Handler
	maxBody int64
	// scopeOf returns the capability a tool needs (false: no check, the SDK answers).
	scopeOf func(tool string) (string, bool)
	log     *slog.Logger
}

// envelope is a JSON-RPC message as the guard reads it.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeRPCError(w, http.StatusMethodNotAllowed, nil, jsonrpc.CodeInvalidRequest,
			"the MCP endpoint accepts only POST (revision "+version.MCP+": no GET stream, no DELETE)", nil)
		return
	}
	caller, err := g.auth.Authenticate(r)
	if err != nil {
		e := app.AsError(err)
		if e == nil {
			g.log.Warn("mcp: authentication failed", "err", err)
			e = &app.Error{Code: app.CodeUnauthenticated, Detail: "the request could not be authenticated"}
		}
		if e.Code == app.CodeUnauthenticated {
			if ch := g.auth.Challenge(e, ""); ch != "" {
				w.Header().Set("WWW-Authenticate", ch)
			}
		}
		writeProblem(w, e)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeRPCError(w, http.StatusRequestEntityTooLarge, nil, jsonrpc.CodeInvalidRequest,
				fmt.Sprintf("the request body is larger than %d bytes", g.maxBody), nil)
			return
		}
		writeRPCError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest, "the request body could not be read", nil)
		return
	}
	msg, id, rerr := parseEnvelope(body)
	if rerr != nil {
		writeRPCError(w, http.StatusBadRequest, id, rerr.code, rerr.message, nil)
		return
	}
	var method string
	_ = json.Unmarshal(msg.Method, &method)
	if id == nil {
		// A notification: this revision defines none from client to server over HTTP.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if status, code, message, data := checkVersion(r.Header, msg.Params); code != 0 {
		writeRPCError(w, status, id, code, message, data)
		return
	}
	if err := decodeNameHeader(r.Header); err != nil {
		writeRPCError(w, http.StatusBadRequest, id, mcp.CodeHeaderMismatch, err.Error(), nil)
		return
	}
	switch method {
	case methodTasksGet, methodTasksUpdate, methodTasksCancel:
		if err := checkTaskNameHeader(r.Header, msg.Params); err != nil {
			writeRPCError(w, http.StatusBadRequest, id, mcp.CodeHeaderMismatch, err.Error(), nil)
			return
		}
	case "tools/call":
		if g.scopeOf != nil {
			var p struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(msg.Params, &p)
			if scope, ok := g.scopeOf(p.Name); ok && !caller.Scopes[scope] {
				if ch := g.auth.Challenge(nil, scope); ch != "" {
					w.Header().Set("WWW-Authenticate", ch)
				}
				writeProblem(w, app.Errorf(app.CodeInsufficientScope, "the tool %s needs the %s capability", p.Name, scope))
				return
			}
		}
	}
	ctx := WithCaller(r.Context(), caller)
	ctx = context.WithValue(ctx, originKey{}, origin{remoteAddr: r.RemoteAddr, host: r.Host})
	r2 := r.Clone(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	g.next.ServeHTTP(w, r2)
}

type rpcError struct {
	code    int64
	message string
}

// parseEnvelope checks that body is one JSON-RPC 2.0 request or notification. It returns the
// request id (nil for a notification or when none could be read).
func parseEnvelope(body []byte) (*envelope, json.RawMessage, *rpcError) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, nil, &rpcError{jsonrpc.CodeInvalidRequest, "the body must be one JSON-RPC request"}
	}
	if !json.Valid(trimmed) {
		return nil, nil, &rpcError{jsonrpc.CodeParseError, "the body is not valid JSON"}
	}
	switch trimmed[0] {
	case '[':
		return nil, nil, &rpcError{jsonrpc.CodeInvalidRequest, "JSON-RPC batches are not supported: send one request per POST"}
	case '{':
	default:
		return nil, nil, &rpcError{jsonrpc.CodeInvalidRequest, "the body must be a JSON-RPC request object"}
	}
	var msg envelope
	if err := json.Unmarshal(trimmed, &msg); err != nil {
		return nil, nil, &rpcError{jsonrpc.CodeInvalidRequest, "the body must be a JSON-RPC request object"}
	}
	var id json.RawMessage
	if len(msg.ID) > 0 {
		switch msg.ID[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			id = msg.ID
		default:
			return nil, nil, &rpcError{jsonrpc.CodeInvalidRequest, "the request id must be a string or a number"}
		}
	}
	if dup := duplicateMember(trimmed); dup != "" {
		return nil, id, &rpcError{jsonrpc.CodeInvalidRequest, fmt.Sprintf("duplicate member %q in the request", dup)}
	}
	if msg.JSONRPC != "2.0" {
		return nil, id, &rpcError{jsonrpc.CodeInvalidRequest, `"jsonrpc" must be "2.0"`}
	}
	if len(msg.Method) == 0 {
		if len(msg.Result) > 0 || len(msg.Error) > 0 {
			return nil, id, &rpcError{jsonrpc.CodeInvalidRequest, "clients must not send JSON-RPC responses in this revision"}
		}
		return nil, id, &rpcError{jsonrpc.CodeInvalidRequest, `the request has no "method"`}
	}
	var method string
	if err := json.Unmarshal(msg.Method, &method); err != nil || method == "" {
		return nil, id, &rpcError{jsonrpc.CodeInvalidRequest, `"method" must be a non-empty string`}
	}
	if len(msg.Params) > 0 && msg.Params[0] != '{' && string(msg.Params) != "null" {
		return nil, id, &rpcError{jsonrpc.CodeInvalidRequest, `"params" must be an object`}
	}
	return &msg, id, nil
}

// duplicateMember returns the first member name that appears twice in one object of a valid
// JSON document, or "". Parsers disagree on duplicates (first or last wins); refusing them keeps
// the guard, the SDK and the BAP API reading the same request.
func duplicateMember(doc []byte) string {
	dec := json.NewDecoder(bytes.NewReader(doc))
	type frame struct {
		object    bool
		expectKey bool
		seen      map[string]bool
	}
	var stack []*frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].expectKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var top *frame
		if n := len(stack); n > 0 {
			top = stack[n-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &frame{object: true, expectKey: true, seen: map[string]bool{}})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
		case string:
			if top != nil && top.object && top.expectKey {
				if top.seen[t] {
					return t
				}
				top.seen[t] = true
				top.expectKey = false
				continue
			}
			valueDone()
		default:
			valueDone()
		}
	}
}

// checkVersion enforces the only revision this endpoint speaks. It returns code 0 when the
// request may go on (the SDK then checks _meta and the other headers).
func checkVersion(h http.Header, params json.RawMessage) (status int, code int64, message string, data any) {
	header := strings.TrimSpace(h.Get("Mcp-Protocol-Version"))
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	_ = json.Unmarshal(params, &p)
	var metaVersion string
	if raw, ok := p.Meta[mcp.MetaKeyProtocolVersion]; ok {
		_ = json.Unmarshal(raw, &metaVersion)
	}
	switch {
	case header == "":
		return http.StatusBadRequest, mcp.CodeHeaderMismatch,
			"the MCP-Protocol-Version header is required: this server speaks MCP " + version.MCP + " only (no initialize handshake)", nil
	case metaVersion != "" && metaVersion != header:
		return http.StatusBadRequest, mcp.CodeHeaderMismatch,
			fmt.Sprintf("the MCP-Protocol-Version header %q does not match _meta %q", header, metaVersion), nil
	case header != version.MCP:
		return http.StatusBadRequest, mcp.CodeUnsupportedProtocolVersion,
			"unsupported protocol version: this server speaks MCP " + version.MCP + " only",
			mcp.UnsupportedProtocolVersionData{Supported: []string{version.MCP}, Requested: header}
	}
	return 0, 0, "", nil
}

const (
	base64Prefix = "=?base64?"
	base64Suffix = "?="
)

// decodeHeaderValue decodes the SEP-2243 =?base64?…?= form; other values are literal.
func decodeHeaderValue(v string) (string, error) {
	inner, ok := strings.CutPrefix(v, base64Prefix)
	if !ok {
		return v, nil
	}
	inner, ok = strings.CutSuffix(inner, base64Suffix)
	if !ok {
		return v, nil
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(inner)
	if err != nil {
		return "", errors.New("the Mcp-Name header holds invalid Base64")
	}
	return string(raw), nil
}

// decodeNameHeader replaces a Base64-encoded Mcp-Name with its value, so that the SDK compares
// the decoded name with the body.
func decodeNameHeader(h http.Header) error {
	vals := h.Values("Mcp-Name")
	if len(vals) > 1 {
		return errors.New("more than one Mcp-Name header")
	}
	if len(vals) == 0 {
		return nil
	}
	v, err := decodeHeaderValue(strings.TrimSpace(vals[0]))
	if err != nil {
		return err
	}
	h.Set("Mcp-Name", v)
	return nil
}

// checkTaskNameHeader enforces the Tasks extension's routing header: Mcp-Name = params.taskId.
func checkTaskNameHeader(h http.Header, params json.RawMessage) error {
	var p struct {
		TaskID *string `json:"taskId"`
	}
	_ = json.Unmarshal(params, &p)
	name := h.Get("Mcp-Name")
	if p.TaskID == nil {
		return nil // the method answers -32602 for the missing taskId
	}
	if name == "" {
		return errors.New("missing required Mcp-Name header (the taskId) for a tasks method")
	}
	if name != *p.TaskID {
		return errors.New("header mismatch: the Mcp-Name header does not match params.taskId")
	}
	return nil
}

// writeRPCError answers a JSON-RPC error with an HTTP status; id may be nil (JSON null).
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int64, message string, data any) {
	type wireErr struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}
	if id == nil {
		id = json.RawMessage("null")
	}
	body, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   wireErr         `json:"error"`
	}{"2.0", id, wireErr{code, message, data}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
