package sdkgen

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/originweave/bap/codegen/apimodel"
)

// tsReserved are names the hand-written part of sdk-ts exports next to the generated ones.
var tsReserved = []string{"Client", "ClientOptions", "CallOptions", "ProblemError", "ArtifactBlob", "RequestSpec", "Operations", "TaskEvent", "EVENT_TYPES", "EventDataMap", "KnownEventType", "ResponseInfo"}

// TSClient renders sdk-ts/src/client.gen.ts: a type alias per schema of schema.gen.ts and the
// Operations base class with one method per contract operation.
func TSClient(d *apimodel.Document) ([]byte, error) {
	for _, n := range tsReserved {
		if d.Schemas[n] != nil {
			return nil, fmt.Errorf("schema %s clashes with a name of sdk-ts", n)
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "// %s\n// Source: spec/openapi.yaml (%s %s), via server/internal/apigen/openapi.gen.json.\n\n", apimodel.Header, d.Title, d.Version)
	b.WriteString("import type { components } from \"./schema.gen.js\";\nimport type { ArtifactBlob, CallOptions, RequestSpec } from \"./index.js\";\n\n")
	b.WriteString("type S = components[\"schemas\"];\n\n")
	fmt.Fprintf(&b, "/** `info.version` of the OpenAPI document these bindings were generated from. */\nexport const SPEC_VERSION = %s;\n\n", tsStr(d.Version))
	names := make([]string, 0, len(d.Schemas))
	for n := range d.Schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	closed := map[string]apimodel.Response{}
	for _, a := range closedAnswers(d) {
		closed[a.Schema] = a
	}
	for _, n := range names {
		desc := strings.TrimSpace(str(d.Schemas[n]["description"]))
		a, isClosed := closed[n]
		if !isClosed {
			if desc != "" {
				b.WriteString(tsDoc(desc, ""))
			}
			fmt.Fprintf(&b, "export type %s = S[%s];\n", n, tsStr(n))
			continue
		}
		// TypeScript object types are open: without the absent properties, every result holding
		// `receipt` would match it too, and narrowing the union an operation returns would fail.
		var absent []string
		for _, k := range besideKeys(d, a) {
			absent = append(absent, "  "+k+"?: never;\n")
		}
		b.WriteString(tsDoc(desc+"\n\nNone of the properties of the answers it stands beside is set (they are listed as `never`), so it narrows apart from them.", ""))
		fmt.Fprintf(&b, "export type %s = S[%s] & {\n%s};\n", n, tsStr(n), strings.Join(absent, ""))
	}
	for _, a := range closedAnswers(d) {
		only := mapJoin(a.Only, func(n string) string { return "`" + n + "`" }, ", ")
		fmt.Fprintf(&b, "\n%s", tsDoc(fmt.Sprintf("Whether `answer` is the %s answer, which an operation may return instead of its result: an object whose keys are only among %s, with %s. Narrows the union the operation returns.", a.Schema, only, mapJoin(a.Required, func(n string) string { return "`" + n + "`" }, ", ")), ""))
		fmt.Fprintf(&b, "export function is%s(answer: object): answer is %s {\n", a.Schema, a.Schema)
		fmt.Fprintf(&b, "  const keys = Object.keys(answer);\n  return keys.length > 0 && keys.every((k) => %s.includes(k)) && %s.every((k) => keys.includes(k));\n}\n", "["+mapJoin(a.Only, tsStr, ", ")+"]", "["+mapJoin(a.Required, tsStr, ", ")+"]")
	}
	b.WriteString(`
/** One method per BAP operation; ` + "`Client`" + ` supplies the transport. */
export abstract class Operations {
  protected abstract request<T>(spec: RequestSpec, options?: CallOptions): Promise<T>;
  protected abstract requestBlob(spec: RequestSpec, options?: CallOptions): Promise<ArtifactBlob>;
`)
	for _, o := range d.ContractOperations() {
		if err := tsMethod(&b, d, o); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ID, err)
		}
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

func tsMethod(b *bytes.Buffer, d *apimodel.Document, o *apimodel.Operation) error {
	var args []string
	for _, p := range o.PathParams {
		args = append(args, apimodel.Camel(p.Name)+": string")
	}
	if o.Body != "" {
		if len(arr(d.Schemas[o.Body]["required"])) == 0 {
			args = append(args, "body: "+o.Body+" = {}")
		} else {
			args = append(args, "body: "+o.Body)
		}
	}
	var queryFields, queryPass []string
	for _, p := range o.QueryParams {
		var t string
		switch p.Schema["type"] {
		case "integer", "number":
			t = "number"
		case "string":
			t = "string"
		case "boolean":
			t = "boolean"
		default:
			return fmt.Errorf("query parameter %s: unsupported type", p.Name)
		}
		queryFields = append(queryFields, fmt.Sprintf("%s?: %s", p.Name, t))
		queryPass = append(queryPass, fmt.Sprintf("%s: query?.%s", p.Name, p.Name))
	}
	if len(queryFields) > 0 {
		args = append(args, "query?: { "+strings.Join(queryFields, "; ")+" }")
	}
	args = append(args, "options?: CallOptions")
	ret := "ArtifactBlob"
	if !o.Binary() {
		ts := []string{o.Primary().Schema}
		for _, a := range o.Alternatives() {
			ts = append(ts, a.Schema)
		}
		ret = strings.Join(ts, " | ")
	}
	// Doc comment.
	var doc strings.Builder
	doc.WriteString(sentence(o.Summary) + "\n\n")
	if o.Description != "" {
		doc.WriteString(o.Description + "\n\n")
	}
	fmt.Fprintf(&doc, "`%s %s` (`%s`", o.Method, o.Path, o.ID)
	if o.Mutating {
		doc.WriteString("; mutating: sends `options.idempotencyKey`, or a new UUID that the client's own retries reuse")
	} else {
		doc.WriteString("; read-only")
	}
	if o.Scope != "" {
		fmt.Fprintf(&doc, "; scope `%s`", o.Scope)
	}
	doc.WriteString(").")
	for _, a := range o.Alternatives() {
		fmt.Fprintf(&doc, " May also answer %d with %s: %s", a.Status, a.Schema, sentence(a.Description))
	}
	b.WriteString("\n" + tsDoc(doc.String(), "  "))
	fmt.Fprintf(b, "  %s(%s): Promise<%s> {\n", apimodel.Camel(o.ID), strings.Join(args, ", "), ret)
	spec := []string{"op: " + tsStr(o.ID), "method: " + tsStr(o.Method), "path: " + tsPath(o)}
	if o.Body != "" {
		spec = append(spec, "body")
	}
	if len(queryPass) > 0 {
		spec = append(spec, "query: { "+strings.Join(queryPass, ", ")+" }")
	}
	if o.Mutating {
		spec = append(spec, "mutating: true")
	}
	if o.Binary() {
		fmt.Fprintf(b, "    return this.requestBlob({ %s }, options);\n  }\n", strings.Join(spec, ", "))
	} else {
		fmt.Fprintf(b, "    return this.request<%s>({ %s }, options);\n  }\n", ret, strings.Join(spec, ", "))
	}
	return nil
}

func tsPath(o *apimodel.Operation) string {
	var b strings.Builder
	b.WriteByte('`')
	rest := o.Path
	for {
		loc := placeholderRE.FindStringSubmatchIndex(rest)
		if loc == nil {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:loc[0]])
		fmt.Fprintf(&b, "${encodeURIComponent(%s)}", apimodel.Camel(rest[loc[2]:loc[3]]))
		rest = rest[loc[1]:]
	}
	b.WriteByte('`')
	return b.String()
}

// TSEvents renders sdk-ts/src/events.gen.ts: the union of every event message, discriminated by
// `type`, the list of types and the map from type to `data` shape.
func TSEvents(d *apimodel.Document, events []apimodel.EventMessage) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// %s\n// Source: spec/asyncapi.yaml, via server/internal/apigen/asyncapi.gen.json.\n\n", apimodel.Header)
	b.WriteString("import type { components } from \"./schema.gen.js\";\n\ntype S = components[\"schemas\"];\n\n")
	b.WriteString("/** A task event of any known type, discriminated by `type` (`switch (e.type)` narrows `data`). */\nexport type TaskEvent =\n")
	for i, e := range events {
		if d.Schemas[e.Payload] == nil || d.Schemas[e.Data] == nil {
			return nil, fmt.Errorf("event %s: schema %s or %s is not in the OpenAPI bundle", e.Type, e.Payload, e.Data)
		}
		sep := ""
		if i == len(events)-1 {
			sep = ";"
		}
		fmt.Fprintf(&b, "  | S[%s]%s\n", tsStr(e.Payload), sep)
	}
	b.WriteString("\n/** Every event type the AsyncAPI document describes, sorted. */\nexport const EVENT_TYPES = [\n")
	for _, e := range events {
		fmt.Fprintf(&b, "  %s,\n", tsStr(e.Type))
	}
	b.WriteString("] as const;\n\n/** An event type this SDK knows. */\nexport type KnownEventType = (typeof EVENT_TYPES)[number];\n\n")
	b.WriteString("/** The `data` shape of each event type. */\nexport interface EventDataMap {\n")
	for _, e := range events {
		b.WriteString(tsDoc(wrapOne(e.Summary), "  "))
		fmt.Fprintf(&b, "  %s: S[%s];\n", tsStr(e.Type), tsStr(e.Data))
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

func tsStr(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func tsDoc(text, indent string) string {
	text = strings.ReplaceAll(strings.TrimSpace(text), "*/", `*\/`)
	body := wrap(text, indent+" * ", 100)
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	if len(lines) == 1 {
		one := indent + "/** " + strings.TrimPrefix(lines[0], indent+" * ") + " */"
		if len(one) <= 100 {
			return one + "\n"
		}
	}
	return indent + "/**\n" + body + indent + " */\n"
}

// besideKeys returns, sorted, the properties of every answer of the operations that may give the
// closed answer a, except a's own.
func besideKeys(d *apimodel.Document, a apimodel.Response) []string {
	own := map[string]bool{}
	for _, k := range a.Only {
		own[k] = true
	}
	keys := map[string]bool{}
	for _, o := range d.ContractOperations() {
		if !slices.ContainsFunc(o.Alternatives(), func(r apimodel.Response) bool { return r.Schema == a.Schema }) {
			continue
		}
		for _, r := range o.Responses {
			for k := range obj(d.Schemas[r.Schema]["properties"]) {
				if !own[k] {
					keys[k] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(keys))
}
