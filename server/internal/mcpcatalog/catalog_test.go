package mcpcatalog

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// contract is CONTRACT.md's operation table: name → mutating.
var contract = map[string]bool{
	"create_task": true, "get_task": false, "list_task_events": false, "cancel_task": true,
	"resume_task": true, "close_task": true, "create_browser_session": true,
	"checkpoint_browser_session": true, "close_browser_session": true, "navigate": true,
	"observe": false, "query_nodes": false, "act": true, "extract": false, "capture_evidence": true,
	"request_approval": true, "resolve_approval": true, "get_artifact": false, "verify_artifact": false,
	"list_task_secrets": false, // issue #17: the secrets an agent may name on its task
	// Issue #20 (CONTRACT "Proof"): the history chain's check and the evidence bundle, reads.
	"get_task_audit": false, "get_task_bundle": false,
}

func TestCatalogMatchesContract(t *testing.T) {
	tools, err := Tools()
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != len(contract) {
		t.Fatalf("%d tools, want %d", len(tools), len(contract))
	}
	if !slices.IsSortedFunc(tools, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("tools are not sorted by name")
	}
	for _, tool := range tools {
		mut, ok := contract[tool.Name]
		if !ok {
			t.Errorf("tool %s is not a contract operation", tool.Name)
			continue
		}
		if tool.Mutating != mut {
			t.Errorf("%s: mutating %v, want %v", tool.Name, tool.Mutating, mut)
		}
		if tool.Title == "" || tool.Description == "" || !strings.HasPrefix(tool.Scope, "bap:") {
			t.Errorf("%s: title %q, description %q, scope %q", tool.Name, tool.Title, tool.Description, tool.Scope)
		}
		var s struct {
			Type                 string         `json:"type"`
			Properties           map[string]any `json:"properties"`
			Required             []string       `json:"required"`
			AdditionalProperties *bool          `json:"additionalProperties"`
		}
		if err := json.Unmarshal(tool.InputSchema, &s); err != nil {
			t.Fatalf("%s: %v", tool.Name, err)
		}
		if s.Type != "object" || s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("%s: input schema must be a closed object", tool.Name)
		}
		_, hasKey := s.Properties["idempotency_key"]
		if hasKey != mut || slices.Contains(s.Required, "idempotency_key") != mut {
			t.Errorf("%s: idempotency_key declared %v (required %v), want %v", tool.Name, hasKey, slices.Contains(s.Required, "idempotency_key"), mut)
		}
		for _, id := range []string{"task_id", "session_id", "approval_id", "artifact_id"} {
			if _, ok := s.Properties[id]; ok && !slices.Contains(s.Required, id) && strings.Contains(tool.Name, strings.TrimSuffix(id, "_id")) {
				t.Errorf("%s: path parameter %s is not required", tool.Name, id)
			}
		}
		if bytes.Contains(tool.InputSchema, []byte(`"$ref":"#/components`)) || bytes.Contains(tool.InputSchema, []byte(".json")) {
			t.Errorf("%s: input schema has external references", tool.Name)
		}
	}
	if _, ok, _ := Lookup("eval_javascript"); ok {
		t.Error("Lookup found a tool that does not exist")
	}
}

func compile(t *testing.T, tool Tool) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(tool.InputSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// No loader for anything but this document: an external reference fails to compile.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource("tool.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("tool.json")
	if err != nil {
		t.Fatalf("%s: %v", tool.Name, err)
	}
	return s
}

func TestInputSchemasValidate(t *testing.T) {
	tools, err := Tools()
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		compile(t, tool)
	}
	cases := []struct {
		tool, args string
		ok         bool
	}{
		{"navigate", `{"session_id":"bs_1","url":"https://example.com/","idempotency_key":"k1"}`, true},
		{"navigate", `{"session_id":"bs_1","url":"https://example.com/"}`, false},                             // no key
		{"navigate", `{"session_id":"bs_1","url":"https://e/","idempotency_key":"k","selector":"#a"}`, false}, // unknown field
		{"act", `{"session_id":"bs_1","action":"click","query":{"role":"button","name":"Buy"},"idempotency_key":"k"}`, true},
		{"act", `{"session_id":"bs_1","action":"eval","idempotency_key":"k"}`, false},
		{"list_task_events", `{"task_id":"tsk_1","after":3,"limit":10}`, true},
		{"list_task_events", `{"task_id":"tsk_1","limit":5000}`, false},
		{"get_task", `{"task_id":"tsk_1","idempotency_key":"k"}`, false},
		{"create_task", `{"goal":"g","policy":{"allowed_origins":["https://example.com"]},"postcondition":{"all":[{"url_matches":"done"}]},"idempotency_key":"k"}`, true},
		// create_browser_session takes the engine as the API does (issue #19): the spec's values only.
		{"create_browser_session", `{"task_id":"tsk_1","engine":"chromium","idempotency_key":"k"}`, true},
		{"create_browser_session", `{"task_id":"tsk_1","engine":"firefox","from_checkpoint":"chk_1","idempotency_key":"k"}`, true},
		{"create_browser_session", `{"task_id":"tsk_1","engine":"webkit","idempotency_key":"k"}`, false},
	}
	for _, tc := range cases {
		tool, ok, err := Lookup(tc.tool)
		if err != nil || !ok {
			t.Fatalf("Lookup(%s): %v %v", tc.tool, ok, err)
		}
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(tc.args))
		if err != nil {
			t.Fatal(err)
		}
		err = compile(t, tool).Validate(v)
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: valid=%v, want %v (%v)", tc.tool, tc.args, err == nil, tc.ok, err)
		}
	}
}
