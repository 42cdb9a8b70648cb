package e2e

import (
	"encoding/json"
	"testing"

	"github.com/originweave/bap/spec"
)

// specEnum reads the enum of one of the spec's string schemas, so that a test sends every value
// the spec lists in the spec's own spelling.
func specEnum(t *testing.T, schema string) []string {
	t.Helper()
	raw, err := spec.FS.ReadFile("schemas/" + schema + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Enum []string `json:"enum"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc.Enum) == 0 {
		t.Fatalf("%s: no enum (%v)", schema, err)
	}
	return doc.Enum
}

// Every wait_until value of the spec navigates (networkidle was once refused by the browser
// layer, which spelled it network_idle).
func TestEveryWaitUntilValueNavigates(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	sh := newShop(t)
	_, sessionID := openShop(t, s, sh, "wait-until")
	for _, w := range specEnum(t, "WaitUntil") {
		t.Run(w, func(t *testing.T) {
			r := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/navigate", "wait-"+w,
				map[string]any{"url": sh.srv.URL + "/checkout?w=" + w, "wait_until": w})
			if got := r.str("url"); got != sh.srv.URL+"/checkout?w="+w {
				t.Fatalf("navigate with wait_until %s: url %q (%s)", w, got, r.raw)
			}
		})
	}
}
