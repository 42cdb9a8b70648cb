package mcpcatalog

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/originweave/bap/codegen/apimodel"
)

func TestGenerate(t *testing.T) {
	d, err := apimodel.LoadOpenAPI("../../server/internal/apigen/openapi.gen.json")
	if err != nil {
		t.Fatal(err)
	}
	a, err := Generate(d)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(d)
	if !bytes.Equal(a, b) {
		t.Fatal("output differs between two runs")
	}
	var cat Catalog
	if err := json.Unmarshal(a, &cat); err != nil {
		t.Fatal(err)
	}
	if len(cat.Tools) != 22 {
		t.Fatalf("%d tools, want 22", len(cat.Tools))
	}
	byName := map[string]Tool{}
	for _, tool := range cat.Tools {
		byName[tool.Name] = tool
		props := tool.InputSchema["properties"].(map[string]any)
		if _, ok := props["idempotency_key"]; ok != tool.Mutating {
			t.Errorf("%s: idempotency_key %v, mutating %v", tool.Name, ok, tool.Mutating)
		}
		if tool.InputSchema["additionalProperties"] != false {
			t.Errorf("%s: open input schema", tool.Name)
		}
		for _, k := range []string{"allOf", "anyOf", "oneOf", "not"} {
			if _, ok := tool.InputSchema[k]; ok {
				t.Errorf("%s: top-level %s", tool.Name, k)
			}
		}
		raw, _ := json.Marshal(tool.InputSchema)
		if bytes.Contains(raw, []byte("#/components/")) || bytes.Contains(raw, []byte(`"examples"`)) {
			t.Errorf("%s: component reference or examples left", tool.Name)
		}
	}
	nav := byName["navigate"].InputSchema
	req := nav["required"].([]any)
	if len(req) != 3 || req[0] != "idempotency_key" || req[1] != "session_id" || req[2] != "url" {
		t.Errorf("navigate required %v", req)
	}
	events := byName["list_task_events"].InputSchema["properties"].(map[string]any)
	if _, ok := events["after"]; !ok {
		t.Error("list_task_events lacks the query parameter after")
	}
	if _, ok := byName["act"].InputSchema["$defs"].(map[string]any)["Query"]; !ok {
		t.Error("act does not inline Query")
	}
}
