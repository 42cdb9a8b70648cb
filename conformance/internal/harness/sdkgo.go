package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	bap "github.com/originweave/bap/sdk-go"
)

// SDKCaller is the Caller that takes every step with sdk-go: runner_go's, and runner_mcp's for
// the one SDK operation that is not an MCP tool (replay_task).
func SDKCaller(baseURL string) Caller {
	c := bap.NewClient(baseURL)
	return func(ctx context.Context, op string, args map[string]any, key string) Outcome {
		var meta bap.ResponseMeta
		opts := []bap.CallOption{bap.WithResponseMeta(&meta)}
		if key != "" {
			opts = append(opts, bap.WithIdempotencyKey(key))
		}
		resp, err := call(ctx, c, op, args, opts)
		var p *bap.Problem
		switch {
		case errors.As(err, &p):
			o := Outcome{Status: float64(p.Status), Doc: Decode(p.Body)}
			if p.Code != "" {
				o.Code = string(p.Code)
			}
			return o
		case err != nil:
			return Outcome{Err: err}
		case op == "get_task_bundle":
			b := resp.(bundle)
			return Outcome{Status: "ok", Doc: b.doc, Body: b.body}
		case op == "get_artifact" || meta.Body == nil:
			return Outcome{Status: "ok", Doc: Generic(resp)}
		default:
			// The answer as sent: a typed response leaves out what its type does not
			// have (act's 202 carries an approval, not ActResponse's fields).
			return Outcome{Status: "ok", Doc: Decode(meta.Body)}
		}
	}
}

// typed decodes the scenario body into the SDK's request type; a field the type does not know is
// a runner error (the fixture would not be expressible through sdk-go).
func typed[T any](args map[string]any) (T, error) {
	var v T
	b, ok := args["body"]
	if !ok || b == nil {
		return v, nil
	}
	raw, _ := json.Marshal(b)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, fmt.Errorf("body not expressible as %T: %w", v, err)
	}
	return v, nil
}

func str(args map[string]any, k string) string { s, _ := args[k].(string); return s }
func num(args map[string]any, k string) int    { f, _ := args[k].(float64); return int(f) }

// with decodes the body into T and calls f with it.
func with[T any, R any](args map[string]any, f func(T) (R, error)) (any, error) {
	b, err := typed[T](args)
	if err != nil {
		return nil, err
	}
	return f(b)
}

// bundle is get_task_bundle's runner-neutral document with the bytes (for verify_bundle).
type bundle struct {
	doc  map[string]any
	body []byte
}

func call(ctx context.Context, c *bap.Client, op string, a map[string]any, opts []bap.CallOption) (any, error) {
	switch op {
	case "create_task":
		return with(a, func(b bap.CreateTaskRequest) (*bap.CreateTaskResponse, error) { return c.CreateTask(ctx, b, opts...) })
	case "get_task":
		return c.GetTask(ctx, str(a, "task_id"), opts...)
	case "list_task_events":
		return c.ListTaskEvents(ctx, str(a, "task_id"), num(a, "after"), num(a, "limit"), opts...)
	case "cancel_task":
		return with(a, func(b bap.CancelTaskRequest) (*bap.CancelTaskResponse, error) {
			return c.CancelTask(ctx, str(a, "task_id"), b, opts...)
		})
	case "resume_task":
		return with(a, func(b bap.ResumeTaskRequest) (*bap.ResumeTaskResponse, error) {
			return c.ResumeTask(ctx, str(a, "task_id"), b, opts...)
		})
	case "close_task":
		return with(a, func(b bap.CloseTaskRequest) (*bap.CloseTaskResponse, error) {
			return c.CloseTask(ctx, str(a, "task_id"), b, opts...)
		})
	case "create_browser_session":
		return with(a, func(b bap.CreateBrowserSessionRequest) (*bap.CreateBrowserSessionResponse, error) {
			return c.CreateBrowserSession(ctx, str(a, "task_id"), b, opts...)
		})
	case "checkpoint_browser_session":
		return with(a, func(b bap.CheckpointBrowserSessionRequest) (*bap.CheckpointBrowserSessionResponse, error) {
			return c.CheckpointBrowserSession(ctx, str(a, "session_id"), b, opts...)
		})
	case "close_browser_session":
		return with(a, func(b bap.CloseBrowserSessionRequest) (*bap.CloseBrowserSessionResponse, error) {
			return c.CloseBrowserSession(ctx, str(a, "session_id"), b, opts...)
		})
	case "navigate":
		return with(a, func(b bap.NavigateRequest) (*bap.NavigateResponse, error) {
			return c.Navigate(ctx, str(a, "session_id"), b, opts...)
		})
	case "observe":
		return with(a, func(b bap.ObserveRequest) (*bap.ObserveResponse, error) {
			return c.Observe(ctx, str(a, "session_id"), b, opts...)
		})
	case "query_nodes":
		return with(a, func(b bap.QueryNodesRequest) (*bap.QueryNodesResponse, error) {
			return c.QueryNodes(ctx, str(a, "session_id"), b, opts...)
		})
	case "act":
		return with(a, func(b bap.ActRequest) (*bap.ActResponse, error) { return c.Act(ctx, str(a, "session_id"), b, opts...) })
	case "extract":
		return with(a, func(b bap.ExtractRequest) (*bap.ExtractResponse, error) {
			return c.Extract(ctx, str(a, "session_id"), b, opts...)
		})
	case "capture_evidence":
		return with(a, func(b bap.CaptureEvidenceRequest) (*bap.CaptureEvidenceResponse, error) {
			return c.CaptureEvidence(ctx, str(a, "session_id"), b, opts...)
		})
	case "request_approval":
		return with(a, func(b bap.RequestApprovalRequest) (*bap.RequestApprovalResponse, error) {
			return c.RequestApproval(ctx, str(a, "task_id"), b, opts...)
		})
	case "resolve_approval":
		return with(a, func(b bap.ResolveApprovalRequest) (*bap.ResolveApprovalResponse, error) {
			return c.ResolveApproval(ctx, str(a, "approval_id"), b, opts...)
		})
	case "get_artifact":
		blob, err := c.GetArtifact(ctx, str(a, "artifact_id"), opts...)
		if err != nil {
			return nil, err
		}
		// The runner-neutral document of get_artifact (conformance/README.md).
		return map[string]any{"media_type": blob.MediaType, "sha256": blob.SHA256, "size": len(blob.Body)}, nil
	case "get_task_audit":
		return c.GetTaskAudit(ctx, str(a, "task_id"), opts...)
	case "get_task_bundle":
		blob, err := c.GetTaskBundle(ctx, str(a, "task_id"), opts...)
		if err != nil {
			return nil, err
		}
		return bundle{doc: map[string]any{"media_type": blob.MediaType, "sha256": blob.SHA256, "size": len(blob.Body)}, body: blob.Body}, nil
	case "replay_task":
		return with(a, func(b bap.ReplayTaskRequest) (*bap.ReplayTaskResponse, error) {
			return c.ReplayTask(ctx, str(a, "task_id"), b, opts...)
		})
	case "verify_artifact":
		return with(a, func(b bap.VerifyArtifactRequest) (*bap.VerifyArtifactResponse, error) {
			return c.VerifyArtifact(ctx, str(a, "artifact_id"), b, opts...)
		})
	}
	return nil, fmt.Errorf("unknown op %s", op)
}
