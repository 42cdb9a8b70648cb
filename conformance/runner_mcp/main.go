// Command runner_mcp is the conformance runner for the MCP adapter: it runs every
// conformance/scenarios/*.json against a live server's /mcp endpoint with the official Go MCP
// client (github.com/modelcontextprotocol/go-sdk, Streamable HTTP, revision 2026-07-28) and
// writes <out>/mcp.json, which must be byte-identical to the SDK runners' result files (see
// conformance/README.md); it exits 1 when a step fails.
//
// Each step calls the tool named like the operation with the arguments CONTRACT "MCP tools"
// gives it: the path and query parameters by name, the body's fields, and `idempotency_key` for a
// mutating tool (the step's key, else a new UUID, as the SDKs do). A result's structuredContent is
// the body; an isError result carries the BAP problem, whose `status` and `code` are the step's.
// The one SDK operation that is not an MCP tool (replay_task: mutating, it starts a browser; ADR
// 0035) the runner takes over HTTP with sdk-go, as an MCP host would; it checks that tools/list
// indeed leaves it out.
//
//	go run ./conformance/runner_mcp --base-url http://127.0.0.1:PORT --out DIR [--pages ORIGIN]
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/originweave/bap/conformance/internal/harness"
)

const protocolVersion = "2026-07-28"

// pathAndQuery are the tool arguments that are not body fields.
var pathAndQuery = []string{"task_id", "session_id", "approval_id", "artifact_id", "after", "limit"}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func main() {
	harness.Main("mcp", func(ctx context.Context, baseURL string) (harness.Caller, func(), error) {
		// The local profile (as for the SDK runners): the caller is the local agent, no token; the
		// operator's steps go through harness.OperatorCall.
		c := mcp.NewClient(&mcp.Implementation{Name: "bap-conformance", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: baseURL + "/mcp", HTTPClient: http.DefaultClient},
			&mcp.ClientSessionOptions{ProtocolVersion: protocolVersion})
		if err != nil {
			return nil, nil, fmt.Errorf("connecting to %s/mcp: %w", baseURL, err)
		}
		if v := cs.InitializeResult().ProtocolVersion; v != protocolVersion {
			cs.Close()
			return nil, nil, fmt.Errorf("negotiated MCP %q, want %s", v, protocolVersion)
		}
		// A tool is mutating when its input schema declares idempotency_key.
		mutating := map[string]bool{}
		for tool, err := range cs.Tools(ctx, nil) {
			if err != nil {
				cs.Close()
				return nil, nil, fmt.Errorf("tools/list: %w", err)
			}
			raw, _ := json.Marshal(tool.InputSchema)
			var schema struct {
				Properties map[string]json.RawMessage `json:"properties"`
			}
			_ = json.Unmarshal(raw, &schema)
			_, mutating[tool.Name] = schema.Properties["idempotency_key"]
		}
		if _, listed := mutating["replay_task"]; listed {
			cs.Close()
			return nil, nil, errors.New("tools/list offers replay_task, which the spec keeps out of MCP (x-bap-mcp-tool: false)")
		}
		overHTTP := harness.SDKCaller(baseURL)
		call := func(ctx context.Context, op string, args map[string]any, key string) harness.Outcome {
			if op == "replay_task" {
				return overHTTP(ctx, op, args, key)
			}
			arguments := map[string]any{}
			if body, ok := args["body"].(map[string]any); ok {
				for k, v := range body {
					arguments[k] = v
				}
			} else if b, ok := args["body"]; ok && b != nil {
				return harness.Outcome{Err: fmt.Errorf("the body of %s is not an object: MCP arguments cannot carry it", op)}
			}
			for _, name := range pathAndQuery {
				if v, ok := args[name]; ok {
					arguments[name] = v
				}
			}
			if mutating[op] {
				if key == "" {
					key = newUUID()
				}
				arguments["idempotency_key"] = key
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: op, Arguments: arguments})
			if err != nil {
				return harness.Outcome{Err: fmt.Errorf("tools/call %s: %w", op, err)}
			}
			raw, err := json.Marshal(res.StructuredContent)
			if err != nil {
				return harness.Outcome{Err: fmt.Errorf("tools/call %s: structuredContent: %w", op, err)}
			}
			doc := harness.Decode(raw)
			if res.IsError {
				p, _ := doc.(map[string]any)
				status, _ := p["status"].(float64)
				if status == 0 {
					return harness.Outcome{Err: fmt.Errorf("tools/call %s: an isError result without a problem status: %s", op, raw)}
				}
				o := harness.Outcome{Status: status, Doc: doc}
				if code, ok := p["code"].(string); ok && code != "" {
					o.Code = code
				}
				return o
			}
			if op == "get_artifact" || op == "get_task_bundle" {
				// The runner-neutral document of get_artifact and get_task_bundle (conformance/README.md): the
				// embedded resource's mimeType with the result's sha256 and size.
				m, _ := doc.(map[string]any)
				mediaType, body := "", []byte(nil)
				for _, ct := range res.Content {
					if er, ok := ct.(*mcp.EmbeddedResource); ok && er.Resource != nil {
						mediaType, body = er.Resource.MIMEType, er.Resource.Blob
					}
				}
				return harness.Outcome{Status: "ok", Doc: map[string]any{"media_type": mediaType, "sha256": m["sha256"], "size": m["size"]}, Body: body}
			}
			return harness.Outcome{Status: "ok", Doc: doc}
		}
		return call, func() { cs.Close() }, nil
	})
}
