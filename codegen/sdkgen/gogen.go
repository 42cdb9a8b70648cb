package sdkgen

import (
	"bytes"
	"fmt"
	"go/format"
	"regexp"
	"strings"

	"github.com/originweave/bap/codegen/apimodel"
)

// handWritten are the names sdk-go declares by hand; no schema may take them, or types.gen.go
// (oapi-codegen) would clash with them.
var handWritten = []string{"Client", "Option", "CallOption", "ResponseMeta", "Blob", "EventTypes", "EventDataTypes", "NewClient", "IsProblem"}

// GoClient renders sdk-go/client.gen.go: one Client method per contract operation.
func GoClient(d *apimodel.Document) ([]byte, error) {
	for _, n := range handWritten {
		if d.Schemas[n] != nil {
			return nil, fmt.Errorf("schema %s clashes with a hand-written sdk-go name", n)
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "// %s\n// Source: spec/openapi.yaml (%s %s), via server/internal/apigen/openapi.gen.json.\n\n", apimodel.Header, d.Title, d.Version)
	var body bytes.Buffer
	imports := map[string]bool{"context": true, "net/http": true, "net/url": true}
	for _, o := range d.ContractOperations() {
		if err := goMethod(&body, o, imports); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ID, err)
		}
	}
	b.WriteString("package bap\n\nimport (\n")
	for _, imp := range []string{"context", "net/http", "net/url", "strconv"} {
		if imports[imp] {
			fmt.Fprintf(&b, "\t%q\n", imp)
		}
	}
	b.WriteString(")\n\n")
	b.Write(body.Bytes())
	return gofmt(b.Bytes())
}

func goMethod(b *bytes.Buffer, o *apimodel.Operation, imports map[string]bool) error {
	name := o.PascalID()
	// Doc comment.
	fmt.Fprintf(b, "// %s calls %s (%s %s): %s\n", name, o.ID, o.Method, o.Path, sentence(o.Summary))
	if o.Description != "" {
		b.WriteString("//\n")
		b.WriteString(wrap(o.Description, "// ", 100))
	}
	b.WriteString("//\n")
	var notes []string
	if o.Mutating {
		notes = append(notes, "Mutating: it sends an Idempotency-Key (WithIdempotencyKey, else a new UUID v7) that the client's own retries reuse.")
	} else {
		notes = append(notes, "Read-only: it sends no Idempotency-Key.")
	}
	if o.Scope != "" {
		notes = append(notes, fmt.Sprintf("Scope (remote profile): %s.", o.Scope))
	}
	for _, p := range o.QueryParams {
		notes = append(notes, fmt.Sprintf("%s: %s Its zero value is not sent (the server's default applies).", apimodel.GoLocal(p.Name), sentence(p.Description)))
	}
	for _, alt := range o.Alternatives() {
		notes = append(notes, fmt.Sprintf("The server may also answer %d with %s (%s); the result then holds only the fields the two share, and WithResponseMeta gives the status and the raw body to decode.", alt.Status, alt.Schema, strings.TrimSuffix(alt.Description, ".")))
	}
	b.WriteString(wrap(strings.Join(notes, " "), "// ", 100))

	// Signature.
	args := []string{"ctx context.Context"}
	for _, p := range o.PathParams {
		args = append(args, apimodel.GoLocal(p.Name)+" string")
	}
	if o.Body != "" {
		args = append(args, "body "+o.Body)
	}
	type query struct{ name, local, conv string }
	var queries []query
	for _, p := range o.QueryParams {
		typ, conv, err := goQueryType(p)
		if err != nil {
			return err
		}
		local := apimodel.GoLocal(p.Name)
		args = append(args, local+" "+typ)
		queries = append(queries, query{p.Name, local, conv})
		if strings.HasPrefix(conv, "strconv.") {
			imports["strconv"] = true
		}
	}
	args = append(args, "opts ...CallOption")
	result := "*" + o.Primary().Schema
	if o.Binary() {
		result = "*Blob"
	}
	fmt.Fprintf(b, "func (c *Client) %s(%s) (%s, error) {\n", name, strings.Join(args, ", "), result)

	// Body.
	fmt.Fprintf(b, "\treq := &request{op: %q, method: http.Method%s, path: %s", o.ID, methodConst(o.Method), goPath(o))
	if o.Body != "" {
		b.WriteString(", body: body, hasBody: true")
	}
	if o.Mutating {
		b.WriteString(", mutating: true")
	}
	b.WriteString("}\n")
	if len(queries) > 0 {
		b.WriteString("\tq := url.Values{}\n")
		for _, q := range queries {
			fmt.Fprintf(b, "\tif %s != %s {\n\t\tq.Set(%q, %s)\n\t}\n", q.local, zeroOf(q.conv), q.name, fmt.Sprintf(q.conv, q.local))
		}
		b.WriteString("\treq.query = q\n")
	}
	if o.Binary() {
		b.WriteString("\treturn c.callBlob(ctx, req, opts)\n}\n\n")
		return nil
	}
	fmt.Fprintf(b, "\tout := new(%s)\n\tif err := c.call(ctx, req, out, opts); err != nil {\n\t\treturn nil, err\n\t}\n\treturn out, nil\n}\n\n", o.Primary().Schema)
	return nil
}

// goQueryType maps a query parameter to a Go argument type whose zero value means "absent".
// That is only sound when the zero value is the parameter's default or not a valid value.
func goQueryType(p apimodel.Param) (typ, conv string, err error) {
	switch p.Schema["type"] {
	case "integer":
		def, hasDef := p.Schema["default"].(float64)
		minimum, hasMin := p.Schema["minimum"].(float64)
		if !(hasDef && def == 0) && !(hasMin && minimum > 0) {
			return "", "", fmt.Errorf("query parameter %s: 0 must be its default or invalid, so that the SDK can omit it", p.Name)
		}
		return "int", "strconv.Itoa(%s)", nil
	case "string":
		if d, ok := p.Schema["default"].(string); ok && d != "" {
			return "", "", fmt.Errorf("query parameter %s: a non-empty default is not supported", p.Name)
		}
		return "string", "%s", nil
	}
	return "", "", fmt.Errorf("query parameter %s: type %v not supported", p.Name, p.Schema["type"])
}

func zeroOf(conv string) string {
	if strings.HasPrefix(conv, "strconv") {
		return "0"
	}
	return `""`
}

func methodConst(m string) string {
	return strings.ToUpper(m[:1]) + strings.ToLower(m[1:])
}

var placeholderRE = regexp.MustCompile(`\{([^}]+)\}`)

// goPath renders the route as a Go string expression with escaped path parameters.
func goPath(o *apimodel.Operation) string {
	var parts []string
	rest := o.Path
	for {
		loc := placeholderRE.FindStringSubmatchIndex(rest)
		if loc == nil {
			if rest != "" {
				parts = append(parts, fmt.Sprintf("%q", rest))
			}
			break
		}
		if loc[0] > 0 {
			parts = append(parts, fmt.Sprintf("%q", rest[:loc[0]]))
		}
		parts = append(parts, "url.PathEscape("+apimodel.GoLocal(rest[loc[2]:loc[3]])+")")
		rest = rest[loc[1]:]
	}
	return strings.Join(parts, " + ")
}

// GoEvents renders sdk-go/events.gen.go. types.gen.go already holds EventType (with one
// constant per type), Event and every <Type>Event/<Type>Data struct, because spec/schemas holds
// them; this adds what only AsyncAPI says: which types exist and which data struct each has.
func GoEvents(d *apimodel.Document, events []apimodel.EventMessage) ([]byte, error) {
	if d.Schemas["EventType"] == nil || d.Schemas["Event"] == nil {
		return nil, fmt.Errorf("schemas Event and EventType are required")
	}
	enum := map[string]bool{}
	for _, v := range d.Schemas["EventType"]["enum"].([]any) {
		enum[v.(string)] = true
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "// %s\n// Source: spec/asyncapi.yaml, via server/internal/apigen/asyncapi.gen.json.\n\n", apimodel.Header)
	b.WriteString("package bap\n\nimport (\n\t\"encoding/json\"\n\t\"fmt\"\n)\n\n")
	b.WriteString("// EventTypes lists every event type the AsyncAPI document describes, sorted.\nvar EventTypes = []EventType{\n")
	for _, e := range events {
		if !enum[e.Type] {
			return nil, fmt.Errorf("event type %s is not in the EventType enum", e.Type)
		}
		fmt.Fprintf(&b, "\t%q,\n", e.Type)
	}
	b.WriteString("}\n\n")
	b.WriteString("// EventDataTypes maps each event type to a constructor of its `data` struct (a pointer).\nvar EventDataTypes = map[EventType]func() any{\n")
	for _, e := range events {
		fmt.Fprintf(&b, "\t// %s\n\t%q: func() any { return new(%s) },\n", strings.TrimSpace(wrapOne(e.Summary)), e.Type, e.Data)
	}
	b.WriteString("}\n\n")
	b.WriteString(`// DecodeData decodes e.Data into the struct EventDataTypes gives for e.Type (for example a
// *TaskStateChangedData). An event type this SDK does not know is an error; e.Data still holds
// the payload.
func (e *Event) DecodeData() (any, error) {
	mk, ok := EventDataTypes[e.Type]
	if !ok {
		return nil, fmt.Errorf("bap: unknown event type %q", e.Type)
	}
	raw, err := json.Marshal(e.Data)
	if err != nil {
		return nil, err
	}
	v := mk()
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("bap: event %s data: %w", e.Type, err)
	}
	return v, nil
}
`)
	if len(enum) != len(events) {
		return nil, fmt.Errorf("EventType has %d values but AsyncAPI describes %d messages", len(enum), len(events))
	}
	return gofmt(b.Bytes())
}

func wrapOne(s string) string { return strings.Join(strings.Fields(s), " ") }

func gofmt(src []byte) ([]byte, error) {
	out, err := format.Source(src)
	if err != nil {
		return nil, fmt.Errorf("gofmt: %w\n%s", err, src)
	}
	return out, nil
}
