package warcrecord

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// shortForm is the length under which a protected form is masked only where it stands alone
// (no ASCII letter or digit on either side): a three-digit PIN masked everywhere would mask every
// "123" of every page; masked at token boundaries it still is wherever a form or JSON field
// carries it.
const shortForm = 8

// Protected is the set of values an archive must never hold: the secrets and fill values of a
// task, each with a name that the mask shows instead ("protected" for a plain fill value, the
// secret's name for a secret). It lives in memory only and keeps every value it is given (none
// is ever dropped: a value masked no more would reach the archive). Safe for concurrent use; a Protected is
// shared by every recorder of one task, so that a value typed in one session is masked in
// another's traffic too.
type Protected struct {
	mu   sync.RWMutex
	seen map[string]bool // value → added (values are never kept elsewhere)
	pats []pattern
	gen  uint64 // counts the Adds that changed pats
}

// pattern is one form of a protected value (raw, percent-encoded, JSON- or HTML-escaped,
// base64) and the name its mask shows.
type pattern struct {
	form  []byte
	name  string
	short bool // masked only at token boundaries (len(form) < shortForm)
}

// NewProtected returns an empty set.
func NewProtected() *Protected { return &Protected{seen: make(map[string]bool)} }

// Add protects value under name (a secret's name, or "protected"). An empty value adds nothing.
// The name must be a token (letters, digits, '.', '_', '-'); anything else is shown as
// "protected".
func (p *Protected) Add(name, value string) {
	if value == "" {
		return
	}
	if !validName(name) {
		name = "protected"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[value] {
		return
	}
	p.seen[value] = true
	// A new slice each time: maskers read the one they were given while this runs.
	pats := slices.Clone(p.pats)
	for _, f := range forms(value) {
		pats = append(pats, pattern{form: []byte(f), name: name, short: len(f) < shortForm})
	}
	// Longest first: where two forms match at one place, the longer one is masked whole.
	slices.SortStableFunc(pats, func(a, b pattern) int { return len(b.form) - len(a.form) })
	p.pats = pats
	p.gen++
}

// patterns is the current set (the caller must not change it).
func (p *Protected) patterns() []pattern {
	pats, _ := p.current()
	return pats
}

// current is the current set and its generation.
func (p *Protected) current() ([]pattern, uint64) {
	if p == nil {
		return nil, 0
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.pats, p.gen
}

func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// forms are the ways a value travels in HTTP: as it is, form- and URL-encoded (space as '+' and
// as %20, the escapes of Go, of browsers' form encoding and of encodeURIComponent, upper- and
// lower-case hex), JSON- and HTML-escaped, and base64 (standard and URL alphabets, with and
// without padding). Deduplicated.
func forms(v string) []string {
	out := []string{v}
	for _, enc := range []string{url.QueryEscape(v), formEncode(v, "*-._"), formEncode(v, "-_.!~*'()")} {
		out = append(out, enc, strings.ReplaceAll(enc, "+", "%20"))
	}
	for _, f := range slices.Clone(out[1:]) {
		out = append(out, lowerHex(f))
	}
	var js bytes.Buffer
	e := json.NewEncoder(&js)
	_ = e.Encode(v) // Go's escaping (<, >, & as \u00XX)
	out = append(out, strings.Trim(strings.TrimSpace(js.String()), `"`))
	js.Reset()
	e.SetEscapeHTML(false) // as JSON.stringify writes it
	_ = e.Encode(v)
	out = append(out, strings.Trim(strings.TrimSpace(js.String()), `"`))
	out = append(out, html.EscapeString(v))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		out = append(out, enc.EncodeToString([]byte(v)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// formEncode percent-encodes every byte but ASCII letters, digits and keep, with space as '+'
// (application/x-www-form-urlencoded as a browser writes it, when keep is "*-._").
func formEncode(v, keep string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte(keep, c) >= 0:
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// lowerHex writes the hex digits of every %XX escape in lower case.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = bytes.ToLower(b[i+1 : i+2])[0], bytes.ToLower(b[i+2 : i+3])[0]
		}
	}
	return string(b)
}

// maskText is what stands for a protected value in the archive: its name, never the value or
// anything derived from it.
func maskText(name string) []byte { return []byte("[masked:" + name + "]") }

// masker copies bytes to w with every protected form replaced by its mask. It streams: it holds
// back only as many bytes as the longest form (plus one, to see the boundary after a short form),
// so that a form split across writes is still found. With a source, it takes the values added
// while it runs from its next write on (a value is protected before it is typed, so no byte
// passed on earlier can hold it: a long poll's response that echoes it later is masked). It
// records the names it masked.
type masker struct {
	w      io.Writer
	src    *Protected // nil: pats is fixed
	gen    uint64
	pats   []pattern
	maxLen int
	buf    []byte
	prev   byte // the last byte passed on (0 before any)
	masked map[string]bool
}

func newMasker(w io.Writer, pats []pattern) *masker {
	m := &masker{w: w}
	m.use(pats)
	return m
}

// newFollowingMasker is a masker over src's values, as they are now and as they grow.
func newFollowingMasker(w io.Writer, src *Protected) *masker {
	m := &masker{w: w, src: src}
	pats, gen := src.current()
	m.gen = gen
	m.use(pats)
	return m
}

func (m *masker) use(pats []pattern) {
	m.pats, m.maxLen = pats, 0
	for _, p := range pats {
		m.maxLen = max(m.maxLen, len(p.form))
	}
}

// Write takes p; what it passes on may lag by maxLen bytes until close.
func (m *masker) Write(p []byte) (int, error) {
	if m.src != nil {
		if pats, gen := m.src.current(); gen != m.gen {
			m.gen = gen
			m.use(pats)
		}
	}
	if len(m.pats) == 0 && len(m.buf) == 0 {
		return m.w.Write(p)
	}
	m.buf = append(m.buf, p...)
	if err := m.run(false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// close passes on what is held back.
func (m *masker) close() error {
	if len(m.buf) == 0 {
		return nil
	}
	return m.run(true)
}

func (m *masker) run(final bool) error {
	for {
		safe := len(m.buf) - m.maxLen // a form starting before safe lies whole in buf, with a byte after it
		if final {
			safe = len(m.buf)
		}
		at, p := m.find(final)
		if p != nil && at < safe {
			if err := m.emit(m.buf[:at]); err != nil {
				return err
			}
			if _, err := m.w.Write(maskText(p.name)); err != nil {
				return err
			}
			if m.masked == nil {
				m.masked = make(map[string]bool)
			}
			m.masked[p.name] = true
			m.prev = p.form[len(p.form)-1]
			m.buf = m.buf[at+len(p.form):]
			continue
		}
		if safe > 0 {
			if err := m.emit(m.buf[:safe]); err != nil {
				return err
			}
			m.buf = append(m.buf[:0], m.buf[safe:]...)
		}
		return nil
	}
}

func (m *masker) emit(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	m.prev = b[len(b)-1]
	_, err := m.w.Write(b)
	return err
}

// find is the leftmost occurrence of a form in buf (the longest at one position), a short form
// only where it stands alone. A short form ending at buf's end counts only when final (the byte
// after it is unknown yet).
func (m *masker) find(final bool) (int, *pattern) {
	best, bestAt := -1, -1
	for i := range m.pats {
		p := &m.pats[i]
		from := 0
		for from <= len(m.buf) {
			j := bytes.Index(m.buf[from:], p.form)
			if j < 0 {
				break
			}
			at := from + j
			if bestAt >= 0 && at > bestAt {
				break
			}
			if !p.short || m.alone(at, len(p.form), final) {
				if bestAt < 0 || at < bestAt || (at == bestAt && len(p.form) > len(m.pats[best].form)) {
					best, bestAt = i, at
				}
				break
			}
			from = at + 1
		}
	}
	if best < 0 {
		return -1, nil
	}
	return bestAt, &m.pats[best]
}

// alone tells whether buf[at:at+n] has no ASCII letter or digit on either side.
func (m *masker) alone(at, n int, final bool) bool {
	before := m.prev
	if at > 0 {
		before = m.buf[at-1]
	}
	if isAlnum(before) {
		return false
	}
	if at+n == len(m.buf) {
		return final
	}
	return !isAlnum(m.buf[at+n])
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// maskString masks s whole, and adds the names it masked to names.
func maskString(s string, pats []pattern, names map[string]bool) string {
	if len(pats) == 0 {
		return s
	}
	var b bytes.Buffer
	m := newMasker(&b, pats)
	_, _ = m.Write([]byte(s))
	_ = m.close()
	for n := range m.masked {
		names[n] = true
	}
	return b.String()
}
