package mcpserver

import "testing"

func TestDuplicateMember(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		`{"a":1,"b":2}`:                                      "",
		`{"a":1,"a":2}`:                                      "a",
		`{"a":{"x":1},"b":{"x":2}}`:                          "",
		`{"a":{"x":1,"x":2}}`:                                "x",
		`{"a":[{"x":1},{"x":2}],"b":"a"}`:                    "",
		`{"a":[{"x":1,"y":[1,{"z":0,"z":1}]}]}`:              "z",
		`{"a":"b","c":["a","a"]}`:                            "",
		`{"params":{"name":"t","arguments":{}},"params":{}}`: "params",
	} {
		if got := duplicateMember([]byte(doc)); got != want {
			t.Errorf("%s: %q, want %q", doc, got, want)
		}
	}
}

func TestDecodeHeaderValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"get_task":                "get_task",
		"=?base64?Z2V0X3Rhc2s=?=": "get_task",
		"=?base64?Z2V0X3Rhc2s=":   "=?base64?Z2V0X3Rhc2s=", // no suffix: literal
		"Z2V0X3Rhc2s=?=":          "Z2V0X3Rhc2s=?=",        // no prefix: literal
		"=?base64?w6lsw6h2ZQ==?=": "élève",
	} {
		got, err := decodeHeaderValue(in)
		if err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"=?base64?Z2V0X3Rhc2s?=", "=?base64?Z2V0!!3Rhc2s=?=", "=?base64?Z2V0X3Rhc2t=?="} {
		if _, err := decodeHeaderValue(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}
