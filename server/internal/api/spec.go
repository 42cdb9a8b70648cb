package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// operation is what the transport needs to know about one operation, read from the bundled spec.
type operation struct {
	ID       string
	Method   string
	Path     string
	Scope    string // required OAuth scope; "" for anonymous operations
	Mutating bool
	// body validates the JSON request body; nil when the operation takes none.
	body   *jsonschema.Schema
	params map[string]*param // path and query parameters, by name
}

type param struct {
	name     string
	in       string
	required bool
	integer  bool
	schema   *jsonschema.Schema
}

// specIndex holds every operation of the spec by operationId.
type specIndex struct {
	ops map[string]*operation
}

// loadSpec reads the bundled OpenAPI document and compiles the schemas of every request body and
// parameter. The schemas are moved under $defs of one JSON Schema 2020-12 resource so that the
// validator resolves #/components/schemas references without knowing OpenAPI.
func loadSpec(openapi []byte) (*specIndex, error) {
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas    map[string]any             `json:"schemas"`
			Parameters map[string]json.RawMessage `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapi, &doc); err != nil {
		return nil, fmt.Errorf("parsing bundled OpenAPI: %w", err)
	}
	defs := rewriteRefs(doc.Components.Schemas).(map[string]any)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	const root = "urn:bap:schemas"
	if err := c.AddResource(root, map[string]any{"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": defs}); err != nil {
		return nil, fmt.Errorf("loading schemas: %w", err)
	}
	inline := 0
	compile := func(s json.RawMessage) (*jsonschema.Schema, error) {
		var v any
		if err := json.Unmarshal(s, &v); err != nil {
			return nil, err
		}
		if m, ok := v.(map[string]any); ok {
			if ref, ok := m["$ref"].(string); ok && len(m) == 1 {
				return c.Compile(root + strings.Replace(ref, "#/components/schemas/", "#/$defs/", 1))
			}
		}
		inline++
		loc := fmt.Sprintf("urn:bap:inline:%d", inline)
		// Inline schemas refer to components by absolute reference into the shared resource.
		if err := c.AddResource(loc, rewriteRefsTo(v, root)); err != nil {
			return nil, err
		}
		return c.Compile(loc)
	}
	idx := &specIndex{ops: map[string]*operation{}}
	for path, item := range doc.Paths {
		for method, raw := range item {
			switch method {
			case "get", "post", "put", "patch", "delete":
			default:
				continue
			}
			var op struct {
				OperationID string                `json:"operationId"`
				Mutating    bool                  `json:"x-bap-mutating"`
				Security    []map[string][]string `json:"security"`
				Parameters  []json.RawMessage     `json:"parameters"`
				RequestBody *struct {
					Content map[string]struct {
						Schema json.RawMessage `json:"schema"`
					} `json:"content"`
				} `json:"requestBody"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			o := &operation{ID: op.OperationID, Method: strings.ToUpper(method), Path: path, Mutating: op.Mutating, params: map[string]*param{}}
			for _, sec := range op.Security {
				for _, scopes := range sec {
					if len(scopes) > 0 {
						o.Scope = scopes[0]
					}
				}
			}
			for _, rawParam := range op.Parameters {
				p, err := resolveParam(rawParam, doc.Components.Parameters)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", o.ID, err)
				}
				if p.In != "path" && p.In != "query" {
					continue
				}
				s, err := compile(p.Schema)
				if err != nil {
					return nil, fmt.Errorf("%s parameter %s: %w", o.ID, p.Name, err)
				}
				o.params[p.Name] = &param{name: p.Name, in: p.In, required: p.Required, schema: s,
					integer: bytes.Contains(p.Schema, []byte(`"integer"`))}
			}
			if op.RequestBody != nil {
				if ct, ok := op.RequestBody.Content["application/json"]; ok {
					s, err := compile(ct.Schema)
					if err != nil {
						return nil, fmt.Errorf("%s request body: %w", o.ID, err)
					}
					o.body = s
				}
			}
			idx.ops[o.ID] = o
		}
	}
	return idx, nil
}

type paramSpec struct {
	Ref      string          `json:"$ref"`
	Name     string          `json:"name"`
	In       string          `json:"in"`
	Required bool            `json:"required"`
	Schema   json.RawMessage `json:"schema"`
}

// resolveParam follows a #/components/parameters reference.
func resolveParam(raw json.RawMessage, params map[string]json.RawMessage) (paramSpec, error) {
	var p paramSpec
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, err
	}
	if p.Ref == "" {
		return p, nil
	}
	target, ok := params[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
	if !ok || !strings.HasPrefix(p.Ref, "#/components/parameters/") {
		return p, fmt.Errorf("unresolvable parameter reference %q", p.Ref)
	}
	return resolveParam(target, params)
}

func rewriteRefs(v any) any { return rewriteRefsTo(v, "") }

// rewriteRefsTo turns #/components/schemas/X into <base>#/$defs/X.
func rewriteRefsTo(v any, base string) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, "#/components/schemas/") {
				out[k] = base + "#/$defs/" + strings.TrimPrefix(s, "#/components/schemas/")
				continue
			}
			out[k] = rewriteRefsTo(e, base)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = rewriteRefsTo(e, base)
		}
		return out
	default:
		return v
	}
}

// errInvalidJSON reports a body that is not one JSON value.
var errInvalidJSON = errors.New("the body is not valid JSON")

// decodeBody parses a JSON body for validation (numbers kept exact).
func decodeBody(body []byte) (any, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return map[string]any{}, nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return nil, errInvalidJSON
	}
	return v, nil
}

// validateValue checks v against s and lists the violations without echoing any value.
func validateValue(s *jsonschema.Schema, v any, prefix string) []Violation {
	err := s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Violation{{Pointer: prefix, Message: "invalid"}}
	}
	var out []Violation
	collectViolations(ve, prefix, &out)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Pointer < out[j].Pointer })
	if len(out) > 20 {
		out = out[:20]
	}
	return out
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func quoteNames(names []string) string {
	q := make([]string, 0, len(names))
	for _, n := range names {
		if safeName.MatchString(n) {
			q = append(q, strconv.Quote(n))
		} else {
			q = append(q, "(a property with an unusual name)")
		}
	}
	return strings.Join(q, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func collectViolations(ve *jsonschema.ValidationError, prefix string, out *[]Violation) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collectViolations(c, prefix, out)
		}
		return
	}
	ptr := prefix
	for _, seg := range ve.InstanceLocation {
		if !safeName.MatchString(seg) {
			seg = "~unusual"
		}
		ptr += "/" + seg
	}
	var msg string
	switch k := ve.ErrorKind.(type) {
	case *kind.Required:
		msg = "missing required property " + quoteNames(k.Missing)
	case *kind.AdditionalProperties:
		// The names come from the request: count them, never repeat them.
		msg = fmt.Sprintf("%d unknown %s (the schema lists every allowed property)", len(k.Properties), plural(len(k.Properties), "property", "properties"))
	case *kind.Type:
		msg = fmt.Sprintf("must be %s, not %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Enum:
		msg = "must be one of the values the schema lists"
	case *kind.Const:
		msg = "must equal the value the schema fixes"
	case *kind.MinLength:
		msg = fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		msg = fmt.Sprintf("must be at most %d characters long", k.Want)
	case *kind.Pattern:
		msg = "does not match the required pattern"
	case *kind.Format:
		msg = "must be a valid " + k.Want
	case *kind.MinItems:
		msg = fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		msg = fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.Minimum, *kind.ExclusiveMinimum:
		msg = "is below the minimum"
	case *kind.Maximum, *kind.ExclusiveMaximum:
		msg = "is above the maximum"
	case *kind.OneOf:
		msg = "must match exactly one of the allowed forms"
	case *kind.MinProperties:
		msg = fmt.Sprintf("must have at least %d properties", k.Want)
	case *kind.MaxProperties:
		msg = fmt.Sprintf("must have at most %d properties", k.Want)
	default:
		msg = "violates " + strings.Join(ve.ErrorKind.KeywordPath(), "/")
	}
	*out = append(*out, Violation{Pointer: ptr, Message: msg})
}
