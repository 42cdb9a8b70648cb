package mcpserver

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/originweave/bap/server/internal/apigen"
	"github.com/originweave/bap/server/internal/mcpcatalog"
)

// route is where a catalog tool's operation lives in the BAP HTTP API, read from the bundled
// OpenAPI document (the same document the API validates against), never written by hand.
type route struct {
	tool     mcpcatalog.Tool
	method   string
	path     string   // template, e.g. /bap/v1/tasks/{task_id}/cancel
	pathArgs []string // path parameters in route order
	query    []string // query parameters
	body     bool     // the operation takes a JSON body
	binary   bool     // the success response is bytes, not JSON (get_artifact)
}

// loadRoutes pairs every catalog tool with its operation. A tool without an operation, or an
// operation parameter the tool's input schema does not declare, is an error: the catalog and the
// spec are generated together and must agree.
func loadRoutes(tools []mcpcatalog.Tool) (map[string]*route, error) {
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]openAPIParam `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(apigen.OpenAPI, &doc); err != nil {
		return nil, fmt.Errorf("mcpserver: reading the OpenAPI document: %w", err)
	}
	byOp := map[string]*route{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			switch method {
			case "get", "post", "put", "patch", "delete":
			default:
				continue
			}
			var op struct {
				OperationID string                     `json:"operationId"`
				Parameters  []openAPIParam             `json:"parameters"`
				RequestBody json.RawMessage            `json:"requestBody"`
				Responses   map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("mcpserver: %s %s: %w", method, path, err)
			}
			rt := &route{method: strings.ToUpper(method), path: path, body: len(op.RequestBody) > 0}
			for _, p := range op.Parameters {
				if p.Ref != "" {
					name := strings.TrimPrefix(p.Ref, "#/components/parameters/")
					q, ok := doc.Components.Parameters[name]
					if !ok {
						return nil, fmt.Errorf("mcpserver: %s: unknown parameter %s", op.OperationID, p.Ref)
					}
					p = q
				}
				switch p.In {
				case "path":
					rt.pathArgs = append(rt.pathArgs, p.Name)
				case "query":
					rt.query = append(rt.query, p.Name)
				}
			}
			if ok, _ := successIsBinary(op.Responses); ok {
				rt.binary = true
			}
			byOp[op.OperationID] = rt
		}
	}
	out := make(map[string]*route, len(tools))
	for _, t := range tools {
		rt, ok := byOp[t.Name]
		if !ok {
			return nil, fmt.Errorf("mcpserver: catalog tool %s has no operation in the OpenAPI document", t.Name)
		}
		rt.tool = t
		// Path parameters in route order (the document lists them in any order).
		rt.pathArgs = orderedPathArgs(rt.path)
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
			return nil, fmt.Errorf("mcpserver: tool %s: input schema: %w", t.Name, err)
		}
		for _, name := range append(append([]string(nil), rt.pathArgs...), rt.query...) {
			if _, ok := schema.Properties[name]; !ok {
				return nil, fmt.Errorf("mcpserver: tool %s does not declare the argument %s of its route", t.Name, name)
			}
		}
		if _, ok := schema.Properties[idempotencyArg]; ok != t.Mutating {
			return nil, fmt.Errorf("mcpserver: tool %s: %s must be declared exactly when the tool is mutating", t.Name, idempotencyArg)
		}
		out[t.Name] = rt
	}
	return out, nil
}

type openAPIParam struct {
	Ref  string `json:"$ref"`
	Name string `json:"name"`
	In   string `json:"in"`
}

// successIsBinary reports whether the 200 response of an operation is bytes (a non-JSON media type).
func successIsBinary(responses map[string]json.RawMessage) (bool, error) {
	raw, ok := responses["200"]
	if !ok {
		return false, nil
	}
	var r struct {
		Content map[string]json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return false, err
	}
	for mt := range r.Content {
		if mt == "application/json" || strings.HasSuffix(mt, "+json") {
			return false, nil
		}
	}
	return len(r.Content) > 0, nil
}

func orderedPathArgs(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, seg[1:len(seg)-1])
		}
	}
	return out
}

// idempotencyArg is the argument that carries the Idempotency-Key header of mutating tools.
const idempotencyArg = "idempotency_key"
