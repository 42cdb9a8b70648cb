package problem

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The generated table is the spec's: every code of ProblemCode.json's enum, in its order, with the
// status and title of its x-problems entry, and nothing else. (make generate writes it and
// check-generated catches a stale one; this reads the spec itself, so a hand edit fails too.)
func TestTableIsTheSpecs(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "spec", "schemas", "ProblemCode.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Enum     []string `json:"enum"`
		Problems map[string]struct {
			Status int    `json:"status"`
			Title  string `json:"title"`
		} `json:"x-problems"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	if len(All) != len(spec.Enum) || len(table) != len(spec.Enum) {
		t.Fatalf("%d codes in All and %d in the table, the spec lists %d", len(All), len(table), len(spec.Enum))
	}
	for i, c := range spec.Enum {
		code := Code(c)
		want := spec.Problems[c]
		if All[i] != code {
			t.Errorf("All[%d] = %q, the spec's is %q", i, All[i], c)
		}
		if !code.Known() || code.Status() != want.Status || code.Title() != want.Title {
			t.Errorf("%s: known %v, %d %q; the spec says %d %q", c, code.Known(), code.Status(), code.Title(), want.Status, want.Title)
		}
	}
}

// A code the spec does not list is a bug of ours: it is answered as an internal error.
func TestAnUnknownCodeIsAnInternalError(t *testing.T) {
	for _, c := range []Code{"", "no_such_code", "Invalid_Request"} {
		if c.Known() || c.Status() != 500 || c.Title() != InternalError.Title() {
			t.Errorf("%q: known %v, %d %q; want unknown, 500 %q", c, c.Known(), c.Status(), c.Title(), InternalError.Title())
		}
	}
}
