package bidigen

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

const remote = `
m.Do = (
  method: "m.do",
  params: m.DoParameters
)
m.Idle = (
  method: "m.idle",
  params: EmptyParams
)
other.Skip = (
  method: "other.skip",
  params: EmptyParams
)
EmptyParams = { Extensible }
Extensible = (*text => any)
js-uint = 0..9007199254740991
m.Ref = text
m.DoParameters = {
  ref: m.Ref,
  ? depth: js-uint,
  ? mode: ("a" / "b") .default "a",
  ? labels: [*text],
  ? headers: { *text => text },
  value: m.Value,
  parent: m.Ref / null,
}
m.Value = { type: "string", value: text } / { type: "number", value: float } / { type: "undefined" }
`

const local = `
m.DoResult = { done: bool }
m.IdleResult = EmptyResult
EmptyResult = { Extensible }
Extensible = (*text => any)
m.Happened = (
  method: "m.happened",
  params: m.Info
)
m.Info = { ref: m.Ref }
m.Ref = text
ErrorCode = "invalid argument" / "no such frame"
`

func TestGenerateMapping(t *testing.T) {
	out, err := Generate(remote, local, "p", []string{"m"})
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Join(strings.Fields(string(out)), " ")
	for _, want := range []string{
		"func (c *Conn) MDo(ctx context.Context, p MDoParameters) (*MDoResult, error) {",
		"func (c *Conn) MIdle(ctx context.Context) error {",
		"Ref     MRef              `json:\"ref\"`",
		"Depth   *int64            `json:\"depth,omitempty\"`",
		"Mode    string            `json:\"mode,omitempty\"`",
		"Labels  []string          `json:\"labels,omitempty\"`",
		"Headers map[string]string `json:\"headers,omitempty\"`",
		"Parent  *MRef             `json:\"parent\"`",
		// A choice of maps is one struct; `value` differs in type between them.
		"Type  string          `json:\"type\"`",
		"Value json.RawMessage `json:\"value,omitempty\"`",
		"EventMHappened = \"m.happened\"",
		"func (c *Conn) OnMHappened(fn func(MInfo)) (cancel func()) {",
		"ErrorCodeNoSuchFrame    ErrorCode = \"no such frame\"",
	} {
		if !strings.Contains(src, strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the generated code lacks %q", want)
		}
	}
	if strings.Contains(src, "OtherSkip") {
		t.Error("a command of a module not asked for was generated")
	}
	if t.Failed() {
		t.Log(string(out))
	}
}

// TestGenerateCommitted regenerates from the committed CDDL: the output is deterministic and
// is what server/internal/bidi holds.
func TestGenerateCommitted(t *testing.T) {
	r, err := os.ReadFile("webdriver-bidi/remote.cddl")
	if err != nil {
		t.Fatal(err)
	}
	l, err := os.ReadFile("webdriver-bidi/local.cddl")
	if err != nil {
		t.Fatal(err)
	}
	a, err := Generate(string(r), string(l), "bidi", Modules)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(string(r), string(l), "bidi", Modules)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("two runs differ (%v)", err)
	}
	committed, err := os.ReadFile("../../server/internal/bidi/protocol.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, committed) {
		t.Fatal("server/internal/bidi/protocol.gen.go is stale: run make generate")
	}
}
