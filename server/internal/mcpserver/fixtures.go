//go:build mcpconformance

package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/originweave/bap/server/internal/version"
)

// The fixture server of the official conformance suite (@modelcontextprotocol/conformance,
// 2026-07-28 requirements and the Tasks extension scenarios): the tools, prompts and resources
// the scenarios call by name, served by the same transport stack as /mcp (guard, version gate,
// stateless SDK handler, Tasks engine, sealed request states). It exists to prove that stack; it
// touches no BAP state. Mounted at /mcp-conformance by `bap serve --mcp-conformance-fixtures`
// (local profile only). Compiled only with the mcpconformance build tag (make test builds with
// it): a production binary carries none of it (conformance.go).

// ConformanceFixturesBuilt tells whether this build has the conformance fixtures.
const ConformanceFixturesBuilt = true

// NewConformance returns the conformance fixture endpoint.
func NewConformance(o Options) (http.Handler, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	f := &fixtures{seal: sealer{key: o.Secret, ttl: 10 * time.Minute, now: o.Now}}
	caps := &mcp.ServerCapabilities{Completions: &mcp.CompletionCapabilities{}}
	caps.AddExtension(tasksExtension, nil)
	opts := serverOptions(o, caps, "Conformance fixtures of the BAP MCP transport stack (not BAP tools).", nil)
	opts.CompletionHandler = func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
		return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "bap-mcp-conformance", Title: "BAP MCP conformance fixtures", Version: version.Software}, opts)
	f.srv = srv
	f.tasks = &taskEngine{store: newTaskStore(o.Now, 10*time.Minute, 200*time.Millisecond), tools: map[string]*taskTool{}}
	f.addTools()
	f.addTaskTools()
	f.addResources()
	f.addPrompts()
	if err := f.tasks.register(srv); err != nil {
		return nil, err
	}
	srv.AddReceivingMiddleware(f.tasks.middleware)
	return transport(o, srv, nil), nil
}

type fixtures struct {
	srv   *mcp.Server
	seal  sealer
	tasks *taskEngine
}

// Minimal test files of the conformance suite's reference fixtures.
const (
	pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	wavBase64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
)

func mustDecode(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

var (
	pngData = mustDecode(pngBase64)
	wavData = mustDecode(wavBase64)
)

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

var objectSchema = json.RawMessage(`{"type":"object"}`)

// add registers a tool with a raw handler (no SDK-side input validation beyond the schema type).
func (f *fixtures) add(name, desc string, schema json.RawMessage, h mcp.ToolHandler) {
	if schema == nil {
		schema = objectSchema
	}
	f.srv.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: schema}, h)
}

func (f *fixtures) addTools() {
	f.add("test_simple_text", "Returns one text block.", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("This is a simple text response for testing."), nil
	})
	f.add("test_image_content", "Returns an image.", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: pngData, MIMEType: "image/png"}}}, nil
	})
	f.add("test_audio_content", "Returns audio.", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: wavData, MIMEType: "audio/wav"}}}, nil
	})
	f.add("test_embedded_resource", "Returns an embedded resource.", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource"}}}}, nil
	})
	f.add("test_multiple_content_types", "Returns text, an image and a resource.", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "This is text content"},
			&mcp.ImageContent{Data: pngData, MIMEType: "image/png"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://embedded-in-multiple", MIMEType: "text/plain", Text: "This is an embedded resource"}},
		}}, nil
	})
	f.add("test_tool_with_logging", "Emits log messages (only when the request set a log level).", nil,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			for _, m := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
				_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: m})
			}
			return text("Tool with logging executed successfully"), nil
		})
	f.add("test_tool_with_progress", "Reports progress on the request's stream.", nil,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			token := req.Params.GetProgressToken()
			for _, p := range []float64{0, 50, 100} {
				if token != nil {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: p, Total: 100,
						Message: fmt.Sprintf("Completed step %.0f of 100", p)})
				}
			}
			return text(fmt.Sprint(token)), nil
		})
	f.add("test_error_handling", "Always fails as a tool (isError).", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res := &mcp.CallToolResult{}
		res.SetError(errors.New("this tool intentionally returns an error for testing"))
		return res, nil
	})
	f.add("test_missing_capability", "Needs the sampling client capability (-32021 without it).", nil,
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if caps := req.ClientCapabilities(); caps != nil && caps.Sampling != nil {
				return text("Client declared the sampling capability; tool executed."), nil
			}
			data, _ := json.Marshal(mcp.MissingRequiredClientCapabilityData{RequiredCapabilities: &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}}})
			return nil, &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities, Message: "this tool needs the sampling client capability", Data: data}
		})
	f.add("test_streaming_elicitation", "Answers on its response stream with results only.", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("stream observed: result frames only, no top-level requests"), nil
	})
	f.add("test_logging_tool", "Attempts a log message (dropped unless the request set a log level).", nil,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: "test_logging_tool executed"})
			return text("Log attempted; delivered only when the request set a log level."), nil
		})
	f.add("test_trigger_tool_change", "Changes the tool list (tools/list_changed on listen streams).", nil,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			f.add("__transient_tool_for_list_changed", "Transient tool.", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return text("transient"), nil
			})
			return text("tools_list_changed published"), nil
		})
	f.add("test_trigger_prompt_change", "Changes the prompt list (prompts/list_changed on listen streams).", nil,
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			f.srv.AddPrompt(&mcp.Prompt{Name: "__transient_prompt_for_list_changed", Description: "Transient prompt."},
				func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
					return &mcp.GetPromptResult{}, nil
				})
			return text("prompts_list_changed published"), nil
		})
	f.add("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features.", json.RawMessage(`{
		"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
		"$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
		"properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
			"contactMethod": {"type": "string", "enum": ["phone", "email"]}, "phone": {"type": "string"}, "email": {"type": "string"}},
		"allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
		"if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
		"then": {"required": ["phone"]}, "else": {"required": ["email"]},
		"additionalProperties": false}`),
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprintf("JSON Schema 2020-12 tool called with: %s", req.Params.Arguments)), nil
		})
	f.add("test_x_mcp_header", "Mirrors region into Mcp-Param-Region (SEP-2243).", json.RawMessage(`{"type":"object","properties":{
		"region":{"type":"string","description":"mirrored into Mcp-Param-Region","x-mcp-header":"Region"},
		"level":{"type":"integer","description":"not mirrored"}}}`),
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				Region string `json:"region"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return text("region=" + in.Region), nil
		})
	f.addMRTRTools()
	// The Tasks extension's synchronous fixture.
	f.add("greet", "Says hello (never a task).", json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`),
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(req.Params.Arguments, &in)
			return text("Hello, " + in.Name + "!"), nil
		})
}

// --- MRTR (SEP-2322) fixtures ---------------------------------------------------------------

var nameSchema = json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)

func elicit(msg string, schema json.RawMessage) *mcp.ElicitParams {
	return &mcp.ElicitParams{Message: msg, RequestedSchema: schema}
}

// accepted returns the content of an accepted elicitation answer under key, or nil.
func accepted(responses mcp.InputResponseMap, key string) map[string]any {
	r, ok := responses[key].(*mcp.ElicitResult)
	if !ok || r == nil || r.Action != "accept" {
		return nil
	}
	if r.Content == nil {
		return map[string]any{}
	}
	return r.Content
}

func samplingText(responses mcp.InputResponseMap, key string) (string, bool) {
	switch r := responses[key].(type) {
	case *mcp.CreateMessageWithToolsResult:
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				return tc.Text, true
			}
		}
		return "(non-text response)", true
	case *mcp.CreateMessageResult:
		if tc, ok := r.Content.(*mcp.TextContent); ok {
			return tc.Text, true
		}
		return "(non-text response)", true
	}
	return "", false
}

func (f *fixtures) binding(ctx context.Context, req *mcp.CallToolRequest) stateBinding {
	c, _ := CallerFrom(ctx)
	return stateBinding{owner: c.owner(), method: "tools/call", name: req.Params.Name, args: req.Params.Arguments}
}

func inputRequired(reqs mcp.InputRequestMap, state string) *mcp.CallToolResult {
	return &mcp.CallToolResult{InputRequests: reqs, RequestState: state}
}

func (f *fixtures) addMRTRTools() {
	f.add("test_input_required_result_elicitation", "MRTR: asks the caller's name by elicitation.", nil,
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if c := accepted(req.Params.InputResponses, "user_name"); c != nil {
				if name, _ := c["name"].(string); name != "" {
					return text("Hello, " + name + "!"), nil
				}
			}
			return inputRequired(mcp.InputRequestMap{"user_name": elicit("What is your name?", nameSchema)}, ""), nil
		})
	f.add("test_input_required_result_sampling", "MRTR: asks for an LLM completion.", nil,
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if t, ok := samplingText(req.Params.InputResponses, "capital_question"); ok {
				return text("Sampling response: " + t), nil
			}
			return inputRequired(mcp.InputRequestMap{"capital_question": &mcp.CreateMessageParams{MaxTokens: 100,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "What is the capital of France?"}}}}}, ""), nil
		})
	f.add("test_input_required_result_list_roots", "MRTR: asks for the client's roots.", nil,
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if r, ok := req.Params.InputResponses["client_roots"].(*mcp.ListRootsResult); ok && r != nil {
				uris := make([]string, 0, len(r.Roots))
				for _, root := range r.Roots {
					uris = append(uris, root.URI)
				}
				return text(fmt.Sprintf("Client exposed %d root(s): %s", len(r.Roots), strings.Join(uris, ", "))), nil
			}
			return inputRequired(mcp.InputRequestMap{"client_roots": &mcp.ListRootsParams{}}, ""), nil
		})
	confirm := elicit("Please confirm", json.RawMessage(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}`))
	// Both request-state fixtures seal their state; a state that does not open is -32602.
	stateful := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		b := f.binding(ctx, req)
		if req.Params.RequestState != "" {
			if _, err := f.seal.open(b, req.Params.RequestState); err != nil {
				return nil, stateError()
			}
			if accepted(req.Params.InputResponses, "confirm") != nil {
				return text("state-ok: requestState received and confirmation accepted"), nil
			}
		}
		return inputRequired(mcp.InputRequestMap{"confirm": confirm}, f.seal.seal(b, "confirm")), nil
	}
	f.add("test_input_required_result_request_state", "MRTR: round-trips a sealed requestState.", nil, stateful)
	f.add("test_input_required_result_tampered_state", "MRTR: refuses a requestState that fails verification.", nil, stateful)
	f.add("test_input_required_result_multiple_inputs", "MRTR: asks elicitation, sampling and roots in one round.", nil,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			b := f.binding(ctx, req)
			if req.Params.RequestState != "" {
				if _, err := f.seal.open(b, req.Params.RequestState); err != nil {
					return nil, stateError()
				}
			}
			in := req.Params.InputResponses
			name, _ := accepted(in, "user_name")["name"].(string)
			greeting, hasGreeting := samplingText(in, "greeting")
			roots, hasRoots := in["client_roots"].(*mcp.ListRootsResult)
			if name != "" && hasGreeting && hasRoots && roots != nil {
				return text(fmt.Sprintf("%s %s — %d root(s) visible", greeting, name, len(roots.Roots))), nil
			}
			return inputRequired(mcp.InputRequestMap{
				"user_name": elicit("What is your name?", nameSchema),
				"greeting": &mcp.CreateMessageParams{MaxTokens: 50,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Generate a greeting"}}}},
				"client_roots": &mcp.ListRootsParams{},
			}, f.seal.seal(b, "multiple_inputs")), nil
		})
	f.add("test_input_required_result_multi_round", "MRTR: two elicitation rounds, state carried in the sealed requestState.", nil,
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			b := f.binding(ctx, req)
			state := ""
			if req.Params.RequestState != "" {
				s, err := f.seal.open(b, req.Params.RequestState)
				if err != nil {
					return nil, stateError()
				}
				state = s
			}
			switch {
			case state == "":
				return inputRequired(mcp.InputRequestMap{"step1": elicit("Step 1: What is your name?", nameSchema)}, f.seal.seal(b, "round=1")), nil
			case state == "round=1":
				name, _ := accepted(req.Params.InputResponses, "step1")["name"].(string)
				if name == "" {
					name = "unknown"
				}
				return inputRequired(mcp.InputRequestMap{"step2": elicit("Step 2: What is your favorite color?",
					json.RawMessage(`{"type":"object","properties":{"color":{"type":"string"}},"required":["color"]}`))},
					f.seal.seal(b, "round=2;name="+name)), nil
			default:
				color, _ := accepted(req.Params.InputResponses, "step2")["color"].(string)
				if color == "" {
					color = "unknown"
				}
				return text(fmt.Sprintf("Multi-round complete: %s likes %s", strings.TrimPrefix(state, "round=2;name="), color)), nil
			}
		})
	f.add("test_input_required_result_capabilities", "MRTR: asks only for inputs the request's capabilities cover.", nil,
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if len(req.Params.InputResponses) > 0 {
				return text("Capability-aware input requests fulfilled"), nil
			}
			caps := req.ClientCapabilities()
			reqs := mcp.InputRequestMap{}
			if caps != nil && caps.Elicitation != nil {
				reqs["user_name"] = elicit("What is your name?", nameSchema)
			}
			if caps != nil && caps.Sampling != nil {
				reqs["greeting"] = &mcp.CreateMessageParams{MaxTokens: 50,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Generate a short greeting"}}}}
			}
			if caps != nil && (caps.RootsV2 != nil || caps.Roots.ListChanged) {
				reqs["client_roots"] = &mcp.ListRootsParams{}
			}
			if len(reqs) == 0 {
				return text("No declared client capability supports an in-band input request"), nil
			}
			return inputRequired(reqs, ""), nil
		})
}

// --- Tasks extension (SEP-2663) fixtures -------------------------------------------------------

func (f *fixtures) addTaskTools() {
	// slow_compute: sleeps `seconds`, then answers; optional task support; settles to cancelled
	// when tasks/cancel arrives while it runs.
	slow := func(ctx context.Context, args json.RawMessage) (*mcp.CallToolResult, error) {
		var in struct {
			Seconds float64 `json:"seconds"`
			Label   string  `json:"label"`
		}
		_ = json.Unmarshal(args, &in)
		t := time.NewTimer(time.Duration(in.Seconds * float64(time.Second)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		return text(fmt.Sprintf("slow_compute %q finished after %gs", in.Label, in.Seconds)), nil
	}
	f.add("slow_compute", "Sleeps `seconds`, then answers (a task when the client declares the Tasks extension).",
		json.RawMessage(`{"type":"object","properties":{"seconds":{"type":"number","minimum":0},"label":{"type":"string"}}}`),
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return slow(ctx, req.Params.Arguments)
		})
	f.taskTool("slow_compute", false, func(_ context.Context, req *mcp.CallToolRequest) (taskFunc, error) {
		args := req.Params.Arguments
		return func(ctx context.Context, _ *taskRun) (*mcp.CallToolResult, error) { return slow(ctx, args) }, nil
	})

	f.add("failing_job", "A task that ends with a tool error.", nil, requiresTask)
	f.taskTool("failing_job", true, func(context.Context, *mcp.CallToolRequest) (taskFunc, error) {
		return func(ctx context.Context, _ *taskRun) (*mcp.CallToolResult, error) {
			if err := sleepCtx(ctx, 300*time.Millisecond); err != nil {
				return nil, err
			}
			res := &mcp.CallToolResult{}
			res.SetError(errors.New("failing_job failed on purpose"))
			return res, nil
		}, nil
	})

	f.add("protocol_error_job", "A task that ends with a protocol error (failed).", nil, requiresTask)
	f.taskTool("protocol_error_job", true, func(context.Context, *mcp.CallToolRequest) (taskFunc, error) {
		return func(context.Context, *taskRun) (*mcp.CallToolResult, error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "protocol_error_job failed on purpose"}
		}, nil
	})

	f.add("confirm_delete", "A task that asks for a confirmation, then completes.",
		json.RawMessage(`{"type":"object","properties":{"filename":{"type":"string"}}}`), requiresTask)
	f.taskTool("confirm_delete", true, func(_ context.Context, req *mcp.CallToolRequest) (taskFunc, error) {
		var in struct {
			Filename string `json:"filename"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &in)
		return func(ctx context.Context, run *taskRun) (*mcp.CallToolResult, error) {
			got, err := run.Ask(ctx, map[string]mcp.InputRequest{"confirm": elicit("Delete "+in.Filename+"?",
				json.RawMessage(`{"type":"object","properties":{"confirm":{"type":"boolean"}},"required":["confirm"]}`))})
			if err != nil {
				return nil, err
			}
			var r mcp.ElicitResult
			_ = json.Unmarshal(got["confirm"], &r)
			if r.Action == "accept" && r.Content["confirm"] == true {
				return text("Deleted " + in.Filename), nil
			}
			return text("Kept " + in.Filename), nil
		}, nil
	})

	f.add("multi_input", "A task that asks two questions at once.", nil, requiresTask)
	f.taskTool("multi_input", true, func(context.Context, *mcp.CallToolRequest) (taskFunc, error) {
		return func(ctx context.Context, run *taskRun) (*mcp.CallToolResult, error) {
			got, err := run.Ask(ctx, map[string]mcp.InputRequest{
				"name":    elicit("What is your name?", nameSchema),
				"confirm": elicit("Proceed?", json.RawMessage(`{"type":"object","properties":{"confirm":{"type":"boolean"}},"required":["confirm"]}`)),
			})
			if err != nil {
				return nil, err
			}
			return text(fmt.Sprintf("multi_input received %d answers", len(got))), nil
		}, nil
	})

	// test_tool_with_task: gathers user_name by MRTR on the original request, then runs as a task.
	f.add("test_tool_with_task", "MRTR round for the name, then a task (taskSupport required).", nil,
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return inputRequired(mcp.InputRequestMap{"user_name": elicit("What is your name?", nameSchema)}, ""), nil
		})
	f.taskTool("test_tool_with_task", true, func(_ context.Context, req *mcp.CallToolRequest) (taskFunc, error) {
		name, _ := accepted(req.Params.InputResponses, "user_name")["name"].(string)
		if name == "" {
			return nil, nil // the MRTR round: answered synchronously by the handler
		}
		return func(ctx context.Context, _ *taskRun) (*mcp.CallToolResult, error) {
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return nil, err
			}
			return text("Hello, " + name + "! (computed in a task)"), nil
		}, nil
	})
}

// requiresTask is the synchronous handler of a task-only tool; the Tasks middleware answers
// -32021 before it could run.
func requiresTask(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	return nil, missingTasksCapability()
}

func (f *fixtures) taskTool(name string, required bool, plan func(context.Context, *mcp.CallToolRequest) (taskFunc, error)) {
	f.tasks.tools[name] = &taskTool{required: required, plan: plan}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// --- resources and prompts ----------------------------------------------------------------------

var templateURI = regexp.MustCompile(`^test://template/([^/]+)/data$`)

func (f *fixtures) addResources() {
	static := func(uri, mime, txt string, blob []byte) mcp.ResourceHandler {
		return func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mime, Text: txt, Blob: blob}}}, nil
		}
	}
	f.srv.AddResource(&mcp.Resource{Name: "static-text", Description: "A static text resource", MIMEType: "text/plain", URI: "test://static-text"},
		static("test://static-text", "text/plain", "This is the content of the static text resource.", nil))
	f.srv.AddResource(&mcp.Resource{Name: "static-binary", Description: "A static binary resource", MIMEType: "image/png", URI: "test://static-binary"},
		static("test://static-binary", "image/png", "", pngData))
	f.srv.AddResource(&mcp.Resource{Name: "watched-resource", Description: "A resource clients may watch", MIMEType: "text/plain", URI: "test://watched-resource"},
		static("test://watched-resource", "text/plain", "Watched resource content", nil))
	f.srv.AddResourceTemplate(&mcp.ResourceTemplate{Name: "template", Description: "A template with one parameter", MIMEType: "application/json",
		URITemplate: "test://template/{id}/data"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			m := templateURI.FindStringSubmatch(req.Params.URI)
			if m == nil {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			body, _ := json.Marshal(map[string]any{"id": m[1], "templateTest": true, "data": "Data for ID: " + m[1]})
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(body)}}}, nil
		})
}

func (f *fixtures) addPrompts() {
	user := func(c mcp.Content) *mcp.PromptMessage { return &mcp.PromptMessage{Role: "user", Content: c} }
	f.srv.AddPrompt(&mcp.Prompt{Name: "test_simple_prompt", Title: "Simple Test Prompt", Description: "A prompt without arguments"},
		func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Description: "A simple test prompt",
				Messages: []*mcp.PromptMessage{user(&mcp.TextContent{Text: "This is a simple prompt for testing."})}}, nil
		})
	f.srv.AddPrompt(&mcp.Prompt{Name: "test_prompt_with_arguments", Title: "Prompt With Arguments", Description: "A prompt with required arguments",
		Arguments: []*mcp.PromptArgument{{Name: "arg1", Description: "First test argument", Required: true}, {Name: "arg2", Description: "Second test argument", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			a := req.Params.Arguments
			return &mcp.GetPromptResult{Description: "A prompt with arguments",
				Messages: []*mcp.PromptMessage{user(&mcp.TextContent{Text: fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", a["arg1"], a["arg2"])})}}, nil
		})
	f.srv.AddPrompt(&mcp.Prompt{Name: "test_prompt_with_embedded_resource", Title: "Prompt With Embedded Resource", Description: "A prompt with an embedded resource",
		Arguments: []*mcp.PromptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Description: "A prompt with an embedded resource", Messages: []*mcp.PromptMessage{
				user(&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: req.Params.Arguments["resourceUri"], MIMEType: "text/plain", Text: "Embedded resource content for testing."}}),
				user(&mcp.TextContent{Text: "Please process the embedded resource above."}),
			}}, nil
		})
	f.srv.AddPrompt(&mcp.Prompt{Name: "test_prompt_with_image", Title: "Prompt With Image", Description: "A prompt with an image"},
		func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Description: "A prompt with an image", Messages: []*mcp.PromptMessage{
				user(&mcp.ImageContent{Data: pngData, MIMEType: "image/png"}),
				user(&mcp.TextContent{Text: "Please analyze the image above."}),
			}}, nil
		})
	f.srv.AddPrompt(&mcp.Prompt{Name: "test_input_required_result_prompt", Description: "MRTR: asks for context by elicitation"},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			if c := accepted(req.Params.InputResponses, "user_context"); c != nil {
				ctxText, _ := c["context"].(string)
				return &mcp.GetPromptResult{Description: "A prompt with elicited context",
					Messages: []*mcp.PromptMessage{user(&mcp.TextContent{Text: "Context: " + ctxText})}}, nil
			}
			return &mcp.GetPromptResult{InputRequests: mcp.InputRequestMap{"user_context": elicit("Please provide context for the prompt",
				json.RawMessage(`{"type":"object","properties":{"context":{"type":"string"}},"required":["context"]}`))}}, nil
		})
}
