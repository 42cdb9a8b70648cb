// Package schemaextract is the engine-neutral half of extract kind schema, which both browser
// adapters (CDP and WebDriver BiDi) answer alike: the client's JSON Schema compiled (without
// loading any reference), each field's query resolved by the adapter, the values found converted
// to the types the schema gives the properties, and the result validated against the schema.
package schemaextract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/pagekit"
)

// Find returns the values (the page agent's fieldValue: a control's value, a checkbox's state,
// else the text) of at most limit best matches of q in the session's document, best first.
type Find func(ctx context.Context, q page.Query, limit int) ([]any, error)

// Error reports extracted data that does not satisfy the schema, or a schema that does not
// compile.
type Error struct {
	// Detail says what is wrong.
	Detail string
	// Data is the extracted value that failed validation (nil when the schema itself is invalid).
	Data any
}

// Error returns the detail.
func (e *Error) Error() string { return "schema extract: " + e.Detail }

// Unwrap makes an Error a page.ErrInvalidRequest.
func (e *Error) Unwrap() error { return page.ErrInvalidRequest }

// refuseLoader keeps a client's schema from reading anything ($ref to a file or URL): only the
// schema itself is available.
type refuseLoader struct{}

func (refuseLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("schema references are not loaded (%s)", pagekit.RedactURL(u))
}

// arrayLimit bounds the matches an array property collects.
const arrayLimit = 200

// Extract answers extract kind schema: for each field of fields (without fields, each property of
// the schema looked up by its title, or name, as a label, then as an accessible name) the value
// of its query's best match (every match, up to 200, for an array property), converted to the
// property's type; a field nothing matches is left out ("required" in the schema decides). The
// result is validated against the schema (*Error when it does not satisfy it).
func Extract(ctx context.Context, schema []byte, fields map[string]page.Query, find Find) (map[string]any, error) {
	if len(schema) == 0 {
		return nil, fmt.Errorf("%w: schema extract needs a schema", page.ErrInvalidRequest)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, &Error{Detail: "the schema is not JSON: " + err.Error()}
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	const loc = "urn:bap:extract-schema"
	var sch *jsonschema.Schema
	if err = c.AddResource(loc, doc); err == nil {
		sch, err = c.Compile(loc)
	}
	if err != nil {
		return nil, &Error{Detail: err.Error()}
	}
	obj, _ := doc.(map[string]any)
	props, _ := obj["properties"].(map[string]any)
	mapped := len(fields) > 0
	if !mapped {
		fields = map[string]page.Query{}
		for name, p := range props {
			title := name
			if pm, ok := p.(map[string]any); ok {
				if tt, ok := pm["title"].(string); ok && tt != "" {
					title = tt
				}
			}
			fields[name] = page.Query{Label: title}
		}
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("%w: schema extract needs fields (or schema properties)", page.ErrInvalidRequest)
	}
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string]any{}
	for _, name := range names {
		q := fields[name]
		if err := pagekit.ValidQuery(q); err != nil {
			return nil, fmt.Errorf("%w (field %q)", err, name)
		}
		typ := propType(props[name])
		limit := 1
		if typ == "array" {
			limit = arrayLimit
		}
		vals, err := find(ctx, q, limit)
		if err != nil {
			return nil, err
		}
		if len(vals) == 0 && !mapped {
			if vals, err = find(ctx, page.Query{Name: q.Label}, limit); err != nil {
				return nil, err
			}
		}
		if len(vals) == 0 {
			continue // absent: "required" in the schema decides
		}
		if typ == "array" {
			itemType := ""
			if pm, ok := props[name].(map[string]any); ok {
				itemType = propType(pm["items"])
			}
			arr := make([]any, 0, len(vals))
			for _, v := range vals {
				arr = append(arr, coerce(v, itemType))
			}
			out[name] = arr
		} else {
			out[name] = coerce(vals[0], typ)
		}
	}
	if err := sch.Validate(out); err != nil {
		var ve *jsonschema.ValidationError
		detail := err.Error()
		if errors.As(err, &ve) {
			detail = ve.Error()
		}
		return nil, &Error{Detail: pagekit.Clip(detail, 1000), Data: out}
	}
	return out, nil
}

func propType(p any) string {
	pm, ok := p.(map[string]any)
	if !ok {
		return ""
	}
	switch t := pm["type"].(type) {
	case string:
		return t
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok && s != "null" {
				return s
			}
		}
	}
	return ""
}

// coerce converts an extracted value (a string or a bool) to the schema type; a value that does
// not convert is left as it is (validation then reports it).
func coerce(v any, typ string) any {
	str, isStr := v.(string)
	switch typ {
	case "number", "integer":
		if !isStr {
			return v
		}
		clean := strings.Map(func(r rune) rune {
			if (r >= '0' && r <= '9') || r == '.' || r == '-' {
				return r
			}
			return -1
		}, str)
		if typ == "integer" {
			if n, err := strconv.ParseInt(clean, 10, 64); err == nil {
				return n
			}
			if f, err := strconv.ParseFloat(clean, 64); err == nil && f == float64(int64(f)) {
				return int64(f)
			}
			return str
		}
		if f, err := strconv.ParseFloat(clean, 64); err == nil {
			return f
		}
		return str
	case "boolean":
		if isStr {
			switch strings.ToLower(strings.TrimSpace(str)) {
			case "true", "yes", "on", "1", "checked":
				return true
			case "false", "no", "off", "0", "":
				return false
			}
		}
		return v
	case "string":
		if b, ok := v.(bool); ok {
			return strconv.FormatBool(b)
		}
		return v
	}
	return v
}
