package e2e

import "testing"

// extract {kind: schema, fields} over HTTP: each property filled from its own query, as plan steps
// and planner steps have always been able to (the handler once decoded fields the spec forbade).
func TestExtractSchemaFieldsOverHTTP(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	_, sess := openShop(t, s, sh, "fields")
	base := "/bap/v1/browser-sessions/" + sess
	s.must(t, 200, "POST", base+"/act", "fields-fill", map[string]any{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Ada Lovelace"})
	r := s.must(t, 200, "POST", base+"/extract", "", map[string]any{
		"kind": "schema",
		"schema": map[string]any{"type": "object", "required": []string{"heading", "buyer"}, "properties": map[string]any{
			"heading": map[string]any{"type": "string"}, "buyer": map[string]any{"type": "string"}}},
		"fields": map[string]any{
			"heading": map[string]any{"role": "heading", "name": "Checkout"},
			"buyer":   map[string]any{"label": "Full name"},
		},
	})
	data, _ := r.body["data"].(map[string]any)
	if data["heading"] != "Checkout" || data["buyer"] != "Ada Lovelace" {
		t.Fatalf("extract with fields: %s", r.raw)
	}
	// A field that is not a query is refused, as the spec says.
	bad := s.call(t, "POST", base+"/extract", "", map[string]any{"kind": "schema", "schema": map[string]any{"type": "object"}, "fields": map[string]any{"heading": "h1"}})
	if bad.status != 400 || bad.body["code"] != "invalid_request" {
		t.Fatalf("a field that is not a query: %d %s", bad.status, bad.raw)
	}
}
