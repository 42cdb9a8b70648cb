package sdkgen

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/originweave/bap/codegen/apimodel"
)

// pyReserved are names the hand-written part of sdk-py (or this file's own section) defines.
var pyReserved = []string{"Client", "ProblemError", "Blob", "Operations", "TaskEvent", "EVENT_TYPES", "EVENT_DATA_TYPES", "SPEC_VERSION"}

var pyKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true,
	"elif": true, "else": true, "except": true, "finally": true, "for": true, "from": true,
	"global": true, "if": true, "import": true, "in": true, "is": true, "lambda": true,
	"nonlocal": true, "not": true, "or": true, "pass": true, "raise": true, "return": true,
	"try": true, "while": true, "with": true, "yield": true,
}

// Python renders sdk-py/bap/_generated.py: a TypedDict (or Literal / Union alias) per schema, the
// event union, and the Operations mixin with one method per contract operation.
func Python(d *apimodel.Document, events []apimodel.EventMessage) ([]byte, error) {
	for _, n := range pyReserved {
		if d.Schemas[n] != nil {
			return nil, fmt.Errorf("schema %s clashes with a name of sdk-py", n)
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n# Source: spec/openapi.yaml and spec/asyncapi.yaml (%s %s), via server/internal/apigen/*.gen.json.\n", apimodel.Header, d.Title, d.Version)
	b.WriteString(`"""Generated part of the BAP SDK: wire types (TypedDicts, Literal enums) and operation methods.

Field names are the wire's snake_case names. Methods return the decoded JSON (plain dicts shaped
as the TypedDicts say); use bap.Client, which supplies the transport.
"""

import typing
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, Optional, TypedDict, TypeGuard, Union
from urllib.parse import quote as _quote

if typing.TYPE_CHECKING:
    from ._client import Blob

`)
	all := []string{"SPEC_VERSION", "Operations", "TaskEvent", "EVENT_TYPES", "EVENT_DATA_TYPES"}
	for n := range d.Schemas {
		all = append(all, n)
	}
	for _, a := range closedAnswers(d) {
		all = append(all, "is_"+pySnake(a.Schema))
	}
	sort.Strings(all)
	b.WriteString("__all__ = [\n")
	for _, n := range all {
		fmt.Fprintf(&b, "    %s,\n", pyStr(n))
	}
	b.WriteString("]\n\n")
	fmt.Fprintf(&b, "SPEC_VERSION = %s\n\"\"\"``info.version`` of the OpenAPI document these bindings were generated from.\"\"\"\n\n", pyStr(d.Version))

	names := make([]string, 0, len(d.Schemas))
	for n := range d.Schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := pySchema(&b, d, n); err != nil {
			return nil, fmt.Errorf("schema %s: %w", n, err)
		}
	}

	for _, a := range closedAnswers(d) {
		fmt.Fprintf(&b, "\n\ndef is_%s(answer: Mapping[str, object]) -> TypeGuard[%s]:\n", pySnake(a.Schema), pyStr(a.Schema))
		b.WriteString(pyDocstring(fmt.Sprintf("Whether ``answer`` is the %s answer, which an operation may return instead of its result: a dict whose keys are only among %s, with %s.", a.Schema, mapJoin(a.Only, func(n string) string { return "``" + n + "``" }, ", "), mapJoin(a.Required, func(n string) string { return "``" + n + "``" }, ", ")), "    "))
		fmt.Fprintf(&b, "    return len(answer) > 0 and all(k in %s for k in answer) and all(k in answer for k in %s)\n", "("+mapJoin(a.Only, pyStr, ", ")+",)", "("+mapJoin(a.Required, pyStr, ", ")+",)")
	}

	// Events.
	b.WriteString("\n\n# Events (AsyncAPI messages).\n\n")
	b.WriteString("TaskEvent = Union[\n")
	for _, e := range events {
		fmt.Fprintf(&b, "    %s,\n", pyStr(e.Payload))
	}
	b.WriteString("]\n\"\"\"An event of any type, discriminated by ``type``.\"\"\"\n\n")
	b.WriteString("EVENT_TYPES: tuple[str, ...] = (\n")
	for _, e := range events {
		fmt.Fprintf(&b, "    %s,\n", pyStr(e.Type))
	}
	b.WriteString(")\n\"\"\"Every event type the AsyncAPI document describes, sorted.\"\"\"\n\n")
	b.WriteString("EVENT_DATA_TYPES: dict[str, Any] = {\n")
	for _, e := range events {
		fmt.Fprintf(&b, "    %s: %s,\n", pyStr(e.Type), e.Data)
	}
	b.WriteString("}\n\"\"\"The TypedDict of each event type's ``data``.\"\"\"\n\n")

	// Operations.
	b.WriteString(`
class Operations:
    """One method per BAP operation; bap.Client provides _request."""

    def _request(
        self,
        op: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        has_body: bool = False,
        query: Optional[dict[str, Any]] = None,
        mutating: bool = False,
        idempotency_key: Optional[str] = None,
        binary: bool = False,
        timeout: Optional[float] = None,
    ) -> Any:
        raise NotImplementedError
`)
	for _, o := range d.ContractOperations() {
		if err := pyMethod(&b, d, o); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ID, err)
		}
	}
	return collapseBlankLines(b.Bytes()), nil
}

// collapseBlankLines keeps at most two blank lines in a row (PEP 8 between top-level blocks).
func collapseBlankLines(src []byte) []byte {
	for bytes.Contains(src, []byte("\n\n\n\n")) {
		src = bytes.ReplaceAll(src, []byte("\n\n\n\n"), []byte("\n\n\n"))
	}
	return src
}

// pyBracket renders name[a, b, …], one item per line when it does not fit on one.
func pyBracket(name string, items []string) string {
	one := name + "[" + strings.Join(items, ", ") + "]"
	if len(one) <= 80 {
		return one
	}
	return name + "[\n    " + strings.Join(items, ",\n    ") + ",\n]"
}

func pyMethod(b *bytes.Buffer, d *apimodel.Document, o *apimodel.Operation) error {
	args := []string{"self"}
	for _, p := range o.PathParams {
		args = append(args, p.Name+": str")
	}
	bodyOptional := false
	if o.Body != "" {
		bodyOptional = len(arr(d.Schemas[o.Body]["required"])) == 0
		if bodyOptional {
			args = append(args, fmt.Sprintf("body: Optional[%s] = None", pyStr(o.Body)))
		} else {
			args = append(args, "body: "+pyStr(o.Body))
		}
	}
	args = append(args, "*")
	for _, p := range o.QueryParams {
		t, err := pyType(d, p.Schema)
		if err != nil {
			return err
		}
		if pyKeywords[p.Name] {
			return fmt.Errorf("query parameter %s is a Python keyword", p.Name)
		}
		args = append(args, fmt.Sprintf("%s: Optional[%s] = None", p.Name, t))
	}
	if o.Mutating {
		args = append(args, "idempotency_key: Optional[str] = None")
	}
	args = append(args, "timeout: Optional[float] = None")
	ret := pyStr("Blob")
	if !o.Binary() {
		var alts []string
		alts = append(alts, pyStr(o.Primary().Schema))
		for _, a := range o.Alternatives() {
			alts = append(alts, pyStr(a.Schema))
		}
		ret = alts[0]
		if len(alts) > 1 {
			ret = "Union[" + strings.Join(alts, ", ") + "]"
		}
	}
	fmt.Fprintf(b, "\n    def %s(\n", o.ID)
	for _, a := range args {
		fmt.Fprintf(b, "        %s,\n", a)
	}
	fmt.Fprintf(b, "    ) -> %s:\n", ret)
	// Docstring.
	var doc strings.Builder
	doc.WriteString(sentence(o.Summary) + "\n\n")
	if o.Description != "" {
		doc.WriteString(o.Description + "\n\n")
	}
	fmt.Fprintf(&doc, "``%s %s``", o.Method, o.Path)
	if o.Mutating {
		doc.WriteString(" (mutating: sends ``idempotency_key``, or a new UUID that the client's own retries reuse)")
	} else {
		doc.WriteString(" (read-only)")
	}
	if o.Scope != "" {
		fmt.Fprintf(&doc, "; scope ``%s``", o.Scope)
	}
	doc.WriteString(".")
	if o.Binary() {
		doc.WriteString(" Returns a ``bap.Blob`` with the bytes, media type and SHA-256 digest.")
	}
	for _, a := range o.Alternatives() {
		fmt.Fprintf(&doc, " May also answer %d with %s: %s", a.Status, a.Schema, sentence(a.Description))
	}
	b.WriteString(pyDocstring(doc.String(), "        "))
	// Body.
	path := pyPath(o)
	call := []string{pyStr(o.ID), pyStr(o.Method), path}
	if o.Body != "" {
		call = append(call, "body=body", "has_body=True")
	}
	if len(o.QueryParams) > 0 {
		var kv []string
		for _, p := range o.QueryParams {
			kv = append(kv, fmt.Sprintf("%s: %s", pyStr(p.Name), p.Name))
		}
		call = append(call, "query={"+strings.Join(kv, ", ")+"}")
	}
	if o.Mutating {
		call = append(call, "mutating=True", "idempotency_key=idempotency_key")
	}
	if o.Binary() {
		call = append(call, "binary=True")
	}
	call = append(call, "timeout=timeout")
	b.WriteString("        return self._request(\n")
	for _, c := range call {
		fmt.Fprintf(b, "            %s,\n", c)
	}
	b.WriteString("        )\n")
	return nil
}

func pyPath(o *apimodel.Operation) string {
	var parts []string
	rest := o.Path
	for {
		loc := placeholderRE.FindStringSubmatchIndex(rest)
		if loc == nil {
			if rest != "" {
				parts = append(parts, pyStr(rest))
			}
			break
		}
		if loc[0] > 0 {
			parts = append(parts, pyStr(rest[:loc[0]]))
		}
		parts = append(parts, fmt.Sprintf("_quote(%s, safe=\"\")", rest[loc[2]:loc[3]]))
		rest = rest[loc[1]:]
	}
	return strings.Join(parts, " + ")
}

// pySchema writes the Python declaration of one named schema.
func pySchema(b *bytes.Buffer, d *apimodel.Document, name string) error {
	s := d.Schemas[name]
	desc := strings.TrimSpace(str(s["description"]))
	switch {
	case s["enum"] != nil:
		var vals []string
		for _, v := range arr(s["enum"]) {
			vals = append(vals, pyLiteral(v))
		}
		fmt.Fprintf(b, "\n\n%s = %s\n", name, pyBracket("Literal", vals))
		if desc != "" {
			b.WriteString(pyDocstring(desc, ""))
		}
		return nil
	case s["oneOf"] != nil || s["anyOf"] != nil:
		t, err := pyType(d, s)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "\n\n%s = %s\n", name, t)
		if desc != "" {
			b.WriteString(pyDocstring(desc, ""))
		}
		return nil
	}
	props, required, err := pyObject(d, s, map[string]bool{})
	if err != nil {
		return err
	}
	if len(props) == 0 {
		if s["type"] == "object" || s["type"] == nil {
			// An object without declared fields ({} bodies, free-form maps).
			fmt.Fprintf(b, "\n\n%s = dict[str, Any]\n", name)
			if desc != "" {
				b.WriteString(pyDocstring(desc, ""))
			}
			return nil
		}
		t, err := pyType(d, s)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "\n\n%s = %s\n", name, t)
		if desc != "" {
			b.WriteString(pyDocstring(desc, ""))
		}
		return nil
	}
	keys := make([]string, 0, len(props))
	functional := false
	for k := range props {
		keys = append(keys, k)
		if pyKeywords[k] || !isIdent(k) {
			functional = true
		}
	}
	sort.Strings(keys)
	field := func(k string) (string, error) {
		t, err := pyType(d, props[k])
		if err != nil {
			return "", fmt.Errorf("property %s: %w", k, err)
		}
		if !required[k] {
			t = "NotRequired[" + t + "]"
		}
		return t, nil
	}
	if functional {
		// The functional form (a field name is a Python keyword): the description is the
		// attribute docstring after the call, as for the Literal aliases.
		fmt.Fprintf(b, "\n\n%s = TypedDict(\n    %s,\n    {\n", name, pyStr(name))
		for _, k := range keys {
			t, err := field(k)
			if err != nil {
				return err
			}
			if pd := strings.TrimSpace(str(props[k]["description"])); pd != "" {
				b.WriteString(wrap(pd, "        # ", 100))
			}
			fmt.Fprintf(b, "        %s: %s,\n", pyStr(k), t)
		}
		b.WriteString("    },\n)\n")
		if desc != "" {
			b.WriteString(pyDocstring(desc, ""))
		}
		return nil
	}
	fmt.Fprintf(b, "\n\nclass %s(TypedDict):\n", name)
	if desc != "" {
		b.WriteString(pyDocstring(desc, "    "))
		b.WriteString("\n")
	}
	for _, k := range keys {
		t, err := field(k)
		if err != nil {
			return err
		}
		if pd := strings.TrimSpace(str(props[k]["description"])); pd != "" {
			b.WriteString(wrap(pd, "    #: ", 100))
		}
		fmt.Fprintf(b, "    %s: %s\n", k, t)
	}
	return nil
}

// pyObject collects the properties and required names of an object schema, merging allOf
// members that are references or objects with properties (the <Type>Event schemas); members
// that only constrain (if/then) add nothing.
func pyObject(d *apimodel.Document, s map[string]any, seen map[string]bool) (map[string]map[string]any, map[string]bool, error) {
	props := map[string]map[string]any{}
	required := map[string]bool{}
	if ref, ok := apimodel.Ref(s); ok {
		if seen[ref] {
			return nil, nil, fmt.Errorf("allOf cycle through %s", ref)
		}
		seen[ref] = true
		return pyObject(d, d.Schemas[ref], seen)
	}
	for _, part := range arr(s["allOf"]) {
		pm := obj(part)
		if _, isRef := apimodel.Ref(pm); !isRef && pm["properties"] == nil {
			continue
		}
		p, r, err := pyObject(d, pm, seen)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range p {
			if old, ok := props[k]; ok && v["$ref"] == nil && v["type"] == nil && v["const"] == nil && len(v) <= 1 {
				// {"properties": {"value": {}}} in an if/then or overlay: keep the full declaration.
				props[k] = old
				continue
			}
			props[k] = v
		}
		for k := range r {
			required[k] = true
		}
	}
	for k, v := range obj(s["properties"]) {
		props[k] = obj(v)
	}
	for _, r := range arr(s["required"]) {
		required[str(r)] = true
	}
	return props, required, nil
}

// pyType renders the Python annotation of a schema; named schemas are quoted forward references.
func pyType(d *apimodel.Document, s map[string]any) (string, error) {
	if ref, ok := apimodel.Ref(s); ok {
		if d.Schemas[ref] == nil {
			return "", fmt.Errorf("unknown schema %s", ref)
		}
		return pyStr(ref), nil
	}
	if c, ok := s["const"]; ok {
		return "Literal[" + pyLiteral(c) + "]", nil
	}
	if e := arr(s["enum"]); e != nil {
		var vals []string
		for _, v := range e {
			vals = append(vals, pyLiteral(v))
		}
		return pyBracket("Literal", vals), nil
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts := arr(s[k]); alts != nil {
			var ts []string
			for _, a := range alts {
				t, err := pyType(d, obj(a))
				if err != nil {
					return "", err
				}
				ts = append(ts, t)
			}
			return pyBracket("Union", ts), nil
		}
	}
	if allOf := arr(s["allOf"]); len(allOf) == 1 && s["properties"] == nil {
		return pyType(d, obj(allOf[0]))
	}
	switch t := s["type"].(type) {
	case string:
		return pyScalar(d, t, s)
	case []any:
		var ts []string
		nullable := false
		for _, x := range t {
			if str(x) == "null" {
				nullable = true
				continue
			}
			st, err := pyScalar(d, str(x), s)
			if err != nil {
				return "", err
			}
			ts = append(ts, st)
		}
		out := ts[0]
		if len(ts) > 1 {
			out = "Union[" + strings.Join(ts, ", ") + "]"
		}
		if nullable {
			out = "Optional[" + out + "]"
		}
		return out, nil
	case nil:
		return "Any", nil
	}
	return "", fmt.Errorf("unsupported type %v", s["type"])
}

func pyScalar(d *apimodel.Document, t string, s map[string]any) (string, error) {
	switch t {
	case "string":
		return "str", nil
	case "integer":
		return "int", nil
	case "number":
		return "float", nil
	case "boolean":
		return "bool", nil
	case "null":
		return "None", nil
	case "array":
		items := obj(s["items"])
		if items == nil {
			return "list[Any]", nil
		}
		it, err := pyType(d, items)
		if err != nil {
			return "", err
		}
		return "list[" + it + "]", nil
	case "object":
		return "dict[str, Any]", nil
	}
	return "", fmt.Errorf("unsupported type %s", t)
}

func pyLiteral(v any) string {
	switch x := v.(type) {
	case string:
		return pyStr(x)
	case bool:
		if x {
			return "True"
		}
		return "False"
	case nil:
		return "None"
	case float64:
		return fmt.Sprint(x)
	}
	return fmt.Sprintf("%v", v)
}

// pyStr renders a Python string literal.
func pyStr(s string) string { return escapedQuote(s) }

// escapedQuote renders s in double quotes with the backslash escapes Python and Rust share
// (\\, \", \n, \t).
func escapedQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// pyDocstring renders a wrapped docstring at the given indentation.
func pyDocstring(text, indent string) string {
	text = strings.ReplaceAll(strings.TrimSpace(text), `\`, `\\`)
	text = strings.ReplaceAll(text, `"""`, `\"\"\"`)
	body := wrap(text, indent, 100)
	lines := strings.Split(strings.TrimRight(body, "\n"), "\n")
	if len(lines) == 1 && len(lines[0])+6 <= 100 {
		return indent + `"""` + strings.TrimPrefix(lines[0], indent) + `"""` + "\n"
	}
	return indent + `"""` + strings.TrimPrefix(body, indent) + indent + `"""` + "\n"
}

func isIdent(s string) bool {
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return s != ""
}

func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func arr(v any) []any {
	a, _ := v.([]any)
	return a
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// pySnake turns a PascalCase schema name into snake_case: InterruptedCommandResponse →
// interrupted_command_response.
func pySnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
