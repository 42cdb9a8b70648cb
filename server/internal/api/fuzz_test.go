package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/apigen"
)

// FuzzRequestBody feeds arbitrary bytes through the body parser and the spec validator of every
// operation that takes a body: nothing panics, and no violation message repeats request content.
func FuzzRequestBody(f *testing.F) {
	idx, err := loadSpec(apigen.OpenAPI)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"goal":"g","policy":{"allowed_origins":["https://a.example.com"]}}`,
		`{"goal":"g","policy":{"allowed_origins":[]},"postcondition":{"all":[{"url_matches":"x"}]}}`,
		`{"goal":"","policy":{}}`, `{"reason":"SECRETVALUE123"}`, `{"decision":"maybe"}`, `[]`, `null`, `{`,
		`{"SECRETKEY_UNKNOWN_FIELD":1}`, `{"goal":"\u0000"}`, strings.Repeat(`[`, 10000),
		`{"checkpoint_id":"chk_` + strings.Repeat("a", 80) + `"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := decodeBody(body)
		if err != nil {
			return
		}
		for _, op := range idx.ops {
			if op.body == nil {
				continue
			}
			for _, viol := range validateValue(op.body, v, "") {
				for _, leak := range []string{"SECRETVALUE123", "SECRETKEY_UNKNOWN_FIELD"} {
					if strings.Contains(string(body), leak) && (strings.Contains(viol.Message, leak) || strings.Contains(viol.Pointer, leak)) {
						t.Fatalf("%s: violation %+v repeats request content", op.ID, viol)
					}
				}
				if _, err := json.Marshal(viol); err != nil {
					t.Fatalf("violation not encodable: %v", err)
				}
			}
		}
	})
}
