// Package mcpcatalog generates server/internal/mcpcatalog/tools.gen.json, the reviewed MCP tool
// catalog: one tool per contract operation (operationId = tool name), whose input schema is
// the operation's path and query parameters plus its body fields at the top level, plus a
// required `idempotency_key` for mutating operations. Each schema is self-contained JSON Schema
// 2020-12: the component schemas it needs are copied into `$defs`.
//
// Combinators at the top of a body schema (ActRequest's `not` and allOf of if/then) are left
// out of the tool schema: several model APIs reject allOf/anyOf/oneOf/not at the top level of a
// tool's input schema, and the server validates the body against the full schema anyway (a
// violation comes back as an `invalid_request` tool error). Nested combinators stay.
package mcpcatalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/originweave/bap/codegen/apimodel"
)

// Tool is one catalog entry, as server/internal/mcpcatalog reads it.
type Tool struct {
	Name        string         `json:"name"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"inputSchema"`
	Mutating    bool           `json:"mutating"`
	Scope       string         `json:"scope"`
}

// Catalog is the file's shape.
type Catalog struct {
	Comment string `json:"$comment"`
	Version string `json:"version"`
	Tools   []Tool `json:"tools"`
}

// keywords of a body schema that are merged into (or dropped from) the tool schema.
var (
	bodyMerged  = map[string]bool{"type": true, "properties": true, "required": true, "additionalProperties": true, "title": true, "description": true, "examples": true, "$comment": true}
	bodyDropped = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "not": true, "if": true, "then": true, "else": true, "dependentRequired": true, "dependentSchemas": true}
)

// Generate renders tools.gen.json.
func Generate(d *apimodel.Document) ([]byte, error) {
	cat := Catalog{
		Comment: apimodel.Header + " Source: spec/openapi.yaml via server/internal/apigen/openapi.gen.json (codegen/mcpcatalog).",
		Version: d.Version,
	}
	for _, o := range d.MCPOperations() {
		t, err := tool(d, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.ID, err)
		}
		cat.Tools = append(cat.Tools, t)
	}
	sort.Slice(cat.Tools, func(i, j int) bool { return cat.Tools[i].Name < cat.Tools[j].Name })
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cat); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func tool(d *apimodel.Document, o *apimodel.Operation) (Tool, error) {
	props := map[string]any{}
	var required []string
	add := func(name string, schema map[string]any, req bool) error {
		if _, dup := props[name]; dup {
			return fmt.Errorf("argument %s is declared twice (parameter and body field?)", name)
		}
		props[name] = schema
		if req {
			required = append(required, name)
		}
		return nil
	}
	for _, p := range append(append([]apimodel.Param{}, o.PathParams...), o.QueryParams...) {
		s := clean(p.Schema)
		if p.Description != "" {
			s["description"] = p.Description
		}
		if err := add(p.Name, s, p.Required || p.In == "path"); err != nil {
			return Tool{}, err
		}
	}
	if o.Body != "" {
		body := d.Schemas[o.Body]
		if body["type"] != "object" {
			return Tool{}, fmt.Errorf("body %s is not an object schema", o.Body)
		}
		for k := range body {
			if !bodyMerged[k] && !bodyDropped[k] {
				return Tool{}, fmt.Errorf("body %s: keyword %q cannot be merged into a tool schema", o.Body, k)
			}
		}
		req := map[string]bool{}
		for _, r := range arr(body["required"]) {
			if name, ok := r.(string); ok {
				req[name] = true
			}
		}
		names := make([]string, 0)
		for k := range obj(body["properties"]) {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if err := add(k, clean(obj(obj(body["properties"])[k])), req[k]); err != nil {
				return Tool{}, err
			}
		}
	}
	if o.Mutating {
		key := map[string]any{
			"type":        "string",
			"minLength":   1,
			"maxLength":   255,
			"pattern":     "^[\\x21-\\x7E]{1,255}$",
			"description": "Idempotency key (1–255 visible ASCII characters, e.g. a UUID), sent as the Idempotency-Key header. Reuse it to retry this call safely: the same key with the same arguments returns the first result again and the action happens once; the same key with other arguments is an error.",
		}
		if err := add("idempotency_key", key, true); err != nil {
			return Tool{}, err
		}
	}
	sort.Strings(required)
	schema := map[string]any{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if len(required) > 0 {
		schema["required"] = required
	}
	defs := map[string]any{}
	if err := collectDefs(d, schema, defs); err != nil {
		return Tool{}, err
	}
	if len(defs) > 0 {
		schema["$defs"] = defs
	}
	desc := o.Description
	if desc == "" {
		desc = o.Summary
	}
	return Tool{
		Name:        o.ID,
		Title:       strings.TrimSuffix(o.Summary, "."),
		Description: desc,
		InputSchema: schema,
		Mutating:    o.Mutating,
		Scope:       o.Scope,
	}, nil
}

// collectDefs copies every component schema s refers to (transitively) into defs and
// rewrites the references to #/$defs/<Name>.
func collectDefs(d *apimodel.Document, s any, defs map[string]any) error {
	switch t := s.(type) {
	case map[string]any:
		if ref, ok := t["$ref"].(string); ok {
			name, isComp := strings.CutPrefix(ref, "#/components/schemas/")
			if !isComp {
				if strings.HasPrefix(ref, "#/$defs/") {
					return nil
				}
				return fmt.Errorf("unexpected reference %s", ref)
			}
			t["$ref"] = "#/$defs/" + name
			if _, done := defs[name]; done {
				return nil
			}
			src := d.Schemas[name]
			if src == nil {
				return fmt.Errorf("unknown schema %s", name)
			}
			c := clean(src)
			defs[name] = c
			if err := collectDefs(d, c, defs); err != nil {
				return err
			}
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "$defs" {
				continue
			}
			if err := collectDefs(d, t[k], defs); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range t {
			if err := collectDefs(d, e, defs); err != nil {
				return err
			}
		}
	}
	return nil
}

// schema keywords whose value is a map of subschemas, a subschema, or a list of subschemas.
var (
	mapOfSchemas  = map[string]bool{"properties": true, "patternProperties": true, "$defs": true, "dependentSchemas": true}
	oneSchema     = map[string]bool{"items": true, "additionalProperties": true, "not": true, "contains": true, "propertyNames": true, "if": true, "then": true, "else": true, "unevaluatedItems": true, "unevaluatedProperties": true}
	listOfSchemas = map[string]bool{"allOf": true, "anyOf": true, "oneOf": true, "prefixItems": true}
)

// clean deep-copies a schema without its annotations that only cost a model tokens: examples,
// and the titles of component schemas (their names live on in $defs keys).
func clean(s map[string]any) map[string]any {
	out := make(map[string]any, len(s))
	for k, v := range s {
		switch {
		case k == "examples" || k == "title":
			continue
		case mapOfSchemas[k]:
			m := map[string]any{}
			for name, sub := range obj(v) {
				m[name] = clean(obj(sub))
			}
			out[k] = m
		case oneSchema[k]:
			if sub, ok := v.(map[string]any); ok {
				out[k] = clean(sub)
			} else {
				out[k] = v
			}
		case listOfSchemas[k]:
			var l []any
			for _, sub := range arr(v) {
				l = append(l, clean(obj(sub)))
			}
			out[k] = l
		default:
			out[k] = deepCopy(v)
		}
	}
	return out
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			l[i] = deepCopy(e)
		}
		return l
	default:
		return v
	}
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func arr(v any) []any {
	a, _ := v.([]any)
	return a
}
