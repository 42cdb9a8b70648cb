package historychain

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// canonParser writes the canonical form of one JSON value straight from its bytes: every event a
// command appends passes here, so it decodes nothing into interfaces or maps. Its output is the
// one CanonicalJSON documents (FuzzCanonicalMatchesReference holds it to the decoder-based
// reference).
type canonParser struct {
	in []byte
	i  int
}

var errCanon = errors.New("canonical JSON: not a JSON value")

func (p *canonParser) ws() {
	for p.i < len(p.in) {
		switch p.in[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// member is one object member: its decoded key and its canonical value's span in the scratch
// buffer.
type member struct {
	key        string
	start, end int
}

func (p *canonParser) value(out *bytes.Buffer, depth int) error {
	if depth > maxDepth {
		return errors.New("canonical JSON: nested too deeply")
	}
	p.ws()
	if p.i >= len(p.in) {
		return errCanon
	}
	switch c := p.in[p.i]; {
	case c == '{':
		return p.object(out, depth)
	case c == '[':
		p.i++
		out.WriteByte('[')
		p.ws()
		if p.i < len(p.in) && p.in[p.i] == ']' {
			p.i++
			out.WriteByte(']')
			return nil
		}
		for n := 0; ; n++ {
			if n > 0 {
				out.WriteByte(',')
			}
			if err := p.value(out, depth+1); err != nil {
				return err
			}
			p.ws()
			if p.i >= len(p.in) {
				return errCanon
			}
			if p.in[p.i] == ']' {
				p.i++
				out.WriteByte(']')
				return nil
			}
			if p.in[p.i] != ',' {
				return errCanon
			}
			p.i++
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return err
		}
		writeString(out, s)
		return nil
	case c == 't':
		return p.literal(out, "true")
	case c == 'f':
		return p.literal(out, "false")
	case c == 'n':
		return p.literal(out, "null")
	case c == '-' || c >= '0' && c <= '9':
		return p.number(out)
	}
	return errCanon
}

func (p *canonParser) literal(out *bytes.Buffer, lit string) error {
	if !bytes.HasPrefix(p.in[p.i:], []byte(lit)) {
		return errCanon
	}
	p.i += len(lit)
	out.WriteString(lit)
	return nil
}

// object writes an object's members sorted by key; of duplicate keys the last one counts.
func (p *canonParser) object(out *bytes.Buffer, depth int) error {
	p.i++ // '{'
	var scratch bytes.Buffer
	var members []member
	p.ws()
	if p.i < len(p.in) && p.in[p.i] == '}' {
		p.i++
		out.WriteString("{}")
		return nil
	}
	for {
		p.ws()
		if p.i >= len(p.in) || p.in[p.i] != '"' {
			return errCanon
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		p.ws()
		if p.i >= len(p.in) || p.in[p.i] != ':' {
			return errCanon
		}
		p.i++
		start := scratch.Len()
		if err := p.value(&scratch, depth+1); err != nil {
			return err
		}
		members = append(members, member{key, start, scratch.Len()})
		p.ws()
		if p.i >= len(p.in) {
			return errCanon
		}
		if p.in[p.i] == '}' {
			p.i++
			break
		}
		if p.in[p.i] != ',' {
			return errCanon
		}
		p.i++
	}
	slices.SortStableFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	raw := scratch.Bytes()
	out.WriteByte('{')
	first := true
	for i, m := range members {
		if i+1 < len(members) && members[i+1].key == m.key {
			continue // a later duplicate wins
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		writeString(out, m.key)
		out.WriteByte(':')
		out.Write(raw[m.start:m.end])
	}
	out.WriteByte('}')
	return nil
}

// number writes a number literal (JSON's grammar, checked) in its canonical spelling.
func (p *canonParser) number(out *bytes.Buffer) error {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.in) && p.in[p.i] >= '0' && p.in[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.in[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.in) && p.in[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return errCanon
	}
	if p.i < len(p.in) && p.in[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return errCanon
		}
	}
	if p.i < len(p.in) && (p.in[p.i] == 'e' || p.in[p.i] == 'E') {
		p.i++
		if p.i < len(p.in) && (p.in[p.i] == '+' || p.in[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return errCanon
		}
	}
	n, err := canonicalNumber(string(p.in[start:p.i]))
	if err != nil {
		return err
	}
	out.WriteString(n)
	return nil
}

// str reads a string literal and returns its value, decoded as encoding/json decodes it: invalid
// UTF-8 and lone surrogates become U+FFFD; a raw control character is an error.
func (p *canonParser) str() (string, error) {
	p.i++ // '"'
	start := p.i
	// The common case: no escape and plain ASCII or valid UTF-8, returned as it is.
	for p.i < len(p.in) {
		c := p.in[p.i]
		if c == '"' {
			s := p.in[start:p.i]
			p.i++
			if utf8.Valid(s) {
				return string(s), nil
			}
			p.i = start
			break
		}
		if c == '\\' || c < 0x20 {
			p.i = start
			break
		}
		p.i++
	}
	var b strings.Builder
	for p.i < len(p.in) {
		c := p.in[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), nil
		case c < 0x20:
			return "", errCanon
		case c == '\\':
			if p.i+1 >= len(p.in) {
				return "", errCanon
			}
			e := p.in[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", errCanon
				}
				if utf16.IsSurrogate(r) {
					if p.i+1 < len(p.in) && p.in[p.i] == '\\' && p.in[p.i+1] == 'u' {
						save := p.i
						p.i += 2
						r2, ok := p.hex4()
						if !ok {
							return "", errCanon
						}
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							b.WriteRune(dec)
							continue
						}
						p.i = save // not a pair: the second escape is read on its own
					}
					r = utf8.RuneError
				}
				b.WriteRune(r)
			default:
				return "", errCanon
			}
		default:
			r, size := utf8.DecodeRune(p.in[p.i:])
			p.i += size
			b.WriteRune(r) // RuneError for an invalid byte, as encoding/json
		}
	}
	return "", errCanon
}

func (p *canonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.in) {
		return 0, false
	}
	var r rune
	for _, c := range p.in[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// canonical is CanonicalJSON's parser entry point.
func canonical(raw []byte) ([]byte, error) {
	p := canonParser{in: raw}
	var out bytes.Buffer
	out.Grow(len(raw))
	if err := p.value(&out, 0); err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	p.ws()
	if p.i != len(p.in) {
		return nil, errors.New("canonical JSON: trailing data after the value")
	}
	return out.Bytes(), nil
}
