package problems

import (
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

// The generator refuses a table that disagrees with the enum, rather than defaulting a status.
func TestLoadRefusesADisagreeingTable(t *testing.T) {
	for _, tt := range []struct {
		name, doc, want string
	}{
		{"no entry", `{"enum":["a"],"x-problems":{}}`, "no x-problems entry"},
		{"not an error status", `{"enum":["a"],"x-problems":{"a":{"status":200,"title":"A"}}}`, "not a 4xx or 5xx"},
		{"no title", `{"enum":["a"],"x-problems":{"a":{"status":400,"title":" "}}}`, "no title"},
		{"entry not in the enum", `{"enum":["a"],"x-problems":{"a":{"status":400,"title":"A"},"b":{"status":400,"title":"B"}}}`, "does not list"},
		{"twice", `{"enum":["a","a"],"x-problems":{"a":{"status":400,"title":"A"}}}`, "twice"},
		{"no enum", `{"x-problems":{}}`, "no enum"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(fstest.MapFS{"p.json": {Data: []byte(tt.doc)}}, "p.json")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func TestGoNames(t *testing.T) {
	ps, err := Load(fstest.MapFS{"p.json": {Data: []byte(`{"enum":["invalid_request","internal_error"],"x-problems":{"invalid_request":{"status":400,"title":"Invalid request"},"internal_error":{"status":500,"title":"Internal error"}}}`)}}, "p.json")
	if err != nil {
		t.Fatal(err)
	}
	src, err := Go(ps)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`InvalidRequest Code = "invalid_request"`, `InternalError:\s+\{500, "Internal error"\}`} {
		if !regexp.MustCompile(want).Match(src) {
			t.Errorf("generated source lacks %s:\n%s", want, src)
		}
	}
}
