package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/originweave/bap/server/internal/app"
)

// A tool call is one request to the BAP HTTP API, made in-process: the tool's path and query
// arguments fill the operation's route, `idempotency_key` becomes the Idempotency-Key header and
// every other argument is the JSON body. The API validates, authorizes (the caller rides in the
// request context, see CallerFrom), runs the use-case and renders the answer exactly as for an
// HTTP client; the adapter only wraps that answer in a CallToolResult.

// Result _meta keys (vendor prefix io.originweave.bap, outside the reserved MCP prefixes).
const (
	metaStatus     = "io.originweave.bap/status"     // the HTTP status BAP answered (201, 202, 409…)
	metaReplayed   = "io.originweave.bap/replayed"   // true when the result is an idempotent replay
	metaRetryAfter = "io.originweave.bap/retryAfter" // seconds, when BAP asked the caller to wait
)

// apiResponse is what the BAP API answered to an in-process request.
type apiResponse struct {
	status int
	header http.Header
	body   []byte
}

// origin is what the in-process request inherits from the MCP HTTP request.
type origin struct {
	remoteAddr string
	host       string
}

type originKey struct{}

// dispatcher sends in-process requests to the BAP API.
type dispatcher struct {
	api http.Handler
}

// do serves r with the API and records the answer.
func (d dispatcher) do(r *http.Request) apiResponse {
	rec := &recorder{header: http.Header{}}
	d.api.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return apiResponse{status: rec.status, header: rec.header, body: rec.buf.Bytes()}
}

// recorder is the http.ResponseWriter of an in-process request.
type recorder struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.buf.Write(p)
}

// buildRequest turns a tool call's arguments into the in-process request of rt's operation. It
// answers an invalid_request problem for arguments that cannot become a request (the API judges
// everything else: schemas, sizes, the idempotency key).
func buildRequest(ctx context.Context, rt *route, raw json.RawMessage, traceparent string) (*http.Request, map[string]string, *app.Error) {
	args := map[string]json.RawMessage{}
	pathVals := map[string]string{}
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, nil, invalidArguments("the tool's arguments must be a JSON object")
		}
	}
	path := rt.path
	for _, name := range rt.pathArgs {
		v, ok := args[name]
		if !ok {
			return nil, nil, invalidArguments(fmt.Sprintf("the argument %q is required", name))
		}
		delete(args, name)
		var s string
		if err := json.Unmarshal(v, &s); err != nil || s == "" {
			return nil, nil, invalidArguments(fmt.Sprintf("the argument %q must be a non-empty string", name))
		}
		pathVals[name] = s
		path = strings.Replace(path, "{"+name+"}", url.PathEscape(s), 1)
	}
	q := url.Values{}
	for _, name := range rt.query {
		v, ok := args[name]
		if !ok {
			continue
		}
		delete(args, name)
		if string(v) == "null" {
			continue
		}
		var n json.Number
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		if err := dec.Decode(&n); err != nil {
			return nil, nil, invalidArguments(fmt.Sprintf("the argument %q must be an integer", name))
		}
		if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
			return nil, nil, invalidArguments(fmt.Sprintf("the argument %q must be an integer", name))
		}
		q.Set(name, n.String())
	}
	var key string
	var hasKey bool
	if rt.tool.Mutating {
		if v, ok := args[idempotencyArg]; ok {
			delete(args, idempotencyArg)
			if err := json.Unmarshal(v, &key); err != nil {
				return nil, nil, invalidArguments(fmt.Sprintf("the argument %q must be a string", idempotencyArg))
			}
			hasKey = true
		}
	}
	var body []byte
	if rt.body {
		var err error
		if body, err = json.Marshal(args); err != nil {
			return nil, nil, invalidArguments("the tool's arguments could not be encoded")
		}
	} else if len(args) > 0 {
		names := make([]string, 0, len(args))
		for n := range args {
			names = append(names, strconv.Quote(n))
		}
		slices.Sort(names)
		return nil, nil, invalidArguments(fmt.Sprintf("%s takes no argument %s", rt.tool.Name, strings.Join(names, ", ")))
	}
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var rd *bytes.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	var r *http.Request
	var err error
	if rd != nil {
		r, err = http.NewRequestWithContext(ctx, rt.method, target, rd)
	} else {
		r, err = http.NewRequestWithContext(ctx, rt.method, target, http.NoBody)
	}
	if err != nil {
		return nil, nil, invalidArguments("the tool's arguments do not form a valid request")
	}
	if o, ok := ctx.Value(originKey{}).(origin); ok {
		r.RemoteAddr, r.Host = o.remoteAddr, o.host
	}
	r.Header.Set("Accept", "application/json")
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if hasKey {
		r.Header.Set("Idempotency-Key", key)
	}
	if traceparent != "" {
		r.Header.Set("Traceparent", traceparent)
	}
	return r, pathVals, nil
}

// toolResult wraps the API's answer: the BAP JSON in structuredContent (and, for clients that
// only read content, as text); a problem (status >= 400) as an isError result carrying the
// problem JSON; get_artifact's bytes and get_task_bundle's tar file as embedded resources.
func toolResult(rt *route, resp apiResponse, pathVals map[string]string) *mcp.CallToolResult {
	res := &mcp.CallToolResult{Meta: mcp.Meta{metaStatus: resp.status}}
	if resp.header.Get("Idempotent-Replayed") == "true" {
		res.Meta[metaReplayed] = true
	}
	if ra, err := strconv.Atoi(resp.header.Get("Retry-After")); err == nil {
		res.Meta[metaRetryAfter] = ra
	}
	if resp.status < 400 && rt.binary {
		if id, ok := pathVals["artifact_id"]; ok {
			return artifactResult(res, resp, id)
		}
		return bundleResult(res, resp, pathVals["task_id"])
	}
	body := resp.body
	if !json.Valid(body) {
		// Never happens with the BAP API; keep the result well-formed if it does.
		p, _ := json.Marshal(newProblem(&app.Error{Code: app.CodeInternal, Detail: "the server answered something that is not JSON"}))
		body, res.IsError = p, true
	}
	res.IsError = res.IsError || resp.status >= 400
	res.StructuredContent = json.RawMessage(body)
	res.Content = []mcp.Content{&mcp.TextContent{Text: string(body)}}
	return res
}

// artifactResult returns the bytes of get_artifact as an embedded resource (blob with its
// mimeType) plus {"artifact_id", "sha256", "size"}.
func artifactResult(res *mcp.CallToolResult, resp apiResponse, id string) *mcp.CallToolResult {
	mt := resp.header.Get("Content-Type")
	if mt == "" {
		mt = "application/octet-stream"
	}
	sum := digestHex(resp.header.Get("Repr-Digest"))
	structured := map[string]any{"artifact_id": id, "sha256": sum, "size": len(resp.body)}
	res.StructuredContent = structured
	res.Content = []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
		URI: "bap://artifacts/" + id, MIMEType: mt, Blob: resp.body,
	}}}
	return res
}

// bundleResult returns get_task_bundle's tar file as an embedded resource plus {"task_id",
// "sha256", "size"}.
func bundleResult(res *mcp.CallToolResult, resp apiResponse, taskID string) *mcp.CallToolResult {
	res.StructuredContent = map[string]any{"task_id": taskID, "sha256": digestHex(resp.header.Get("Repr-Digest")), "size": len(resp.body)}
	res.Content = []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
		URI: "bap://tasks/" + taskID + "/bundle", MIMEType: "application/x-tar", Blob: resp.body,
	}}}
	return res
}

// digestHex turns `sha-256=:<base64>:` (RFC 9530) into 64 lowercase hex characters.
func digestHex(h string) string {
	for _, part := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || !strings.EqualFold(k, "sha-256") {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(strings.Trim(v, ":"))
		if err == nil && len(raw) == 32 {
			return hex.EncodeToString(raw)
		}
	}
	return ""
}
