// Package mcpcatalog holds the reviewed MCP tool catalog: exactly one tool per BAP contract
// operation, generated from spec/ by `make generate` (codegen/mcpcatalog) into tools.gen.json
// and embedded here. The MCP adapter publishes these tools in tools/list and nothing else; a
// tool's arguments are the operation's path and query parameters plus its body fields, and, for
// mutating tools, the required `idempotency_key`.
package mcpcatalog

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"
)

//go:embed tools.gen.json
var toolsJSON []byte

// Tool is one catalog entry.
type Tool struct {
	// Name is the operationId (create_task, navigate, …).
	Name string `json:"name"`
	// Title is the operation's summary.
	Title string `json:"title"`
	// Description is the operation's description.
	Description string `json:"description"`
	// InputSchema is a self-contained JSON Schema 2020-12 object schema (component schemas are
	// inlined under $defs; no external references), with additionalProperties false.
	InputSchema json.RawMessage `json:"inputSchema"`
	// Mutating tools require `idempotency_key` (x-bap-mutating of the operation).
	Mutating bool `json:"mutating"`
	// Scope is the OAuth scope the operation needs (bap:tasks.write, …).
	Scope string `json:"scope"`
}

var load = sync.OnceValues(func() ([]Tool, error) {
	var doc struct {
		Tools []Tool `json:"tools"`
	}
	if err := json.Unmarshal(toolsJSON, &doc); err != nil {
		return nil, fmt.Errorf("mcpcatalog: tools.gen.json: %w", err)
	}
	return doc.Tools, nil
})

// Tools returns the catalog, sorted by name. The slice is the caller's to keep or change.
func Tools() ([]Tool, error) {
	tools, err := load()
	if err != nil {
		return nil, err
	}
	out := make([]Tool, len(tools))
	for i, t := range tools {
		t.InputSchema = append(json.RawMessage(nil), t.InputSchema...)
		out[i] = t
	}
	return out, nil
}

// Lookup returns the tool called name; an unknown name is not a tool (never a guess).
func Lookup(name string) (Tool, bool, error) {
	tools, err := load()
	if err != nil {
		return Tool{}, false, err
	}
	for _, t := range tools {
		if t.Name == name {
			t.InputSchema = append(json.RawMessage(nil), t.InputSchema...)
			return t, true, nil
		}
	}
	return Tool{}, false, nil
}
