package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/mcpcatalog"
	"github.com/originweave/bap/server/internal/version"
)

const instructions = `BAP drives a real browser for you under a task's policy. A typical run: create_task ` +
	`(goal, policy.allowed_origins) → create_browser_session (task_id) → navigate (session_id, url) → observe → ` +
	`act (node_id from observe or a query) → close_task. Mutating tools need an idempotency_key (e.g. a UUID): ` +
	`reuse it to retry a call safely — the action happens once and the first result comes back. Results carry ` +
	`the BAP JSON in structuredContent; refusals are isError results carrying a BAP problem with a stable code.`

// taskEligible are the tools whose calls may become MCP tasks (Tasks extension): the ones that can
// run long — a slow navigation, an action held for approval, a close that evaluates the
// postcondition and captures evidence.
var taskEligible = map[string]bool{"navigate": true, "act": true, "close_task": true}

// bapServer is the /mcp endpoint's MCP server.
type bapServer struct {
	o      Options
	routes map[string]*route
	disp   dispatcher
	tasks  *taskEngine
}

// New returns the /mcp endpoint: the reviewed catalog's tools over the BAP API.
func New(o Options) (http.Handler, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	if o.API == nil {
		return nil, errors.New("mcpserver: API is required")
	}
	tools, err := mcpcatalog.Tools()
	if err != nil {
		return nil, err
	}
	routes, err := loadRoutes(tools)
	if err != nil {
		return nil, err
	}
	b := &bapServer{o: o, routes: routes, disp: dispatcher{api: o.API}}
	b.tasks = &taskEngine{store: newTaskStore(o.Now, o.TaskTTL, o.TaskPollInterval), tools: map[string]*taskTool{},
		records: o.Tasks, nodeID: o.NodeID, staleAfter: o.NodeStaleAfter, now: o.Now, log: o.Logger}
	if o.Tasks != nil {
		b.tasks.store.statusChanged = b.tasks.syncStatus // the binding follows input_required
	}

	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Prompts: &mcp.PromptCapabilities{}, Resources: &mcp.ResourceCapabilities{}}
	caps.AddExtension(tasksExtension, nil)
	srv := mcp.NewServer(&mcp.Implementation{Name: "bap", Title: "BAP runtime", Version: version.Software},
		serverOptions(o, caps, instructions, bapCachePolicy))

	digest := sha256.New()
	lst := &lister{scopes: map[string]string{}, pageSize: o.PageSize, ttlMs: 300_000, key: o.Secret}
	for _, t := range tools {
		rt := routes[t.Name]
		tool := &mcp.Tool{Name: t.Name, Title: t.Title, Description: t.Description,
			InputSchema: json.RawMessage(t.InputSchema), Annotations: annotations(t)}
		srv.AddTool(tool, b.handler(rt))
		lst.tools = append(lst.tools, tool)
		lst.scopes[t.Name] = t.Scope
		digest.Write([]byte(t.Name))
		digest.Write(t.InputSchema)
		if taskEligible[t.Name] {
			b.tasks.tools[t.Name] = &taskTool{syncWindow: o.TaskSyncWindow, plan: b.planTask(rt), names: namedTask}
		}
	}
	lst.build = hex.EncodeToString(digest.Sum(nil))
	if err := b.tasks.register(srv); err != nil {
		return nil, err
	}
	b.addResourcesAndPrompts(srv)
	srv.AddReceivingMiddleware(lst.middleware, b.tasks.middleware)
	scopeOf := func(name string) (string, bool) {
		s, ok := lst.scopes[name]
		return s, ok
	}
	return transport(o, srv, scopeOf), nil
}

func annotations(t mcpcatalog.Tool) *mcp.ToolAnnotations {
	a := &mcp.ToolAnnotations{Title: t.Title, ReadOnlyHint: !t.Mutating}
	if t.Mutating {
		// The idempotency key makes a repeated call (same key, same arguments) harmless.
		a.IdempotentHint = true
	}
	browser := strings.HasPrefix(t.Scope, "bap:browser.")
	a.OpenWorldHint = &browser
	return a
}

// handler serves a tool synchronously.
func (b *bapServer) handler(rt *route) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r, pathVals, perr := buildRequest(ctx, rt, req.Params.Arguments, traceparent(req.Params.Meta))
		if perr != nil {
			return problemResult(perr), nil
		}
		return toolResult(rt, b.disp.do(r), pathVals), nil
	}
}

func traceparent(meta mcp.Meta) string {
	s, _ := meta["traceparent"].(string)
	return s
}

// problemResult is the isError result of a problem the adapter found itself.
func problemResult(e *app.Error) *mcp.CallToolResult {
	p := newProblem(e)
	body, _ := json.Marshal(p)
	return &mcp.CallToolResult{
		IsError: true, StructuredContent: json.RawMessage(body),
		Content: []mcp.Content{&mcp.TextContent{Text: string(body)}},
		Meta:    mcp.Meta{metaStatus: p.Status},
	}
}

// planTask makes a task-eligible call a task: the in-process request runs detached from the
// HTTP request (its command is BAP's; a client that goes away does not undo it).
func (b *bapServer) planTask(rt *route) func(ctx context.Context, req *mcp.CallToolRequest) (taskFunc, error) {
	return func(ctx context.Context, req *mcp.CallToolRequest) (taskFunc, error) {
		r, pathVals, perr := buildRequest(ctx, rt, req.Params.Arguments, traceparent(req.Params.Meta))
		if perr != nil {
			return nil, nil // the synchronous handler answers the same problem
		}
		caps := req.ClientCapabilities()
		elicit := caps != nil && caps.Elicitation != nil
		return func(ctx context.Context, run *taskRun) (*mcp.CallToolResult, error) {
			resp := b.disp.do(r.WithContext(ctx))
			if ctx.Err() != nil && !json.Valid(resp.body) {
				// Cancelled before the command was recorded: nothing ran.
				return nil, errTaskCancelled
			}
			res := toolResult(rt, resp, pathVals)
			if held, ok := heldFor(resp); ok {
				// Only a rule that opted in (channel elicitation) lets this client's person answer.
				return b.awaitApproval(ctx, run, held, res, elicit && held.Channel == "elicitation")
			}
			return res, nil
		}, nil
	}
}

// namedTask is the BAP task or session a task-eligible call names (close_task's task_id,
// navigate's and act's session_id): what its MCP task is bound to.
func namedTask(req *mcp.CallToolRequest) (taskID, sessionID string) {
	var args struct {
		TaskID    string `json:"task_id"`
		SessionID string `json:"session_id"`
	}
	if req.Params == nil || json.Unmarshal(req.Params.Arguments, &args) != nil {
		return "", ""
	}
	return args.TaskID, args.SessionID
}

// held is an action BAP holds for approval (act → 202 with a pending approval).
type held struct {
	ApprovalID string `json:"approval_id"`
	TaskID     string `json:"task_id"`
	State      string `json:"state"`
	Reason     string `json:"reason"`
	// Channel is who may answer it: "elicitation" lets this client's person answer (the rule
	// opted in); anything else waits for a separate approver.
	Channel string `json:"channel"`
}

type elicitedKey struct{}

// withElicited marks the in-process request that carries the caller's answer to the elicitation
// of its held act (Elicited reads it).
func withElicited(ctx context.Context) context.Context {
	return context.WithValue(ctx, elicitedKey{}, true)
}

// Elicited reports whether ctx belongs to the adapter's resolve_approval for an answer its caller
// gave to an elicitation (the API records the decision with channel elicitation and accepts it
// only for an approval whose rule opted in). Only this package sets it: no MCP request can.
func Elicited(ctx context.Context) bool {
	on, _ := ctx.Value(elicitedKey{}).(bool)
	return on
}

func heldFor(resp apiResponse) (held, bool) {
	if resp.status != http.StatusAccepted {
		return held{}, false
	}
	var body struct {
		Approval *held `json:"approval"`
	}
	if json.Unmarshal(resp.body, &body) != nil || body.Approval == nil || body.Approval.State != "pending" || body.Approval.ApprovalID == "" {
		return held{}, false
	}
	return *body.Approval, true
}

// call sends one in-process request for tool with args (the adapter's own follow-up calls).
func (b *bapServer) call(ctx context.Context, tool string, args map[string]any) (apiResponse, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return apiResponse{}, err
	}
	r, _, perr := buildRequest(ctx, b.routes[tool], raw, "")
	if perr != nil {
		return apiResponse{}, perr
	}
	return b.disp.do(r), nil
}

// approvalSchema is what the elicitation for a held action asks.
var approvalSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"decision":{"type":"string","title":"Decision","enum":["approve","deny"],"description":"approve runs the held action once; deny never runs it"},` +
	`"reason":{"type":"string","title":"Reason"}},"required":["decision"]}`)

// awaitApproval keeps the task of a held action open until the approval is decided: by a
// separate approver through BAP (observed in the task's events) or — only when the approval's rule
// has channel elicitation and the client declared elicitation — by the client's answer to an
// elicitation, which the adapter turns into resolve_approval under the caller's identity, marked
// as an elicited answer (recorded with channel elicitation). With such a rule, tasks/cancel
// withdraws the action (denied through the same channel: it never runs); without one the
// approval stays pending for an approver, or until it expires.
func (b *bapServer) awaitApproval(ctx context.Context, run *taskRun, h held, heldRes *mcp.CallToolResult, elicit bool) (*mcp.CallToolResult, error) {
	bg := context.WithoutCancel(ctx)
	elicited := withElicited(bg) // only resolve_approval carries the mark
	resolve := func(decision, reason, key string) (*mcp.CallToolResult, error) {
		args := map[string]any{"approval_id": h.ApprovalID, "decision": decision, "idempotency_key": key}
		if reason != "" {
			args["reason"] = reason
		}
		resp, err := b.call(elicited, "resolve_approval", args)
		if err != nil {
			return nil, err
		}
		return toolResult(b.routes["resolve_approval"], resp, nil), nil
	}
	if elicit {
		run.OnCancel(func() {
			if _, err := resolve("deny", "withdrawn: the MCP client cancelled the task", "mcp-task-cancel:"+run.ID()); err != nil {
				b.o.Logger.Warn("mcp: withdrawing a held action", "approval_id", h.ApprovalID, "err", err)
			}
		})
	}
	run.SetMessage(fmt.Sprintf("held for approval %s (BAP task %s)", h.ApprovalID, h.TaskID))

	type answer struct {
		key string
		raw json.RawMessage
		err error
	}
	answers := make(chan answer, 1)
	askCtx, stopAsking := context.WithCancel(ctx)
	defer stopAsking()
	var asked string
	round := 0
	ask := func() {
		round++
		asked = fmt.Sprintf("approval:%s:%d", h.ApprovalID, round)
		key := asked
		msg := fmt.Sprintf("BAP holds an action of task %s for approval (%s)", h.TaskID, h.ApprovalID)
		if h.Reason != "" {
			msg += ": " + h.Reason
		}
		go func() {
			got, err := run.Ask(askCtx, map[string]mcp.InputRequest{key: &mcp.ElicitParams{Message: msg + ". Approve it?", RequestedSchema: approvalSchema}})
			select {
			case answers <- answer{key: key, raw: got[key], err: err}:
			case <-askCtx.Done():
			}
		}()
	}
	if elicit {
		ask()
	}
	after := 0
	for {
		if res, ok := b.decidedElsewhere(bg, h, &after, heldRes); ok {
			if asked != "" {
				run.Withdraw(asked)
			}
			return res, nil
		}
		timer := time.NewTimer(b.o.ApprovalPoll)
		select {
		case a := <-answers:
			timer.Stop()
			if a.err != nil {
				continue
			}
			var er mcp.ElicitResult
			_ = json.Unmarshal(a.raw, &er)
			switch er.Action {
			case "accept":
				decision, _ := er.Content["decision"].(string)
				reason, _ := er.Content["reason"].(string)
				if decision != "approve" && decision != "deny" {
					ask() // not an answer: ask again (with a new key)
					continue
				}
				return resolve(decision, reason, "mcp-task:"+run.ID())
			case "decline":
				return resolve("deny", "declined in the MCP client", "mcp-task:"+run.ID())
			default: // dismissed without a choice: ask again
				ask()
			}
		case <-ctx.Done():
			timer.Stop()
			return nil, errTaskCancelled
		case <-timer.C:
		}
	}
}

// decidedElsewhere looks in the BAP task's history for the approval's decision.
func (b *bapServer) decidedElsewhere(ctx context.Context, h held, after *int, heldRes *mcp.CallToolResult) (*mcp.CallToolResult, bool) {
	for {
		resp, err := b.call(ctx, "list_task_events", map[string]any{"task_id": h.TaskID, "after": *after, "limit": 1000})
		if err != nil || resp.status != http.StatusOK {
			return nil, false
		}
		var page struct {
			Events []struct {
				Seq  int             `json:"seq"`
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			} `json:"events"`
			NextAfter *int `json:"next_after"`
		}
		if json.Unmarshal(resp.body, &page) != nil {
			return nil, false
		}
		for _, ev := range page.Events {
			*after = ev.Seq
			if ev.Type != "approval.resolved" {
				continue
			}
			var d struct {
				ApprovalID string `json:"approval_id"`
				State      string `json:"state"`
				Decision   string `json:"decision"`
			}
			if json.Unmarshal(ev.Data, &d) != nil || d.ApprovalID != h.ApprovalID {
				continue
			}
			out := map[string]any{"approval": map[string]any{"approval_id": d.ApprovalID, "state": d.State, "task_id": h.TaskID}}
			if rc, ok := heldRes.StructuredContent.(json.RawMessage); ok {
				var prev struct {
					Receipt json.RawMessage `json:"receipt"`
				}
				if json.Unmarshal(rc, &prev) == nil && prev.Receipt != nil {
					out["receipt"] = prev.Receipt
				}
			}
			body, _ := json.Marshal(out)
			return &mcp.CallToolResult{StructuredContent: json.RawMessage(body),
				Content: []mcp.Content{&mcp.TextContent{Text: string(body)}}}, true
		}
		if page.NextAfter == nil {
			return nil, false
		}
	}
}

// bapCachePolicy sets ttlMs and cacheScope: what is the same for every caller is public, an
// artifact is private. (tools/list, shaped by the caller's scopes, is private: list.go.)
func bapCachePolicy(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
	c.TTLMs, c.CacheScope = 3_600_000, "public"
	if r, ok := req.(*mcp.ReadResourceRequest); ok && r.Params != nil && strings.HasPrefix(r.Params.URI, artifactURIPrefix) {
		c.CacheScope = "private"
	}
}

const (
	openAPIURI        = "bap://spec/openapi.json"
	artifactURIPrefix = "bap://artifacts/"
)

// addResourcesAndPrompts adds what an MCP host can browse besides tools: the BAP contract (the
// OpenAPI document), artifacts by id (the bytes get_artifact returns), and one prompt that
// starts a governed browser task.
func (b *bapServer) addResourcesAndPrompts(srv *mcp.Server) {
	srv.AddResource(&mcp.Resource{Name: "openapi", Title: "BAP 1.0 OpenAPI document", URI: openAPIURI, MIMEType: "application/json",
		Description: "The BAP contract: every operation behind the tools, with its schemas and problems."},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: openAPIURI, MIMEType: "application/json", Text: string(apigen.OpenAPI)}}}, nil
		})
	srv.AddResourceTemplate(&mcp.ResourceTemplate{Name: "artifact", Title: "BAP artifact", URITemplate: artifactURIPrefix + "{artifact_id}",
		Description: "Evidence captured by a task (screenshot, DOM or accessibility snapshot), by artifact_id."},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			id := strings.TrimPrefix(req.Params.URI, artifactURIPrefix)
			resp, err := b.call(ctx, "get_artifact", map[string]any{"artifact_id": id})
			if err != nil || resp.status == http.StatusNotFound || resp.status == http.StatusBadRequest {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			if resp.status != http.StatusOK {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("reading the artifact: BAP answered %d", resp.status)}
			}
			mt := resp.header.Get("Content-Type")
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: mt, Blob: resp.body}}}, nil
		})
	srv.AddPrompt(&mcp.Prompt{Name: "browser_task", Title: "Run a governed browser task",
		Description: "Instructions for reaching a goal on one website with the BAP tools.",
		Arguments: []*mcp.PromptArgument{
			{Name: "goal", Description: "What to achieve, in a sentence.", Required: true},
			{Name: "origin", Description: "The website's origin, e.g. https://shop.example.com", Required: true},
		}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			goal, origin := req.Params.Arguments["goal"], req.Params.Arguments["origin"]
			if goal == "" || origin == "" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the prompt needs goal and origin"}
			}
			text := fmt.Sprintf("Goal: %s\n\nUse the BAP tools. Create a task with create_task (goal as above, "+
				"policy.allowed_origins [%q]), open a session with create_browser_session, navigate to %s, then observe "+
				"the page and act on node_ids from observe or query_nodes. Give every mutating call a fresh "+
				"idempotency_key and reuse it only to retry that same call. When the goal is reached, call close_task.",
				goal, origin, origin)
			return &mcp.GetPromptResult{Description: "Governed browser task",
				Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}}}, nil
		})
}
