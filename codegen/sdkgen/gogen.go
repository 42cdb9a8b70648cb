package sdkgen

import (
	"bytes"
	"fmt"
	"go/format"
	"maps"
	"regexp"
	"slices"
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
		if err := goMethod(&body, d, o, imports); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ID, err)
		}
	}
	b.WriteString("package bap\n\nimport (\n")
	for _, imp := range []string{"context", "net/http", "net/url", "slices", "strconv"} {
		if imports[imp] {
			fmt.Fprintf(&b, "\t%q\n", imp)
		}
	}
	b.WriteString(")\n\n")
	b.Write(body.Bytes())
	return gofmt(b.Bytes())
}

func goMethod(b *bytes.Buffer, d *apimodel.Document, o *apimodel.Operation, imports map[string]bool) error {
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
		if alt.Only != nil {
			notes = append(notes, fmt.Sprintf("The server may also answer %d with %s; the result then holds only %s, and its %s method returns it.", alt.Status, alt.Schema, strings.Join(goFields(alt.Only), " and "), goAccessor(alt.Schema)))
			continue
		}
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
	for _, alt := range o.Alternatives() {
		if alt.Only != nil {
			if err := goAccessorMethod(b, d, o, alt, imports); err != nil {
				return err
			}
		}
	}
	return nil
}

// goAccessor names the method of an operation's result that returns a closed alternative answer
// (InterruptedCommandResponse → Interrupted): the schema's name without Response and Command.
func goAccessor(schema string) string {
	return strings.TrimSuffix(strings.TrimSuffix(schema, "Response"), "Command")
}

// goFields are the Go field names oapi-codegen gives snake_case properties (context_id →
// ContextId).
func goFields(props []string) []string {
	out := make([]string, len(props))
	for i, p := range props {
		out[i] = apimodel.Pascal(p)
	}
	return out
}

// goAccessorMethod renders the method of o's result type that says whether the answer was the
// closed alternative alt (only alt.Only set) and returns it. A Go result cannot remember which
// body it was decoded from, so the method reads it back from the fields, and the generator
// checks that this is exact: the result requires a property alt does not admit whose Go value is
// never zero in a valid body (an object, an array, a patterned or non-empty string), alt's
// properties are the result's own, of the same schemas, and an enum alt puts on a nested
// property (the interrupted receipt's outcome) is checked too, which is what tells alt from
// another alternative that decodes to the same fields (act's 202, whose receipt is
// pending_approval).
func goAccessorMethod(b *bytes.Buffer, d *apimodel.Document, o *apimodel.Operation, alt apimodel.Response, imports map[string]bool) error {
	primary := o.Primary().Schema
	ps, as := obj(d.Schemas[primary]["properties"]), obj(d.Schemas[alt.Schema]["properties"])
	admits := map[string]bool{}
	var checks []string
	for _, p := range alt.Only {
		admits[p] = true
		pr, ar := obj(ps[p]), obj(as[p])
		if pr == nil || pr["$ref"] == nil || pr["$ref"] != ar["$ref"] {
			return fmt.Errorf("%s: property %s of %s must be a property of %s with the same $ref", o.ID, p, alt.Schema, primary)
		}
		nested := obj(ar["properties"])
		for _, k := range slices.Sorted(maps.Keys(nested)) {
			enum := arr(obj(nested[k])["enum"])
			if len(enum) == 0 {
				return fmt.Errorf("%s: %s.%s.%s: only an enum may narrow a nested property", o.ID, alt.Schema, p, k)
			}
			vals := make([]string, len(enum))
			for i, v := range enum {
				vals[i] = fmt.Sprintf("%q", str(v))
			}
			checks = append(checks, fmt.Sprintf("!slices.Contains([]string{%s}, string(r.%s.%s))", strings.Join(vals, ", "), apimodel.Pascal(p), apimodel.Pascal(k)))
		}
	}
	told := func(schema string) bool {
		sp := obj(d.Schemas[schema]["properties"])
		for _, q := range arr(d.Schemas[schema]["required"]) {
			if ps[str(q)] != nil && !admits[str(q)] && neverZero(d, obj(sp[str(q)])) {
				return true
			}
		}
		return false
	}
	if !told(primary) {
		return fmt.Errorf("%s: %s requires no property besides %s's whose Go value is never zero, so its %s method could not tell them apart", o.ID, primary, alt.Schema, goAccessor(alt.Schema))
	}
	for _, other := range o.Alternatives() {
		if other.Schema != alt.Schema && !told(other.Schema) && len(checks) == 0 {
			return fmt.Errorf("%s: %s decodes into %s with only %s's fields set, and %s narrows none of them", o.ID, other.Schema, primary, alt.Schema, alt.Schema)
		}
	}
	fields := goFields(alt.Only)
	keep := make([]string, len(fields))
	set := make([]string, len(fields))
	for i, f := range fields {
		keep[i] = fmt.Sprintf("%q", f)
		set[i] = fmt.Sprintf("%s: r.%s", f, f)
	}
	cond := append([]string{"r == nil", fmt.Sprintf("!onlyFields(r, %s)", strings.Join(keep, ", "))}, checks...)
	if len(checks) > 0 {
		imports["slices"] = true
	}
	m := goAccessor(alt.Schema)
	doc := fmt.Sprintf("%s returns the %s when %s answered it (status %d) instead of its result, and false otherwise. %s Then only %s is set here.",
		m, alt.Schema, o.ID, alt.Status, sentence(alt.Description), strings.Join(fields, " and "))
	b.WriteString(wrap(doc, "// ", 100))
	fmt.Fprintf(b, "func (r *%s) %s() (*%s, bool) {\n", primary, m, alt.Schema)
	fmt.Fprintf(b, "\tif %s {\n\t\treturn nil, false\n\t}\n", strings.Join(cond, " || "))
	fmt.Fprintf(b, "\treturn &%s{%s}, true\n}\n\n", alt.Schema, strings.Join(set, ", "))
	return nil
}

// neverZero reports whether a valid value of the property schema p decodes into a Go value that
// is not its type's zero value.
func neverZero(d *apimodel.Document, p map[string]any) bool {
	if name, ok := apimodel.Ref(p); ok {
		p = d.Schemas[name]
	}
	switch p["type"] {
	case "object", "array":
		return true
	case "string":
		min, _ := p["minLength"].(float64)
		return p["pattern"] != nil || min > 0
	}
	return false
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
