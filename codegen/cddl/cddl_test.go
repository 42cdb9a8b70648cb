package cddl

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, src string
		check     func(t *testing.T, rules []*Rule)
	}{
		{"map with optional member and default", `a.B = { x: text, ? y: bool .default false, Extensible }
Extensible = (*text => any)`, func(t *testing.T, rs []*Rule) {
			m := rs[0].Type.Alts[0].T
			if m.Kind != KindMap || len(m.Group.Choices) != 1 || len(m.Group.Choices[0]) != 3 {
				t.Fatalf("a.B = %+v", m)
			}
			y := m.Group.Choices[0][1]
			if y.Key.Name != "y" || !y.Occur.Optional() || y.Type.Alts[0].Ctl != "default" {
				t.Fatalf("y = %+v", y)
			}
			ext := rs[1].Group.Choices[0][0]
			if ext.Key.Kind != KeyType || !ext.Occur.Many() {
				t.Fatalf("Extensible = %+v", ext)
			}
		}},
		{"group choice", `C = ( a.X // b.Y // c.Z )`, func(t *testing.T, rs []*Rule) {
			if rs[0].Group == nil || len(rs[0].Group.Choices) != 3 {
				t.Fatalf("C = %+v", rs[0])
			}
		}},
		{"type choice in parentheses is a one-entry group", `V = ( A / B / { C } )`, func(t *testing.T, rs []*Rule) {
			g := rs[0].Group
			if g == nil || len(g.Choices) != 1 || len(g.Choices[0]) != 1 || len(g.Choices[0][0].Type.Alts) != 3 {
				t.Fatalf("V = %+v", rs[0])
			}
		}},
		{"parenthesised type with a control", `D = ("none" / "all") .default "none"`, func(t *testing.T, rs []*Rule) {
			if rs[0].Type == nil || rs[0].Type.Alts[0].Ctl != "default" || rs[0].Type.Alts[0].T.Kind != KindParen {
				t.Fatalf("D = %+v", rs[0])
			}
		}},
		{"ranges, arrays, occurrences, comments", "js-uint = 0..9007199254740991 ; max\nL = [+text]\nT = [1*4 float]\nF = -0.5...1e3", func(t *testing.T, rs []*Rule) {
			if r := rs[0].Type.Alts[0]; r.RangeOp != ".." || r.T.Number != "0" || r.Arg.Number != "9007199254740991" {
				t.Fatalf("js-uint = %+v", r)
			}
			if e := rs[1].Type.Alts[0].T.Group.Choices[0][0]; e.Occur != (Occurrence{1, -1}) {
				t.Fatalf("L = %+v", e)
			}
			if e := rs[2].Type.Alts[0].T.Group.Choices[0][0]; e.Occur != (Occurrence{1, 4}) {
				t.Fatalf("T = %+v", e)
			}
			if r := rs[3].Type.Alts[0]; r.RangeOp != "..." || r.T.Number != "-0.5" || r.Arg.Number != "1e3" {
				t.Fatalf("F = %+v", r)
			}
		}},
		{"inline group entry", `M = { ? ( a: text, b: text ), c: uint }`, func(t *testing.T, rs []*Rule) {
			e := rs[0].Type.Alts[0].T.Group.Choices[0][0]
			if e.Group == nil || !e.Occur.Optional() || len(e.Group.Choices[0]) != 2 {
				t.Fatalf("M = %+v", e)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, rs)
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"choice extension", `a /= b`, "not supported"},
		{"generic", `a = b<text>`, "expected a rule name"},
		{"socket-free unwrap", `a = ~b`, "unsupported"},
		{"unterminated map", `a = { b: text`, "unterminated group"},
		{"unterminated text", `a = "abc`, "unterminated text"},
		{"escape in text", `a = "a\"b"`, "escapes"},
		{"missing =", `a b`, `expected "="`},
		{"range of texts", `a = "x".."y"`, "a range needs"},
		{"bad occurrence", `a = [3*2 text]`, "maximum below its minimum"},
		{"deep nesting", "a = " + strings.Repeat("[", 100) + strings.Repeat("]", 100), "nesting deeper"},
		{"too large", strings.Repeat(" ", MaxInput+1), "over the"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.src)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse(%.40q) = %v, want an error containing %q", tt.src, err, tt.want)
			}
		})
	}
}

func TestCheckAndMerge(t *testing.T) {
	rs, err := Parse(`a = { b: c }`)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(rs); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "c") {
		t.Fatalf("Check = %v, want c undefined", err)
	}
	one, _ := Parse("x = text\ny = uint")
	same, _ := Parse("\n\nx = text")
	other, _ := Parse("x = uint")
	m, err := Merge(one, same)
	if err != nil || len(m) != 2 {
		t.Fatalf("Merge of equal definitions = %v, %v", m, err)
	}
	if _, err := Merge(one, other); err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Fatalf("Merge of different definitions = %v, want an error", err)
	}
}

// TestSpecFiles parses the committed WebDriver BiDi CDDL: every name is defined and the
// definitions both ends share agree.
func TestSpecFiles(t *testing.T) {
	var docs [][]*Rule
	for _, f := range []string{"remote", "local"} {
		b, err := os.ReadFile("../bidigen/webdriver-bidi/" + f + ".cddl")
		if err != nil {
			t.Fatal(err)
		}
		rs, err := Parse(string(b))
		if err != nil {
			t.Fatalf("%s.cddl: %v", f, err)
		}
		if err := Check(rs); err != nil {
			t.Fatalf("%s.cddl: %v", f, err)
		}
		if len(rs) < 200 {
			t.Fatalf("%s.cddl: %d rules, want the whole protocol", f, len(rs))
		}
		docs = append(docs, rs)
	}
	if _, err := Merge(docs...); err != nil {
		t.Fatal(err)
	}
}

// FuzzParse feeds the parser arbitrary text: it must return rules or an error, never panic or
// run away, and parse the same input to the same rules every time.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`a = { b: text, ? c: [* d] }`,
		`C = ( x.A // x.B )`,
		`V = ( A / B / { C } )`,
		`r = 0..255`,
		`D = ("none" / "all") .default "none"`,
		`E = (*text => any)`,
		`T = [1*4 float]`,
		`M = { ? ( a: text ), "k": -1.5e3 }`,
		"a = [[[[",
		"x = ; comment\n y",
	} {
		f.Add(s)
	}
	for _, p := range []string{"../bidigen/webdriver-bidi/remote.cddl", "../bidigen/webdriver-bidi/local.cddl"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, src string) {
		rs, err := Parse(src)
		if err != nil {
			return
		}
		_ = Check(rs)
		again, err := Parse(src)
		if err != nil || !reflect.DeepEqual(rs, again) {
			t.Fatalf("a second parse differs: %v", err)
		}
	})
}
