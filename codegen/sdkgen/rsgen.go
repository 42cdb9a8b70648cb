package sdkgen

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/originweave/bap/codegen/apimodel"
)

// rsHandWritten are the names sdk-rs declares by hand. Problem is one of them (the error type
// mirrors spec/schemas/Problem.json with the raw body and headers), so it is not generated.
var rsHandWritten = []string{"Client", "ClientBuilder", "CallOptions", "Blob", "Error", "Problem", "Subscription",
	"TokenSource", "StaticToken", "ClientCredentials", "EventData", "EVENT_TYPES", "SPEC_VERSION", "Result"}

// rsSkipped are schemas with a hand-written Rust counterpart.
var rsSkipped = map[string]bool{"Problem": true}

var rsKeywords = map[string]bool{
	"as": true, "break": true, "const": true, "continue": true, "crate": true, "else": true, "enum": true,
	"extern": true, "false": true, "fn": true, "for": true, "if": true, "impl": true, "in": true, "let": true,
	"loop": true, "match": true, "mod": true, "move": true, "mut": true, "pub": true, "ref": true,
	"return": true, "self": true, "Self": true, "static": true, "struct": true, "super": true, "trait": true,
	"true": true, "type": true, "unsafe": true, "use": true, "where": true, "while": true, "async": true,
	"await": true, "dyn": true, "abstract": true, "become": true, "box": true, "do": true, "final": true,
	"macro": true, "override": true, "priv": true, "typeof": true, "unsized": true, "virtual": true,
	"yield": true, "try": true,
}

// rsCatchAll is the variant of every generated enum that carries a value this SDK does not know.
const rsCatchAll = "Unknown"

// RustTypes renders sdk-rs/src/types.gen.rs: a serde type per schema (structs with snake_case
// wire names that tolerate unknown fields, string enums that keep unknown values, untagged enums
// for oneOf), the answer enums of operations with several 2xx answers, and the event catalog.
func RustTypes(d *apimodel.Document, events []apimodel.EventMessage) ([]byte, error) {
	for _, n := range rsHandWritten {
		if d.Schemas[n] != nil && !rsSkipped[n] {
			return nil, fmt.Errorf("schema %s clashes with a hand-written sdk-rs name", n)
		}
	}
	g := &rsGen{d: d, defaultable: map[string]int{}}
	var b bytes.Buffer
	fmt.Fprintf(&b, "// %s\n// Source: spec/openapi.yaml and spec/asyncapi.yaml (%s %s), via server/internal/apigen/*.gen.json.\n\n", apimodel.Header, d.Title, d.Version)
	b.WriteString("//! Wire types generated from spec/: one type per schema, with the wire's snake_case field\n")
	b.WriteString("//! names. Structs ignore fields they do not know; enums keep values they do not know in\n")
	fmt.Fprintf(&b, "//! their `%s` variant, so a newer server never breaks decoding.\n\n", rsCatchAll)
	b.WriteString("#![allow(clippy::large_enum_variant, clippy::derive_partial_eq_without_eq)]\n\n")
	b.WriteString("use serde::{Deserialize, Deserializer, Serialize, Serializer};\nuse std::fmt;\n\n")
	fmt.Fprintf(&b, "/// `info.version` of the OpenAPI document these bindings were generated from.\npub const SPEC_VERSION: &str = %s;\n", rsStr(d.Version))

	names := make([]string, 0, len(d.Schemas))
	for n := range d.Schemas {
		if !rsSkipped[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if err := g.schema(&b, n); err != nil {
			return nil, fmt.Errorf("schema %s: %w", n, err)
		}
	}

	// Answers of operations with more than one 2xx answer.
	for _, o := range d.ContractOperations() {
		if o.Binary() || len(o.Alternatives()) == 0 {
			continue
		}
		if err := g.answer(&b, o); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ID, err)
		}
	}

	// Events.
	if err := g.events(&b, events); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// RustClient renders sdk-rs/src/client.gen.rs: one Client method per contract operation (and a
// `<method>_with` twin taking CallOptions).
func RustClient(d *apimodel.Document) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// %s\n// Source: spec/openapi.yaml (%s %s), via server/internal/apigen/openapi.gen.json.\n\n", apimodel.Header, d.Title, d.Version)
	b.WriteString("//! One method per BAP operation, generated from spec/openapi.yaml.\n\n")
	b.WriteString("use crate::client::{Call, CallOptions, Client};\nuse crate::transport::path_escape;\n#[allow(unused_imports)]\nuse crate::types::*;\nuse crate::{Blob, Error};\n\n")
	b.WriteString("impl Client {\n")
	for i, o := range d.ContractOperations() {
		if i > 0 {
			b.WriteString("\n")
		}
		if err := rsMethod(&b, d, o); err != nil {
			return nil, fmt.Errorf("%s: %w", o.ID, err)
		}
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

type rsGen struct {
	d *apimodel.Document
	// defaultable memoizes whether a named type can derive Default: 1 yes, 2 no, 3 in progress.
	defaultable map[string]int
}

// answerName is the enum of an operation's 2xx answers (CreateTaskAnswer).
func answerName(o *apimodel.Operation) string { return o.PascalID() + "Answer" }

// answerVariant names a variant after its schema: CreateTaskResponse → CreateTask.
func answerVariant(schema string) string {
	if v := strings.TrimSuffix(schema, "Response"); v != "" {
		return v
	}
	return schema
}

func (g *rsGen) answer(b *bytes.Buffer, o *apimodel.Operation) error {
	name := answerName(o)
	all := append([]apimodel.Response{o.Primary()}, o.Alternatives()...)
	fmt.Fprintf(b, "\n/// The answers of `%s`, by HTTP status (and by shape where two share one): the primary one first.\n", o.ID)
	b.WriteString("#[derive(Debug, Clone, PartialEq, Serialize)]\n#[serde(untagged)]\n")
	fmt.Fprintf(b, "pub enum %s {\n", name)
	seen := map[string]bool{}
	for _, r := range all {
		v := answerVariant(r.Schema)
		if seen[v] {
			return fmt.Errorf("two answers named %s", v)
		}
		seen[v] = true
		desc := r.Description
		if desc == "" {
			desc = r.Schema
		}
		b.WriteString(rsDoc(fmt.Sprintf("%d: %s", r.Status, sentence(desc)), "    "))
		fmt.Fprintf(b, "    %s(%s),\n", v, r.Schema)
	}
	b.WriteString("}\n\n")
	fmt.Fprintf(b, "impl %s {\n", name)
	b.WriteString("    /// The HTTP status this answer comes with.\n    pub fn status(&self) -> u16 {\n        match self {\n")
	for _, r := range all {
		fmt.Fprintf(b, "            %s::%s(_) => %d,\n", name, answerVariant(r.Schema), r.Status)
	}
	b.WriteString("        }\n    }\n\n")
	p := o.Primary()
	fmt.Fprintf(b, "    /// The primary answer (%d %s), or `None` for another one.\n", p.Status, p.Schema)
	fmt.Fprintf(b, "    pub fn primary(self) -> Option<%s> {\n        match self {\n            %s::%s(v) => Some(v),\n", p.Schema, name, answerVariant(p.Schema))
	b.WriteString("            #[allow(unreachable_patterns)]\n            _ => None,\n        }\n    }\n\n")
	fmt.Fprintf(b, "    pub(crate) fn decode(status: u16, body: &[u8]) -> Result<Self, serde_json::Error> {\n        match status {\n")
	// An answer sharing its status with another (a oneOf) is told apart by its keys, first.
	alts := o.Alternatives()
	sort.SliceStable(alts, func(i, j int) bool { return o.Shaped(alts[i]) && !o.Shaped(alts[j]) })
	for _, r := range alts {
		guard := ""
		if o.Shaped(r) {
			keys := make([]string, len(r.Only))
			for i, k := range r.Only {
				keys[i] = rsStr(k)
			}
			guard = fmt.Sprintf(" if crate::transport::only_keys(body, &[%s])", strings.Join(keys, ", "))
		}
		fmt.Fprintf(b, "            %d%s => serde_json::from_slice(body).map(%s::%s),\n", r.Status, guard, name, answerVariant(r.Schema))
	}
	fmt.Fprintf(b, "            _ => serde_json::from_slice(body).map(%s::%s),\n", name, answerVariant(p.Schema))
	b.WriteString("        }\n    }\n}\n")
	return nil
}

func (g *rsGen) events(b *bytes.Buffer, events []apimodel.EventMessage) error {
	if g.d.Schemas["Event"] == nil || g.d.Schemas["EventType"] == nil {
		return fmt.Errorf("schemas Event and EventType are required")
	}
	enum := map[string]bool{}
	for _, v := range arr(g.d.Schemas["EventType"]["enum"]) {
		enum[str(v)] = true
	}
	if len(enum) != len(events) {
		return fmt.Errorf("EventType has %d values but AsyncAPI describes %d messages", len(enum), len(events))
	}
	b.WriteString("\n// Events (AsyncAPI messages).\n\n")
	b.WriteString("/// Every event type the AsyncAPI document describes, sorted.\npub const EVENT_TYPES: &[&str] = &[\n")
	for _, e := range events {
		if !enum[e.Type] {
			return fmt.Errorf("event type %s is not in the EventType enum", e.Type)
		}
		fmt.Fprintf(b, "    %s,\n", rsStr(e.Type))
	}
	b.WriteString("];\n\n")
	b.WriteString("/// The `data` of an [`Event`], decoded by its type (see [`Event::decode_data`]).\n")
	b.WriteString("#[derive(Debug, Clone, PartialEq, Serialize)]\n#[serde(untagged)]\npub enum EventData {\n")
	for _, e := range events {
		b.WriteString(rsDoc(fmt.Sprintf("`%s`: %s", e.Type, sentence(e.Summary)), "    "))
		fmt.Fprintf(b, "    %s(%s),\n", rsVariant(e.Type), e.Data)
	}
	b.WriteString("    /// An event type this SDK does not know, with its `data` as sent.\n")
	fmt.Fprintf(b, "    %s(serde_json::Map<String, serde_json::Value>),\n}\n\n", rsCatchAll)
	b.WriteString(`impl Event {
    /// Decodes ` + "`data`" + ` into the struct of the event's type (e.g. ` + "`EventData::TaskStateChanged`" + `);
    /// an unknown type gives ` + "`EventData::" + rsCatchAll + "`" + ` with the payload as sent.
    pub fn decode_data(&self) -> Result<EventData, serde_json::Error> {
        let data = serde_json::Value::Object(self.data.clone());
        match self.r#type.as_str() {
`)
	for _, e := range events {
		fmt.Fprintf(b, "            %s => serde_json::from_value(data).map(EventData::%s),\n", rsStr(e.Type), rsVariant(e.Type))
	}
	fmt.Fprintf(b, "            _ => Ok(EventData::%s(self.data.clone())),\n        }\n    }\n}\n", rsCatchAll)
	return nil
}

// schema writes the Rust declaration of one named schema.
func (g *rsGen) schema(b *bytes.Buffer, name string) error {
	s := g.d.Schemas[name]
	desc := strings.TrimSpace(str(s["description"]))
	b.WriteString("\n")
	switch {
	case s["enum"] != nil:
		return g.enum(b, name, desc, s)
	case s["oneOf"] != nil || s["anyOf"] != nil:
		return g.union(b, name, desc, s)
	}
	props, required, err := pyObject(g.d, s, map[string]bool{})
	if err != nil {
		return err
	}
	if len(props) == 0 {
		t := "serde_json::Map<String, serde_json::Value>"
		if s["type"] != "object" && s["type"] != nil {
			if t, err = g.typ(s, name); err != nil {
				return err
			}
		}
		if desc != "" {
			b.WriteString(rsDoc(desc, ""))
		}
		fmt.Fprintf(b, "pub type %s = %s;\n", name, t)
		return nil
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	type field struct{ key, ident, typ, doc string }
	var fields []field
	for _, k := range keys {
		t, err := g.typ(props[k], name)
		if err != nil {
			return fmt.Errorf("property %s: %w", k, err)
		}
		f := field{key: k, ident: rsIdent(k), typ: t, doc: strings.TrimSpace(str(props[k]["description"]))}
		if !required[k] && !strings.HasPrefix(t, "Option<") {
			f.typ = "Option<" + t + ">"
		}
		fields = append(fields, f)
	}
	if desc != "" {
		b.WriteString(rsDoc(desc, ""))
	}
	derive := "Debug, Clone, PartialEq, Serialize, Deserialize"
	if g.isDefault(name) {
		derive += ", Default"
	}
	fmt.Fprintf(b, "#[derive(%s)]\npub struct %s {\n", derive, name)
	for _, f := range fields {
		if f.doc != "" {
			b.WriteString(rsDoc(f.doc, "    "))
		}
		var attrs []string
		if strings.TrimPrefix(f.ident, "r#") != f.key {
			attrs = append(attrs, "rename = "+rsStr(f.key))
		}
		if strings.HasPrefix(f.typ, "Option<") {
			attrs = append(attrs, "default")
			if !required[f.key] {
				attrs = append(attrs, `skip_serializing_if = "Option::is_none"`)
			}
		}
		if len(attrs) > 0 {
			fmt.Fprintf(b, "    #[serde(%s)]\n", strings.Join(attrs, ", "))
		}
		fmt.Fprintf(b, "    pub %s: %s,\n", f.ident, f.typ)
	}
	b.WriteString("}\n")
	if g.isDefault(name) {
		return nil
	}
	// Without Default: a constructor taking the required fields.
	var params, inits []string
	for _, f := range fields {
		if required[f.key] {
			params = append(params, f.ident+": "+f.typ)
			inits = append(inits, f.ident)
		} else {
			inits = append(inits, f.ident+": None")
		}
	}
	fmt.Fprintf(b, "\nimpl %s {\n    /// A value with the required fields; the optional ones are `None`.\n", name)
	if len(params) > 7 {
		b.WriteString("    #[allow(clippy::too_many_arguments)]\n")
	}
	fmt.Fprintf(b, "    pub fn new(%s) -> Self {\n        %s {\n", strings.Join(params, ", "), name)
	for _, in := range inits {
		fmt.Fprintf(b, "            %s,\n", in)
	}
	b.WriteString("        }\n    }\n}\n")
	return nil
}

// enum writes a string enum: one unit variant per value and the catch-all variant.
func (g *rsGen) enum(b *bytes.Buffer, name, desc string, s map[string]any) error {
	type variant struct{ ident, value string }
	var vs []variant
	seen := map[string]bool{rsCatchAll: true}
	for _, v := range arr(s["enum"]) {
		val, ok := v.(string)
		if !ok {
			return fmt.Errorf("enum value %v is not a string", v)
		}
		id := rsVariant(val)
		if seen[id] {
			return fmt.Errorf("enum value %q gives variant %s twice (or clashes with %s)", val, id, rsCatchAll)
		}
		seen[id] = true
		vs = append(vs, variant{id, val})
	}
	if desc != "" {
		b.WriteString(rsDoc(desc, ""))
		b.WriteString("///\n")
	}
	fmt.Fprintf(b, "/// Serialized as its string; a value this SDK does not know is kept in `%s::%s`.\n", name, rsCatchAll)
	fmt.Fprintf(b, "#[derive(Debug, Clone, PartialEq, Eq, Hash)]\npub enum %s {\n", name)
	for _, v := range vs {
		fmt.Fprintf(b, "    /// `%s`\n    %s,\n", v.value, v.ident)
	}
	fmt.Fprintf(b, "    /// A value this SDK does not know (sent unchanged; the server validates).\n    %s(String),\n}\n\n", rsCatchAll)
	fmt.Fprintf(b, "impl %s {\n", name)
	b.WriteString("    /// Every known value, in the order of the schema.\n")
	fmt.Fprintf(b, "    pub const ALL: &'static [%s] = &[", name)
	for i, v := range vs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "%s::%s", name, v.ident)
	}
	b.WriteString("];\n\n")
	b.WriteString("    /// The wire value.\n    pub fn as_str(&self) -> &str {\n        match self {\n")
	for _, v := range vs {
		fmt.Fprintf(b, "            %s::%s => %s,\n", name, v.ident, rsStr(v.value))
	}
	fmt.Fprintf(b, "            %s::%s(s) => s,\n        }\n    }\n}\n\n", name, rsCatchAll)
	fmt.Fprintf(b, "impl From<&str> for %s {\n    fn from(s: &str) -> Self {\n        match s {\n", name)
	for _, v := range vs {
		fmt.Fprintf(b, "            %s => %s::%s,\n", rsStr(v.value), name, v.ident)
	}
	fmt.Fprintf(b, "            other => %s::%s(other.to_string()),\n        }\n    }\n}\n\n", name, rsCatchAll)
	fmt.Fprintf(b, `impl From<String> for %[1]s {
    fn from(s: String) -> Self {
        %[1]s::from(s.as_str())
    }
}

impl fmt::Display for %[1]s {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for %[1]s {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for %[1]s {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(%[1]s::from)
    }
}
`, name)
	return nil
}

// union writes a oneOf/anyOf of named schemas as an untagged enum (the first variant that
// decodes wins) with a catch-all variant holding any other JSON.
func (g *rsGen) union(b *bytes.Buffer, name, desc string, s map[string]any) error {
	alts := arr(s["oneOf"])
	if alts == nil {
		alts = arr(s["anyOf"])
	}
	var refs []string
	for _, a := range alts {
		ref, ok := apimodel.Ref(obj(a))
		if !ok {
			// Inline members: no useful Rust shape; keep the JSON.
			if desc != "" {
				b.WriteString(rsDoc(desc, ""))
			}
			fmt.Fprintf(b, "pub type %s = serde_json::Value;\n", name)
			return nil
		}
		refs = append(refs, ref)
	}
	if desc != "" {
		b.WriteString(rsDoc(desc, ""))
		b.WriteString("///\n")
	}
	b.WriteString("/// Untagged: decoding picks the first member the JSON fits.\n")
	fmt.Fprintf(b, "#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]\n#[serde(untagged)]\npub enum %s {\n", name)
	seen := map[string]bool{rsCatchAll: true}
	for _, r := range refs {
		v := strings.TrimSuffix(r, name)
		if v == "" {
			v = r
		}
		if seen[v] {
			return fmt.Errorf("member %s gives variant %s twice", r, v)
		}
		seen[v] = true
		fmt.Fprintf(b, "    /// A [`%s`].\n    %s(%s),\n", r, v, g.boxed(r, name))
	}
	fmt.Fprintf(b, "    /// JSON that fits no member this SDK knows.\n    %s(serde_json::Value),\n}\n", rsCatchAll)
	return nil
}

// typ renders the Rust type of a schema used inside the named schema owner.
func (g *rsGen) typ(s map[string]any, owner string) (string, error) {
	if ref, ok := apimodel.Ref(s); ok {
		if g.d.Schemas[ref] == nil {
			return "", fmt.Errorf("unknown schema %s", ref)
		}
		return g.boxed(ref, owner), nil
	}
	if c, ok := s["const"]; ok {
		if _, isStr := c.(string); isStr {
			return "String", nil
		}
		return "serde_json::Value", nil
	}
	if s["enum"] != nil {
		if t, ok := s["type"].(string); ok && t == "string" {
			return "String", nil
		}
		return "serde_json::Value", nil
	}
	if s["oneOf"] != nil || s["anyOf"] != nil {
		return "serde_json::Value", nil
	}
	if allOf := arr(s["allOf"]); len(allOf) == 1 && s["properties"] == nil {
		return g.typ(obj(allOf[0]), owner)
	}
	switch t := s["type"].(type) {
	case string:
		return g.scalar(t, s, owner)
	case []any:
		var ts []string
		nullable := false
		for _, x := range t {
			if str(x) == "null" {
				nullable = true
				continue
			}
			st, err := g.scalar(str(x), s, owner)
			if err != nil {
				return "", err
			}
			ts = append(ts, st)
		}
		out := "serde_json::Value"
		if len(ts) == 1 {
			out = ts[0]
		}
		if nullable && out != "serde_json::Value" {
			out = "Option<" + out + ">"
		}
		return out, nil
	case nil:
		return "serde_json::Value", nil
	}
	return "", fmt.Errorf("unsupported type %v", s["type"])
}

func (g *rsGen) scalar(t string, s map[string]any, owner string) (string, error) {
	switch t {
	case "string":
		return "String", nil
	case "integer":
		return "i64", nil
	case "number":
		return "f64", nil
	case "boolean":
		return "bool", nil
	case "null":
		return "()", nil
	case "array":
		items := obj(s["items"])
		if items == nil {
			return "Vec<serde_json::Value>", nil
		}
		// A Vec already breaks a recursion (Node.children).
		it, err := g.typ(items, "")
		if err != nil {
			return "", err
		}
		return "Vec<" + it + ">", nil
	case "object":
		return "serde_json::Map<String, serde_json::Value>", nil
	}
	return "", fmt.Errorf("unsupported type %s", t)
}

// boxed is ref, in a Box when the owner reaches itself through it without a Vec in between.
func (g *rsGen) boxed(ref, owner string) string {
	if owner != "" && g.reaches(ref, owner, map[string]bool{}) {
		return "Box<" + ref + ">"
	}
	return ref
}

// reaches reports whether schema from contains target directly (through fields and union
// members, not through arrays).
func (g *rsGen) reaches(from, target string, seen map[string]bool) bool {
	if from == target {
		return true
	}
	if seen[from] {
		return false
	}
	seen[from] = true
	s := g.d.Schemas[from]
	var direct []string
	for _, k := range []string{"oneOf", "anyOf"} {
		for _, a := range arr(s[k]) {
			if r, ok := apimodel.Ref(obj(a)); ok {
				direct = append(direct, r)
			}
		}
	}
	props, _, err := pyObject(g.d, s, map[string]bool{})
	if err == nil {
		for _, p := range props {
			if r, ok := apimodel.Ref(p); ok {
				direct = append(direct, r)
			}
			for _, a := range arr(p["allOf"]) {
				if r, ok := apimodel.Ref(obj(a)); ok {
					direct = append(direct, r)
				}
			}
		}
	}
	for _, r := range direct {
		if g.reaches(r, target, seen) {
			return true
		}
	}
	return false
}

// isDefault reports whether the named type can derive Default: a struct whose required fields
// all have defaults (strings, numbers, lists, maps, Options, such structs). Enums have none.
func (g *rsGen) isDefault(name string) bool {
	switch g.defaultable[name] {
	case 1:
		return true
	case 2:
		return false
	case 3:
		return true // a cycle: decided by the other fields
	}
	g.defaultable[name] = 3
	ok := g.computeDefault(name)
	if ok {
		g.defaultable[name] = 1
	} else {
		g.defaultable[name] = 2
	}
	return ok
}

func (g *rsGen) computeDefault(name string) bool {
	s := g.d.Schemas[name]
	if s["enum"] != nil || s["oneOf"] != nil || s["anyOf"] != nil {
		return false
	}
	props, required, err := pyObject(g.d, s, map[string]bool{})
	if err != nil {
		return false
	}
	for k, p := range props {
		if !required[k] {
			continue
		}
		if ref, ok := apimodel.Ref(p); ok {
			if !g.isDefault(ref) {
				return false
			}
			continue
		}
		if allOf := arr(p["allOf"]); len(allOf) == 1 {
			if ref, ok := apimodel.Ref(obj(allOf[0])); ok && !g.isDefault(ref) {
				return false
			}
		}
	}
	return true
}

func rsMethod(b *bytes.Buffer, d *apimodel.Document, o *apimodel.Operation) error {
	var params, args []string
	for _, p := range o.PathParams {
		params = append(params, rsIdent(p.Name)+": &str")
		args = append(args, rsIdent(p.Name))
	}
	if o.Body != "" {
		params = append(params, "body: &"+o.Body)
		args = append(args, "body")
	}
	type query struct{ name, ident, typ string }
	var queries []query
	for _, p := range o.QueryParams {
		var t string
		switch p.Schema["type"] {
		case "integer":
			t = "i64"
		case "string":
			t = "&str"
		case "boolean":
			t = "bool"
		default:
			return fmt.Errorf("query parameter %s: unsupported type %v", p.Name, p.Schema["type"])
		}
		q := query{p.Name, rsIdent(p.Name), t}
		queries = append(queries, q)
		params = append(params, fmt.Sprintf("%s: Option<%s>", q.ident, t))
		args = append(args, q.ident)
	}
	result := o.Primary().Schema
	switch {
	case o.Binary():
		result = "Blob"
	case len(o.Alternatives()) > 0:
		result = answerName(o)
	}

	// Doc comment of the plain method.
	var doc strings.Builder
	fmt.Fprintf(&doc, "%s\n\n", sentence(o.Summary))
	if o.Description != "" {
		doc.WriteString(o.Description + "\n\n")
	}
	fmt.Fprintf(&doc, "`%s %s`", o.Method, o.Path)
	if o.Mutating {
		doc.WriteString(" (mutating: it sends an `Idempotency-Key`, the one of `CallOptions` or a new UUID v7, that the client's own retries reuse)")
	} else {
		doc.WriteString(" (read-only)")
	}
	if o.Scope != "" {
		fmt.Fprintf(&doc, "; scope `%s`", o.Scope)
	}
	doc.WriteString(".")
	for _, q := range o.QueryParams {
		fmt.Fprintf(&doc, " `%s`: %s `None` sends nothing (the server's default applies).", q.Name, sentence(q.Description))
	}
	if o.Binary() {
		doc.WriteString(" Returns the bytes with their media type and SHA-256 digest (checked against `Repr-Digest`).")
	}
	for _, a := range o.Alternatives() {
		fmt.Fprintf(&doc, " May also answer %d with %s: %s", a.Status, a.Schema, sentence(a.Description))
	}
	b.WriteString(rsDoc(doc.String(), "    "))
	fmt.Fprintf(b, "    pub fn %s(&self%s) -> Result<%s, Error> {\n", o.ID, rsJoinParams(params), result)
	fmt.Fprintf(b, "        self.%s_with(%s)\n    }\n\n", o.ID, strings.Join(append(args, "&CallOptions::default()"), ", "))

	// The _with twin.
	fmt.Fprintf(b, "    /// [`Client::%s`] with per-call options (idempotency key, timeout, headers).\n", o.ID)
	fmt.Fprintf(b, "    pub fn %s_with(&self%s) -> Result<%s, Error> {\n", o.ID, rsJoinParams(append(params, "opts: &CallOptions")), result)
	mut := ""
	if len(queries) > 0 || o.Body != "" || o.Mutating {
		mut = "mut "
	}
	fmt.Fprintf(b, "        let %scall = Call::new(%s, %s, %s);\n", mut, rsStr(o.ID), rsStr(o.Method), rsPath(o))
	for _, q := range queries {
		conv := q.ident + ".to_string()"
		if q.typ == "&str" {
			conv = q.ident + ".to_owned()"
		}
		fmt.Fprintf(b, "        if let Some(%s) = %s {\n            call.query.push((%s, %s));\n        }\n", q.ident, q.ident, rsStr(q.name), conv)
	}
	if o.Body != "" {
		b.WriteString("        call.body = Some(self.encode(call.op, body)?);\n")
	}
	if o.Mutating {
		b.WriteString("        call.mutating = true;\n")
	}
	switch {
	case o.Binary():
		b.WriteString("        self.call_blob(&call, opts)\n")
	case len(o.Alternatives()) > 0:
		b.WriteString("        let (status, answer) = self.call(&call, opts)?;\n")
		fmt.Fprintf(b, "        %s::decode(status, &answer).map_err(|e| Error::decode(call.op, status, e))\n", result)
	default:
		b.WriteString("        let (status, answer) = self.call(&call, opts)?;\n")
		b.WriteString("        serde_json::from_slice(&answer).map_err(|e| Error::decode(call.op, status, e))\n")
	}
	b.WriteString("    }\n")
	return nil
}

func rsJoinParams(ps []string) string {
	if len(ps) == 0 {
		return ""
	}
	return ", " + strings.Join(ps, ", ")
}

// rsPath renders the route as a Rust String expression with escaped path parameters.
func rsPath(o *apimodel.Operation) string {
	if len(o.PathParams) == 0 {
		return rsStr(o.Path) + ".to_owned()"
	}
	var tmpl strings.Builder
	var args []string
	rest := o.Path
	for {
		loc := placeholderRE.FindStringSubmatchIndex(rest)
		if loc == nil {
			tmpl.WriteString(rest)
			break
		}
		tmpl.WriteString(rest[:loc[0]] + "{}")
		args = append(args, "path_escape("+rsIdent(rest[loc[2]:loc[3]])+")")
		rest = rest[loc[1]:]
	}
	return "format!(" + rsStr(tmpl.String()) + ", " + strings.Join(args, ", ") + ")"
}

// rsIdent is a snake_case wire name as a Rust identifier (raw for keywords).
func rsIdent(s string) string {
	switch s {
	case "self", "Self", "super", "crate":
		return s + "_"
	}
	if rsKeywords[s] {
		return "r#" + s
	}
	return s
}

var rsWordRE = regexp.MustCompile(`[A-Za-z0-9]+`)

// rsVariant turns a wire value into a PascalCase variant: task.state_changed → TaskStateChanged.
func rsVariant(v string) string {
	var b strings.Builder
	for _, w := range rsWordRE.FindAllString(v, -1) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	out := b.String()
	if out == "" || out[0] >= '0' && out[0] <= '9' {
		out = "V" + out
	}
	return out
}

// rsStr renders a Rust string literal.
func rsStr(s string) string { return escapedQuote(s) }

var rsURLRE = regexp.MustCompile(`https?://[^\s)<>]*[^\s)<>.,;:]`)

// rsDoc renders a wrapped `///` comment. Outside code spans, Markdown that rustdoc would take for
// links or HTML is escaped and bare URLs are put in angle brackets, so `cargo doc` stays quiet.
func rsDoc(text, indent string) string {
	parts := strings.Split(strings.TrimSpace(text), "`")
	for i := 0; i < len(parts); i += 2 {
		if i == len(parts)-1 && len(parts)%2 == 0 {
			break // an unbalanced backtick: leave the rest as it is
		}
		p := parts[i]
		var out strings.Builder
		last := 0
		for _, loc := range rsURLRE.FindAllStringIndex(p, -1) {
			out.WriteString(rsEscapeMD(p[last:loc[0]]))
			out.WriteString("<" + p[loc[0]:loc[1]] + ">")
			last = loc[1]
		}
		out.WriteString(rsEscapeMD(p[last:]))
		parts[i] = out.String()
	}
	return wrap(strings.Join(parts, "`"), indent+"/// ", 100)
}

func rsEscapeMD(s string) string {
	return strings.NewReplacer(`[`, `\[`, `]`, `\]`, `<`, `&lt;`, `>`, `&gt;`).Replace(s)
}
