package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// contractOp is one row of the "Operations" table of the BAP 1.0 contract.
type contractOp struct {
	id, method, route string
	mutating          bool
	scope             string
	success           []string // 2xx status codes the operation declares
}

var contractOps = []contractOp{
	{"create_task", "post", "/bap/v1/tasks", true, "tasks.write", []string{"200", "201"}},
	{"get_task", "get", "/bap/v1/tasks/{task_id}", false, "tasks.read", []string{"200"}},
	{"list_task_events", "get", "/bap/v1/tasks/{task_id}/events", false, "tasks.read", []string{"200"}},
	{"cancel_task", "post", "/bap/v1/tasks/{task_id}/cancel", true, "tasks.write", []string{"200"}},
	{"resume_task", "post", "/bap/v1/tasks/{task_id}/resume", true, "tasks.write", []string{"200"}},
	{"close_task", "post", "/bap/v1/tasks/{task_id}/close", true, "tasks.write", []string{"200"}},
	{"create_browser_session", "post", "/bap/v1/tasks/{task_id}/browser-sessions", true, "browser.act", []string{"200", "201"}},
	{"checkpoint_browser_session", "post", "/bap/v1/browser-sessions/{session_id}/checkpoint", true, "browser.act", []string{"200"}},
	{"close_browser_session", "post", "/bap/v1/browser-sessions/{session_id}/close", true, "browser.act", []string{"200"}},
	{"navigate", "post", "/bap/v1/browser-sessions/{session_id}/navigate", true, "browser.act", []string{"200"}},
	{"observe", "post", "/bap/v1/browser-sessions/{session_id}/observe", false, "browser.observe", []string{"200"}},
	{"query_nodes", "post", "/bap/v1/browser-sessions/{session_id}/query-nodes", false, "browser.observe", []string{"200"}},
	{"act", "post", "/bap/v1/browser-sessions/{session_id}/act", true, "browser.act", []string{"200", "202"}},
	{"extract", "post", "/bap/v1/browser-sessions/{session_id}/extract", false, "browser.observe", []string{"200"}},
	{"capture_evidence", "post", "/bap/v1/browser-sessions/{session_id}/evidence", true, "browser.observe", []string{"200"}},
	{"request_approval", "post", "/bap/v1/tasks/{task_id}/approvals", true, "approvals.request", []string{"200", "201"}},
	{"resolve_approval", "post", "/bap/v1/approvals/{approval_id}/resolve", true, "approvals.resolve", []string{"200"}},
	{"get_artifact", "get", "/bap/v1/artifacts/{artifact_id}", false, "artifacts.read", []string{"200"}},
	{"verify_artifact", "post", "/bap/v1/artifacts/{artifact_id}/verify", false, "artifacts.read", []string{"200"}},
	// Added with secrets by reference (issue #17): an agent lists the secrets usable on its task.
	{"list_task_secrets", "get", "/bap/v1/tasks/{task_id}/secrets", false, "secrets.read", []string{"200"}},
	// Proof (issue #20): the history chain's check and the evidence bundle.
	{"get_task_audit", "get", "/bap/v1/tasks/{task_id}/audit", false, "tasks.read", []string{"200"}},
	{"get_task_bundle", "get", "/bap/v1/tasks/{task_id}/bundle", false, "tasks.read", []string{"200"}},
}

// extraOps are documented routes that are not contract operations (no MCP tool).
var extraOps = map[string]struct {
	method, route string
	scope         string // "" = anonymous
	stream        bool
	mutating      bool
}{
	"get_service_info":   {"get", "/bap/v1", "", false, false},
	"list_approvals":     {"get", "/bap/v1/approvals", "approvals.resolve", false, false},
	"get_healthz":        {"get", "/healthz", "", false, false},
	"get_readyz":         {"get", "/readyz", "", false, false},
	"stream_task_events": {"get", "/bap/v1/tasks/{task_id}/events/stream", "events.read", true, false},
	"stream_events":      {"get", "/bap/v1/events/stream", "events.read", true, false},
	// The operator's secrets API (issue #17): never an MCP tool, never an agent's scope.
	"list_secrets":  {"get", "/bap/v1/secrets", "secrets.write", false, false},
	"create_secret": {"post", "/bap/v1/secrets", "secrets.write", false, true},
	"rotate_secret": {"post", "/bap/v1/secrets/{secret_id}/rotate", "secrets.write", false, true},
	"delete_secret": {"post", "/bap/v1/secrets/{secret_id}/delete", "secrets.write", false, true},
	// Human handoff (issue #18 item 5, ADR 0023): a person's, never an agent's; not MCP tools.
	"take_over_task": {"post", "/bap/v1/tasks/{task_id}/take_over", "approvals.resolve", false, true},
	"hand_back_task": {"post", "/bap/v1/tasks/{task_id}/hand_back", "approvals.resolve", false, true},
	// The public keys of the audit anchors (issue #20, ADR 0033): anonymous, like the JWKS.
	"get_audit_keys": {"get", "/bap/v1/audit/keys", "", false, false},
	// Verified replay (issue #20 item 4, ADR 0035): mutating and spawning a task, not an MCP tool.
	"replay_task": {"post", "/bap/v1/tasks/{task_id}/replay", "tasks.write", false, true},
}

var contractScopes = []string{
	"bap:tasks.read", "bap:tasks.write", "bap:browser.observe", "bap:browser.act",
	"bap:approvals.request", "bap:approvals.resolve", "bap:artifacts.read", "bap:events.read",
	// Secrets by reference (issue #17): an agent's listing, and the operator's store.
	"bap:secrets.read", "bap:secrets.write",
}

var contractProblemCodes = []string{
	"invalid_request", "idempotency_key_required", "unauthenticated", "insufficient_scope", "origin_not_allowed",
	"not_found", "action_timeout", "invalid_transition", "idempotency_in_flight", "stale_node_handle",
	"approval_not_pending", "checkpoint_foreign", "checkpoint_incompatible", "checkpoint_stale",
	"browser_session_lost", "payload_too_large", "idempotency_key_reused", "rate_limited", "overloaded",
	"browser_unavailable",
}

var contractTaskStates = []string{
	"created", "admitted", "running", "waiting_for_approval", "waiting_for_external_input",
	"checkpointed", "succeeded", "failed", "cancelled", "expired",
}

const idempotencyKeyRef = "#/components/parameters/IdempotencyKey"

// schemaBase is a virtual location for the schema files; nothing is fetched from it.
const schemaBase = "https://bap.invalid/spec/"

type obj = map[string]any

func loadYAML(t *testing.T, name string) obj {
	t.Helper()
	b, err := fs.ReadFile(FS, name)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return toJSON(t, v).(obj)
}

// toJSON turns a YAML-decoded value into the JSON data model the validator expects.
func toJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("YAML value is not JSON: %v", err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func m(v any) obj {
	o, _ := v.(obj)
	return o
}

func pascal(s string) string {
	var b strings.Builder
	for _, p := range strings.Split(s, "_") {
		b.WriteString(strings.ToUpper(p[:1]) + p[1:])
	}
	return b.String()
}

func schemaNames(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(FS, "schemas/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema files: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(path.Base(f), ".json"))
	}
	return names
}

func loadSchema(t *testing.T, name string) obj {
	t.Helper()
	b, err := fs.ReadFile(FS, "schemas/"+name+".json")
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	return v.(obj)
}

// newCompiler returns a compiler that knows every schema file under schemaBase.
func newCompiler(t *testing.T) *jsonschema.Compiler {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	for _, n := range schemaNames(t) {
		if err := c.AddResource(schemaBase+"schemas/"+n+".json", loadSchema(t, n)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) { return nil, fmt.Errorf("no loading of %s", url) }

func TestOperationsMatchContract(t *testing.T) {
	doc := loadYAML(t, "openapi.yaml")
	if doc["openapi"] != "3.1.0" || m(doc["info"])["version"] != "1.0.0" {
		t.Errorf("want openapi 3.1.0 and info.version 1.0.0, got %v / %v", doc["openapi"], m(doc["info"])["version"])
	}
	paths := m(doc["paths"])
	comps := m(doc["components"])
	schemas := m(comps["schemas"])

	type found struct {
		method, route string
		op            obj
	}
	byID := map[string]found{}
	for route, item := range paths {
		for method, op := range m(item) {
			o := m(op)
			if o == nil {
				continue
			}
			id, _ := o["operationId"].(string)
			if _, dup := byID[id]; dup || id == "" {
				t.Errorf("%s %s: missing or duplicate operationId %q", method, route, id)
			}
			byID[id] = found{method, route, o}
		}
	}
	if len(byID) != len(contractOps)+len(extraOps) {
		t.Errorf("spec has %d operations, want %d contract + %d extra", len(byID), len(contractOps), len(extraOps))
	}

	for _, c := range contractOps {
		f, ok := byID[c.id]
		if !ok {
			t.Errorf("%s: missing", c.id)
			continue
		}
		if f.method != c.method || f.route != c.route {
			t.Errorf("%s: got %s %s, want %s %s", c.id, f.method, f.route, c.method, c.route)
		}
		if f.op["x-bap-mutating"] != c.mutating {
			t.Errorf("%s: x-bap-mutating = %v, want %v", c.id, f.op["x-bap-mutating"], c.mutating)
		}
		wantSec := []any{obj{"bap_oauth": []any{"bap:" + c.scope}}}
		if !reflect.DeepEqual(f.op["security"], wantSec) {
			t.Errorf("%s: security = %v, want %v", c.id, f.op["security"], wantSec)
		}
		var hasKey bool
		for _, p := range f.op["parameters"].([]any) {
			if m(p)["$ref"] == idempotencyKeyRef {
				hasKey = true
			}
		}
		if hasKey != c.mutating {
			t.Errorf("%s: IdempotencyKey parameter present = %v, want %v", c.id, hasKey, c.mutating)
		}
		// Request and response type names (spec-conventions "Names").
		if c.method == "post" {
			rb := m(m(m(f.op["requestBody"])["content"])["application/json"])
			if got := m(rb["schema"])["$ref"]; got != "#/components/schemas/"+pascal(c.id)+"Request" {
				t.Errorf("%s: request schema %v", c.id, got)
			}
		} else if f.op["requestBody"] != nil {
			t.Errorf("%s: GET with a request body", c.id)
		}
		if _, ok := schemas[pascal(c.id)+"Response"]; !ok {
			t.Errorf("%s: components/schemas/%sResponse missing", c.id, pascal(c.id))
		}
		resps := m(f.op["responses"])
		var got2xx []string
		for code := range resps {
			if strings.HasPrefix(code, "2") {
				got2xx = append(got2xx, code)
			}
		}
		sort.Strings(got2xx)
		if !slices.Equal(got2xx, c.success) {
			t.Errorf("%s: 2xx responses %v, want %v", c.id, got2xx, c.success)
		}
		if c.id != "get_artifact" && c.id != "get_task_bundle" { // bytes, not JSON
			primary := c.success[len(c.success)-1]
			if c.id == "act" {
				primary = "200"
			}
			sch := m(m(m(m(resps[primary])["content"])["application/json"])["schema"])
			ref := sch["$ref"]
			// An operation a crash can interrupt answers, on a replay of its key, 200 with only the
			// receipt (CONTRACT "Replaying the key of an interrupted command"): its 200 is
			// oneOf [<Op>Response, InterruptedCommandResponse], the operation's own result first.
			if alts, ok := sch["oneOf"].([]any); ok && len(alts) == 2 &&
				m(alts[1])["$ref"] == "#/components/schemas/InterruptedCommandResponse" {
				ref = m(alts[0])["$ref"]
			}
			if ref != "#/components/schemas/"+pascal(c.id)+"Response" {
				t.Errorf("%s: %s response schema %v, want %sResponse", c.id, primary, ref, pascal(c.id))
			}
		}
		if c.mutating {
			for _, code := range c.success {
				if m(m(resps[code])["headers"])["Idempotent-Replayed"] == nil {
					t.Errorf("%s: %s lacks the Idempotent-Replayed header", c.id, code)
				}
			}
		}
		// Error responses.
		want := []string{"400", "401", "403", "404", "429", "503"}
		if c.mutating {
			want = append(want, "409", "422")
		}
		if c.method == "post" {
			want = append(want, "413")
		}
		for _, code := range want {
			r := m(resps[code])
			if r == nil {
				t.Errorf("%s: no %s response", c.id, code)
				continue
			}
			if ref, _ := r["$ref"].(string); !strings.HasPrefix(ref, "#/components/responses/") {
				t.Errorf("%s: %s response is not a components/responses reference", c.id, code)
			}
		}
	}
	// get_artifact answers bytes with Repr-Digest.
	ga := m(m(byID["get_artifact"].op["responses"])["200"])
	if m(m(ga["content"])["*/*"])["schema"] == nil || m(m(ga["headers"])["Repr-Digest"])["$ref"] != "#/components/headers/ReprDigest" {
		t.Errorf("get_artifact: 200 must be */* binary with Repr-Digest")
	}

	for id, want := range extraOps {
		f, ok := byID[id]
		if !ok {
			t.Errorf("%s: missing", id)
			continue
		}
		if f.method != want.method || f.route != want.route {
			t.Errorf("%s: got %s %s, want %s %s", id, f.method, f.route, want.method, want.route)
		}
		if f.op["x-bap-mutating"] != want.mutating {
			t.Errorf("%s: x-bap-mutating = %v, want %v", id, f.op["x-bap-mutating"], want.mutating)
		}
		if stream, _ := f.op["x-bap-stream"].(bool); stream != want.stream {
			t.Errorf("%s: x-bap-stream = %v, want %v", id, stream, want.stream)
		}
		sec, _ := f.op["security"].([]any)
		if want.scope == "" {
			if sec == nil || len(sec) != 0 {
				t.Errorf("%s: must be anonymous (security: [])", id)
			}
		} else if !reflect.DeepEqual(sec, []any{obj{"bap_oauth": []any{"bap:" + want.scope}}}) {
			t.Errorf("%s: security = %v", id, sec)
		}
		if want.stream {
			ok := m(m(f.op["responses"])["200"])
			if m(m(m(ok["content"])["text/event-stream"])["schema"])["$ref"] != "#/components/schemas/Event" {
				t.Errorf("%s: 200 must be text/event-stream of Event", id)
			}
		}
	}

	// Security scheme: exactly the contract scopes, in both flows.
	flows := m(m(m(comps["securitySchemes"])["bap_oauth"])["flows"])
	for _, flow := range []string{"clientCredentials", "authorizationCode"} {
		sc := m(m(flows[flow])["scopes"])
		var got []string
		for k := range sc {
			got = append(got, k)
		}
		sort.Strings(got)
		want := slices.Clone(contractScopes)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("bap_oauth %s scopes = %v, want %v", flow, got, want)
		}
	}
	if !strings.Contains(m(doc["info"])["description"].(string), "no token") {
		t.Errorf("info.description must say the local profile needs no token")
	}
	for _, n := range []string{"BadRequest", "Unauthorized", "Forbidden", "NotFound", "RequestTimeout", "Conflict",
		"PayloadTooLarge", "UnprocessableEntity", "TooManyRequests", "ServiceUnavailable"} {
		r := m(m(comps["responses"])[n])
		if m(m(m(r["content"])["application/problem+json"])["schema"])["$ref"] != "#/components/schemas/Problem" {
			t.Errorf("components/responses/%s must be application/problem+json Problem", n)
		}
	}
	// components/schemas entries are one-line refs to existing files of the same name.
	for name, s := range schemas {
		if len(m(s)) != 1 || m(s)["$ref"] != "./schemas/"+name+".json" {
			t.Errorf("components/schemas/%s must be {$ref: ./schemas/%s.json}, got %v", name, name, s)
		}
		if _, err := fs.Stat(FS, "schemas/"+name+".json"); err != nil {
			t.Errorf("components/schemas/%s: %v", name, err)
		}
	}
}

func TestEnumsMatchContract(t *testing.T) {
	enum := func(name string) []string {
		var out []string
		for _, v := range loadSchema(t, name)["enum"].([]any) {
			out = append(out, v.(string))
		}
		return out
	}
	if got := enum("TaskState"); !slices.Equal(got, contractTaskStates) {
		t.Errorf("TaskState = %v", got)
	}
	codes := enum("ProblemCode")
	for _, c := range contractProblemCodes {
		if !slices.Contains(codes, c) {
			t.Errorf("ProblemCode lacks %s", c)
		}
	}
	if got := enum("ReceiptOutcome"); !slices.Equal(got, []string{"applied", "no_side_effect", "pending_approval", "rejected", "unknown_outcome", "reconciliation_required"}) {
		t.Errorf("ReceiptOutcome = %v", got)
	}
	if got := enum("ApprovalState"); !slices.Equal(got, []string{"pending", "approved", "denied", "cancelled", "expired"}) {
		t.Errorf("ApprovalState = %v", got)
	}
	if got := enum("ActAction"); len(got) != 11 {
		t.Errorf("ActAction = %v", got)
	}
}

var (
	schemaRefs = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*\.json$`)
)

// TestSchemasCompile compiles every schema file and checks the file conventions.
func TestSchemasCompile(t *testing.T) {
	c := newCompiler(t)
	for _, n := range schemaNames(t) {
		s := loadSchema(t, n)
		if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" || s["$id"] != n+".json" || s["title"] != n {
			t.Errorf("%s.json: $schema/$id/title do not follow the conventions", n)
		}
		if _, err := c.Compile(schemaBase + "schemas/" + n + ".json"); err != nil {
			t.Errorf("%s.json: %v", n, err)
		}
		walk(s, func(k string, v any, parent obj) {
			switch k {
			case "$ref":
				if r, _ := v.(string); !schemaRefs.MatchString(r) {
					t.Errorf("%s.json: $ref %q must name a schema file", n, v)
				}
			case "type":
				if _, isArr := v.([]any); isArr && !(n == "ListTaskEventsResponse") {
					t.Errorf("%s.json: type arrays are only allowed for next_after", n)
				}
			}
		})
	}
}

// TestClientObjectsClosed checks that request bodies are closed and bounded.
func TestClientObjectsClosed(t *testing.T) {
	for _, c := range contractOps {
		if c.method != "post" {
			continue
		}
		s := loadSchema(t, pascal(c.id)+"Request")
		if s["additionalProperties"] != false {
			t.Errorf("%sRequest must be closed", pascal(c.id))
		}
		walk(s, func(k string, v any, parent obj) {
			if k != "type" {
				return
			}
			switch v {
			case "string":
				if parent["maxLength"] == nil && parent["format"] != "date-time" && parent["enum"] == nil {
					t.Errorf("%sRequest: a string without maxLength", pascal(c.id))
				}
			case "array":
				if parent["maxItems"] == nil {
					t.Errorf("%sRequest: an array without maxItems", pascal(c.id))
				}
			}
		})
	}
}

func walk(v any, f func(key string, val any, parent obj)) {
	switch x := v.(type) {
	case obj:
		for k, val := range x {
			f(k, val, x)
			if k == "examples" || k == "example" || k == "default" || k == "const" || k == "enum" {
				continue
			}
			walk(val, f)
		}
	case []any:
		for _, e := range x {
			walk(e, f)
		}
	}
}

// inlineSchema compiles a schema written inside openapi.yaml / asyncapi.yaml.
type inlineCompiler struct {
	t     *testing.T
	c     *jsonschema.Compiler
	comps obj    // components/schemas of the document
	name  string // distinguishes the inline schemas of each document
	n     int
}

func (ic *inlineCompiler) rewrite(v any) any {
	switch x := v.(type) {
	case obj:
		out := obj{}
		for k, val := range x {
			out[k] = ic.rewrite(val)
		}
		if r, ok := x["$ref"].(string); ok {
			if name, ok := strings.CutPrefix(r, "#/components/schemas/"); ok {
				target := m(ic.comps[name])
				if target == nil {
					ic.t.Errorf("unknown schema reference %s", r)
					return out
				}
				return ic.rewrite(target)
			}
			if name, ok := strings.CutPrefix(r, "./schemas/"); ok {
				out["$ref"] = schemaBase + "schemas/" + name
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = ic.rewrite(e)
		}
		return out
	}
	return v
}

func (ic *inlineCompiler) compile(s any) (*jsonschema.Schema, error) {
	ic.n++
	url := fmt.Sprintf("%sinline/%s/%d.json", schemaBase, ic.name, ic.n)
	if err := ic.c.AddResource(url, ic.rewrite(s)); err != nil {
		return nil, err
	}
	return ic.c.Compile(url)
}

// TestExamplesValidate validates every example of openapi.yaml, asyncapi.yaml and
// the schema files against its schema.
func TestExamplesValidate(t *testing.T) {
	c := newCompiler(t)

	// Schema-level examples.
	for _, n := range schemaNames(t) {
		s := loadSchema(t, n)
		exs, _ := s["examples"].([]any)
		sch, err := c.Compile(schemaBase + "schemas/" + n + ".json")
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		for i, ex := range exs {
			if err := sch.Validate(ex); err != nil {
				t.Errorf("%s.json examples[%d]: %v", n, i, err)
			}
		}
	}

	// OpenAPI: media types, parameters and headers.
	doc := loadYAML(t, "openapi.yaml")
	ic := &inlineCompiler{t: t, c: c, name: "openapi", comps: m(m(doc["components"])["schemas"])}
	var count int
	var visit func(where string, v any)
	check := func(where string, schema any, ex any) {
		count++
		sch, err := ic.compile(schema)
		if err != nil {
			t.Errorf("%s: schema: %v", where, err)
			return
		}
		if err := sch.Validate(ex); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	mediaTypes := 0
	visit = func(where string, v any) {
		switch x := v.(type) {
		case obj:
			if s, ok := x["schema"]; ok {
				if ex, ok := x["example"]; ok {
					check(where+"/example", s, ex)
				}
				exs, _ := x["examples"].(obj)
				for name, e := range exs {
					check(where+"/examples/"+name, s, m(e)["value"])
				}
				if _, isParam := x["in"]; !isParam && where != "" && strings.Contains(where, "/content/") {
					mediaTypes++
					if len(exs) == 0 {
						t.Errorf("%s: media type without examples", where)
					}
				}
			}
			for k, val := range x {
				if k == "examples" || k == "example" || k == "schema" {
					continue
				}
				visit(where+"/"+strings.ReplaceAll(k, "/", "~1"), val)
			}
		case []any:
			for i, e := range x {
				visit(fmt.Sprintf("%s/%d", where, i), e)
			}
		}
	}
	visit("#", doc)
	if count < 70 || mediaTypes < 50 {
		t.Errorf("only %d OpenAPI examples in %d media types checked", count, mediaTypes)
	}

	// AsyncAPI: every message example against its payload; one message per EventType.
	adoc := loadYAML(t, "asyncapi.yaml")
	if adoc["asyncapi"] != "3.0.0" {
		t.Errorf("asyncapi = %v", adoc["asyncapi"])
	}
	aic := &inlineCompiler{t: t, c: c, name: "asyncapi", comps: m(m(adoc["components"])["schemas"])}
	var names []string
	for key, msg := range m(m(adoc["components"])["messages"]) {
		mm := m(msg)
		names = append(names, mm["name"].(string))
		sch, err := aic.compile(mm["payload"])
		if err != nil {
			t.Errorf("message %s: %v", key, err)
			continue
		}
		exs, _ := mm["examples"].([]any)
		if len(exs) == 0 {
			t.Errorf("message %s: no example", key)
		}
		for i, ex := range exs {
			p := m(ex)["payload"]
			if err := sch.Validate(p); err != nil {
				t.Errorf("message %s example %d: %v", key, i, err)
			}
			if m(p)["type"] != mm["name"] {
				t.Errorf("message %s example %d: type %v", key, i, m(p)["type"])
			}
		}
	}
	sort.Strings(names)
	var types []string
	for _, v := range loadSchema(t, "EventType")["enum"].([]any) {
		types = append(types, v.(string))
	}
	sort.Strings(types)
	if !slices.Equal(names, types) {
		t.Errorf("AsyncAPI messages %v != EventType %v", names, types)
	}
	for _, ch := range []string{"taskEvents", "allEvents"} {
		c := m(m(adoc["channels"])[ch])
		if len(m(c["messages"])) != len(types) || m(m(c["bindings"])["ws"])["method"] != "GET" {
			t.Errorf("channel %s: needs every message and a ws GET binding", ch)
		}
	}
}
