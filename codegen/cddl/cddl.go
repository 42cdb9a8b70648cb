// Package cddl parses the subset of CDDL (RFC 8610) that the WebDriver BiDi specification writes
// its protocol in: rules, type and group choices, maps, arrays, occurrence indicators, member keys
// (bareword, string and `=>` keys), ranges, literal values and control operators (kept, but only
// `.default` carries meaning downstream). Generic parameters, sockets (`$`, `$$`), `~`, `&` and
// `#` are refused with an error: the generator must not guess at what it does not understand.
//
// The parser is fed a third-party file, so it fails closed: a bounded input size, a bounded
// nesting depth, and an error (never a panic) for anything outside the subset.
package cddl

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// MaxInput is the largest document Parse accepts (the BiDi CDDL is about 60 kB).
const MaxInput = 4 << 20

// maxDepth bounds the nesting of groups and types, so hostile input cannot exhaust the stack.
const maxDepth = 64

// Rule is one `name = value` definition. Exactly one of Type and Group is set: Group when the
// right-hand side is a parenthesised group, Type otherwise.
type Rule struct {
	Name  string
	Type  *Type
	Group *Group
	Line  int
}

// Type is a type choice: Alts separated by `/`.
type Type struct {
	Alts []*Type1
}

// Type1 is a Type2 with an optional range (`..` inclusive, `...` exclusive) or control operator.
type Type1 struct {
	T       *Type2
	RangeOp string // "", "..", "..."
	Ctl     string // control operator without its dot: "default", "size", …; "" for none
	Arg     *Type2 // the range's upper bound or the control's argument
}

// Kind says which form a Type2 takes.
type Kind int

// The forms of Type2.
const (
	KindName   Kind = iota + 1 // a rule or prelude name: Name
	KindText                   // a text literal: Text
	KindNumber                 // a numeric literal: Number (its source spelling)
	KindParen                  // a parenthesised type: Inner
	KindMap                    // `{ group }`: Group
	KindArray                  // `[ group ]`: Group
)

// Type2 is one alternative of a type.
type Type2 struct {
	Kind   Kind
	Name   string
	Text   string
	Number string
	Inner  *Type
	Group  *Group
}

// Group is a group choice: Choices separated by `//`.
type Group struct {
	Choices [][]*Entry
}

// Entry is one group entry: an occurrence, then a member (Key with Type), an inline group, or a
// bare type (a group reference when it names a group rule, an element type in an array).
type Entry struct {
	Occur Occurrence
	// Key is the member's key: a bareword or a text literal (KeyName), or a type (KeyType, for
	// `type => value`). Nil when the entry has no key.
	Key   *Key
	Type  *Type  // the member's value, or the bare type; nil for an inline group
	Group *Group // an inline `( group )`; nil otherwise
}

// KeyKind tells a bareword or text key from a type key.
type KeyKind int

// The kinds of member key.
const (
	KeyName KeyKind = iota + 1 // `name:` or `"name":`
	KeyType                    // `type =>`
)

// Key is a member key.
type Key struct {
	Kind KeyKind
	Name string // for KeyName
	Type *Type  // for KeyType
}

// Occurrence is how many times an entry may occur: Min, and Max (-1 for unbounded).
type Occurrence struct {
	Min, Max int
}

// Optional reports whether the entry may be absent.
func (o Occurrence) Optional() bool { return o.Min == 0 }

// Many reports whether the entry may occur more than once.
func (o Occurrence) Many() bool { return o.Max != 1 }

var once = Occurrence{Min: 1, Max: 1}

// Error is a parse error with the line it was found on.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Parse reads a CDDL document into its rules, in source order (Merge joins documents and
// checks repeated names). `/=` and `//=` extensions are refused.
func Parse(src string) ([]*Rule, error) {
	if len(src) > MaxInput {
		return nil, fmt.Errorf("cddl: input of %d bytes is over the %d-byte limit", len(src), MaxInput)
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	var rules []*Rule
	for !p.at(tEOF) {
		r, err := p.rule()
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

type tokKind int

const (
	tEOF tokKind = iota
	tName
	tText
	tNumber
	tCtl    // `.name`
	tPunct  // one of = / // ( ) { } [ ] , : => ? * + .. ...
	tBadTok // unsupported punctuation, reported by the parser with its line
)

type token struct {
	kind tokKind
	val  string
	line int
}

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '@' || c == '_' || c == '$'
}

func isNameChar(c byte) bool {
	return isNameStart(c) || c >= '0' && c <= '9' || c == '-' || c == '.'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func lex(src string) ([]token, error) {
	var toks []token
	line := 1
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == ';':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\n' || src[j] == '\\' {
					return nil, &Error{line, "text literals with escapes or line breaks are not supported"}
				}
				j++
			}
			if j >= len(src) {
				return nil, &Error{line, "unterminated text literal"}
			}
			toks = append(toks, token{tText, src[i+1 : j], line})
			i = j + 1
		case isNameStart(c):
			j := i + 1
			for j < len(src) && isNameChar(src[j]) {
				j++
			}
			// A name never ends in '-' or '.', so `a..b` stays a range.
			for j > i+1 && (src[j-1] == '.' || src[j-1] == '-') {
				j--
			}
			if strings.Contains(src[i:j], "..") {
				j = i + strings.Index(src[i:j], "..")
			}
			toks = append(toks, token{tName, src[i:j], line})
			i = j
		case isDigit(c) || c == '-' && i+1 < len(src) && isDigit(src[i+1]):
			j := i + 1
			for j < len(src) && isDigit(src[j]) {
				j++
			}
			if j+1 < len(src) && src[j] == '.' && isDigit(src[j+1]) {
				j++
				for j < len(src) && isDigit(src[j]) {
					j++
				}
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && isDigit(src[k]) {
					for k < len(src) && isDigit(src[k]) {
						k++
					}
					j = k
				}
			}
			toks = append(toks, token{tNumber, src[i:j], line})
			i = j
		case c == '.':
			switch {
			case strings.HasPrefix(src[i:], "..."):
				toks = append(toks, token{tPunct, "...", line})
				i += 3
			case strings.HasPrefix(src[i:], ".."):
				toks = append(toks, token{tPunct, "..", line})
				i += 2
			case i+1 < len(src) && isNameStart(src[i+1]):
				j := i + 1
				for j < len(src) && (isNameChar(src[j]) && src[j] != '.') {
					j++
				}
				toks = append(toks, token{tCtl, src[i+1 : j], line})
				i = j
			default:
				return nil, &Error{line, "stray '.'"}
			}
		case strings.HasPrefix(src[i:], "//"):
			toks = append(toks, token{tPunct, "//", line})
			i += 2
		case strings.HasPrefix(src[i:], "=>"):
			toks = append(toks, token{tPunct, "=>", line})
			i += 2
		case strings.ContainsRune("=/(){}[],:?*+", rune(c)):
			toks = append(toks, token{tPunct, string(c), line})
			i++
		default:
			toks = append(toks, token{tBadTok, string(c), line})
			i++
		}
	}
	return append(toks, token{tEOF, "", line}), nil
}

type parser struct {
	toks  []token
	pos   int
	depth int
}

func (p *parser) peek() token        { return p.toks[p.pos] }
func (p *parser) peekAt(n int) token { return p.toks[min(p.pos+n, len(p.toks)-1)] }
func (p *parser) at(k tokKind) bool  { return p.peek().kind == k }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func (p *parser) isPunct(v string) bool {
	t := p.peek()
	return t.kind == tPunct && t.val == v
}

func (p *parser) errf(format string, args ...any) error {
	t := p.peek()
	what := strconv.Quote(t.val)
	if t.kind == tEOF {
		what = "end of input"
	}
	return &Error{t.line, fmt.Sprintf(format, args...) + " (at " + what + ")"}
}

func (p *parser) expect(v string) error {
	if !p.isPunct(v) {
		return p.errf("expected %q", v)
	}
	p.next()
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxDepth {
		return p.errf("nesting deeper than %d", maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) rule() (*Rule, error) {
	t := p.peek()
	if t.kind != tName {
		return nil, p.errf("expected a rule name")
	}
	p.next()
	if p.isPunct("/") || p.isPunct("//") {
		return nil, p.errf("choice extensions (/= and //=) are not supported")
	}
	if err := p.expect("="); err != nil {
		return nil, err
	}
	r := &Rule{Name: t.val, Line: t.line}
	if p.isPunct("(") && p.groupFollows() {
		p.next()
		g, err := p.group(")")
		if err != nil {
			return nil, err
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		r.Group = g
		return r, nil
	}
	ty, err := p.typ()
	if err != nil {
		return nil, err
	}
	r.Type = ty
	return r, nil
}

// groupFollows reports whether the `(` at the cursor opens a rule's group rather than a
// parenthesised type followed by more type syntax (`( a / b ) .default x`): it looks at what
// follows the matching `)`.
func (p *parser) groupFollows() bool {
	end, _ := p.scanParens()
	if end < 0 {
		return true
	}
	after := p.toks[min(end+1, len(p.toks)-1)]
	return !(after.kind == tCtl || after.kind == tPunct && (after.val == "/" || after.val == ".." || after.val == "..."))
}

// scanParens scans from the bracket at the cursor to its match. It returns the match's index
// (-1 when the input ends first) and whether a member key (`:`, `=>`), a group choice or a comma
// stands at the first level inside.
func (p *parser) scanParens() (end int, groupSyntax bool) {
	depth := 0
	for i := p.pos; i < len(p.toks); i++ {
		t := p.toks[i]
		if t.kind == tEOF {
			return -1, groupSyntax
		}
		if t.kind != tPunct {
			continue
		}
		switch t.val {
		case "(", "{", "[":
			depth++
		case ")", "}", "]":
			depth--
			if depth == 0 {
				return i, groupSyntax
			}
		case ":", "=>", "//", ",":
			groupSyntax = groupSyntax || depth == 1
		}
	}
	return -1, groupSyntax
}

func (p *parser) group(closer string) (*Group, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	g := &Group{}
	var cur []*Entry
	for {
		switch {
		case p.isPunct(closer):
			g.Choices = append(g.Choices, cur)
			return g, nil
		case p.isPunct("//"):
			p.next()
			g.Choices = append(g.Choices, cur)
			cur = nil
			continue
		case p.at(tEOF):
			return nil, p.errf("unterminated group, expected %q", closer)
		}
		e, err := p.entry()
		if err != nil {
			return nil, err
		}
		cur = append(cur, e)
		if p.isPunct(",") {
			p.next()
		}
	}
}

func (p *parser) occurrence() (Occurrence, error) {
	switch {
	case p.isPunct("?"):
		p.next()
		return Occurrence{0, 1}, nil
	case p.isPunct("+"):
		p.next()
		return Occurrence{1, -1}, nil
	case p.isPunct("*"):
		p.next()
		o := Occurrence{0, -1}
		if p.at(tNumber) {
			n, err := p.count()
			if err != nil {
				return o, err
			}
			o.Max = n
		}
		return o, nil
	case p.at(tNumber) && p.peekAt(1).kind == tPunct && p.peekAt(1).val == "*":
		n, err := p.count()
		if err != nil {
			return once, err
		}
		p.next() // '*'
		o := Occurrence{n, -1}
		if p.at(tNumber) {
			m, err := p.count()
			if err != nil {
				return o, err
			}
			if m < n {
				return o, p.errf("occurrence %d*%d has its maximum below its minimum", n, m)
			}
			o.Max = m
		}
		return o, nil
	}
	return once, nil
}

func (p *parser) count() (int, error) {
	t := p.peek()
	n, err := strconv.Atoi(t.val)
	if err != nil || n < 0 || n > 1<<20 {
		return 0, p.errf("bad occurrence count")
	}
	p.next()
	return n, nil
}

func (p *parser) entry() (*Entry, error) {
	occ, err := p.occurrence()
	if err != nil {
		return nil, err
	}
	e := &Entry{Occur: occ}
	t, t1 := p.peek(), p.peekAt(1)
	if (t.kind == tName || t.kind == tText) && t1.kind == tPunct && t1.val == ":" {
		p.next()
		p.next()
		e.Key = &Key{Kind: KeyName, Name: t.val}
		if e.Type, err = p.typ(); err != nil {
			return nil, err
		}
		return e, nil
	}
	if p.isPunct("(") && p.inlineGroup() {
		p.next()
		if e.Group, err = p.group(")"); err != nil {
			return nil, err
		}
		return e, p.expect(")")
	}
	ty, err := p.typ()
	if err != nil {
		return nil, err
	}
	if p.isPunct("=>") {
		p.next()
		e.Key = &Key{Kind: KeyType, Type: ty}
		if e.Type, err = p.typ(); err != nil {
			return nil, err
		}
		return e, nil
	}
	e.Type = ty
	return e, nil
}

// inlineGroup reports whether the `(` at the cursor opens an inline group: its content holds a
// member key (`:` or `=>`), a group choice or a comma at its own level.
func (p *parser) inlineGroup() bool {
	end, groupSyntax := p.scanParens()
	return end >= 0 && groupSyntax
}

func (p *parser) typ() (*Type, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := &Type{}
	for {
		t1, err := p.type1()
		if err != nil {
			return nil, err
		}
		t.Alts = append(t.Alts, t1)
		if !p.isPunct("/") {
			return t, nil
		}
		p.next()
	}
}

func (p *parser) type1() (*Type1, error) {
	t2, err := p.type2()
	if err != nil {
		return nil, err
	}
	t1 := &Type1{T: t2}
	switch {
	case p.isPunct("..") || p.isPunct("..."):
		t1.RangeOp = p.next().val
		if t1.Arg, err = p.type2(); err != nil {
			return nil, err
		}
		if !rangeBound(t2) || !rangeBound(t1.Arg) {
			return nil, p.errf("a range needs numbers or names at both ends")
		}
	case p.at(tCtl):
		t1.Ctl = p.next().val
		if t1.Arg, err = p.type2(); err != nil {
			return nil, err
		}
	}
	return t1, nil
}

func rangeBound(t *Type2) bool { return t.Kind == KindNumber || t.Kind == KindName }

func (p *parser) type2() (*Type2, error) {
	t := p.peek()
	switch t.kind {
	case tName:
		p.next()
		return &Type2{Kind: KindName, Name: t.val}, nil
	case tText:
		p.next()
		return &Type2{Kind: KindText, Text: t.val}, nil
	case tNumber:
		p.next()
		return &Type2{Kind: KindNumber, Number: t.val}, nil
	case tPunct:
		switch t.val {
		case "(":
			p.next()
			inner, err := p.typ()
			if err != nil {
				return nil, err
			}
			return &Type2{Kind: KindParen, Inner: inner}, p.expect(")")
		case "{", "[":
			p.next()
			closer := map[string]string{"{": "}", "[": "]"}[t.val]
			g, err := p.group(closer)
			if err != nil {
				return nil, err
			}
			kind := KindMap
			if t.val == "[" {
				kind = KindArray
			}
			return &Type2{Kind: kind, Group: g}, p.expect(closer)
		}
	default: // the end of input and tokens that cannot start a type: refused below
	}
	if t.kind == tEOF {
		return nil, p.errf("expected a type")
	}
	return nil, p.errf("unsupported or unexpected token where a type was expected")
}

// ErrUnknown is wrapped by Check for a name that no rule defines and the prelude does not know.
var ErrUnknown = errors.New("undefined name")

// Prelude lists the prelude names (RFC 8610 appendix D) that Check accepts without a rule.
var Prelude = map[string]bool{
	"any": true, "bool": true, "true": true, "false": true, "nil": true, "null": true,
	"uint": true, "nint": true, "int": true, "float": true, "float16": true, "float32": true,
	"float64": true, "number": true, "text": true, "tstr": true, "bstr": true, "bytes": true,
	"undefined": true,
}

// Check reports the first name that neither a rule in rules nor the prelude defines.
func Check(rules []*Rule) error {
	defined := map[string]bool{}
	for _, r := range rules {
		defined[r.Name] = true
	}
	var err error
	visit := func(name string, line int) {
		if err == nil && !defined[name] && !Prelude[name] {
			err = fmt.Errorf("line %d: %w: %s", line, ErrUnknown, name)
		}
	}
	for _, r := range rules {
		walkRule(r, func(n string) { visit(n, r.Line) })
	}
	return err
}

func walkRule(r *Rule, f func(string)) {
	if r.Type != nil {
		walkType(r.Type, f)
	}
	if r.Group != nil {
		walkGroup(r.Group, f)
	}
}

func walkType(t *Type, f func(string)) {
	for _, a := range t.Alts {
		walkType2(a.T, f)
		if a.Arg != nil && a.RangeOp != "" {
			walkType2(a.Arg, f)
		}
	}
}

func walkType2(t *Type2, f func(string)) {
	switch t.Kind {
	case KindName:
		f(t.Name)
	case KindParen:
		walkType(t.Inner, f)
	case KindMap, KindArray:
		walkGroup(t.Group, f)
	default: // literals name nothing
	}
}

func walkGroup(g *Group, f func(string)) {
	for _, c := range g.Choices {
		for _, e := range c {
			if e.Key != nil && e.Key.Kind == KeyType {
				walkType(e.Key.Type, f)
			}
			if e.Type != nil {
				walkType(e.Type, f)
			}
			if e.Group != nil {
				walkGroup(e.Group, f)
			}
		}
	}
}

// Merge joins the rules of several documents by name. A name defined more than once must have
// the same definition each time (the BiDi spec repeats the definitions both ends share);
// anything else is an error rather than a silent pick.
func Merge(docs ...[]*Rule) (map[string]*Rule, error) {
	out := map[string]*Rule{}
	for _, rules := range docs {
		for _, r := range rules {
			prev, ok := out[r.Name]
			if !ok {
				out[r.Name] = r
				continue
			}
			if !sameRule(prev, r) {
				return nil, fmt.Errorf("cddl: %s is defined twice, differently (lines %d and %d)", r.Name, prev.Line, r.Line)
			}
		}
	}
	return out, nil
}

func sameRule(a, b *Rule) bool {
	ca, cb := *a, *b
	ca.Line, cb.Line = 0, 0
	return reflect.DeepEqual(ca, cb)
}
