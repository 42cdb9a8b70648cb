package bidi

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeMessage(t *testing.T) {
	tests := []struct {
		name, in string
		want     string // the envelope's type, or "" for an error
	}{
		{"success", `{"type":"success","id":3,"result":{}}`, "success"},
		{"error", `{"type":"error","id":3,"error":"no such frame","message":"m"}`, "error"},
		{"error without id", `{"type":"error","id":null,"error":"invalid argument","message":"m"}`, "error"},
		{"event", `{"type":"event","method":"log.entryAdded","params":{}}`, "event"},
		{"success without id", `{"type":"success","result":{}}`, ""},
		{"success without result", `{"type":"success","id":1}`, ""},
		{"event without method", `{"type":"event","params":{}}`, ""},
		{"unknown type", `{"type":"surprise","id":1}`, ""},
		{"not json", `{"type":`, ""},
		{"negative id", `{"type":"success","id":-1,"result":{}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := decodeMessage([]byte(tt.in))
			if tt.want == "" {
				if err == nil {
					t.Fatalf("decodeMessage = %+v, want an error", env)
				}
				return
			}
			if err != nil || env.Type != tt.want {
				t.Fatalf("decodeMessage = %+v, %v, want type %s", env, err, tt.want)
			}
		})
	}
}

func TestErrorMessageIsBounded(t *testing.T) {
	env, err := decodeMessage([]byte(`{"type":"error","id":1,"message":"` + strings.Repeat("é", 400) + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	e := env.asError("script.evaluate")
	if e.Code != ErrorCodeUnknownError || len(e.Message) > maxErrorMessage || !strings.HasPrefix(e.Message, "éé") || !json.Valid([]byte(`"`+e.Message+`"`)) {
		t.Fatalf("asError = %+v, want unknown error with a message cut to %d valid bytes", e, maxErrorMessage)
	}
}

// FuzzDecodeMessage feeds the decoder what a hostile page could make the browser send: it must
// return an envelope whose type is one of the three, with the members that type needs, or an error.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"success","id":1,"result":{"context":"abc"}}`,
		`{"type":"error","id":2,"error":"no such frame","message":"no","stacktrace":"x"}`,
		`{"type":"event","method":"browsingContext.load","params":{"context":"c","url":"http://x/"}}`,
		`{"type":"event","method":"script.message","params":{"data":{"type":"string","value":"\u0000"}}}`,
		`{"type":"success","id":18446744073709551615,"result":null}`,
		`[]`, `null`, `{"type":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := decodeMessage(data)
		if err != nil {
			return
		}
		switch env.Type {
		case "success":
			if env.ID == nil || len(env.Result) == 0 {
				t.Fatalf("success without id or result: %+v", env)
			}
		case "error":
			if env.Error == "" || len(env.asError("m").Message) > maxErrorMessage {
				t.Fatalf("error without code or with an unbounded message: %+v", env)
			}
		case "event":
			if env.Method == "" || len(env.Params) == 0 {
				t.Fatalf("event without method or params: %+v", env)
			}
		default:
			t.Fatalf("type %q accepted", env.Type)
		}
	})
}
