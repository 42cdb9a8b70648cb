// Package pagekit is what both browser adapters (CDP in package browser, WebDriver BiDi in package
// firefox) share and no engine defines: the page agent (agent.js) they run in an isolated world or
// sandboxed realm of each document, the agent's records turned into page.Node, and the minting of
// node handles (nd_…). It imports only page and the standard library, so neither adapter leans on
// the other and both hand out the same snapshot shape and handles (issue #19).
package pagekit

import (
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/originweave/bap/server/internal/page"
)

// AgentJS is the page agent: a fixed script that defines globalThis.__bap in the realm it runs in
// (never the page's own). Observe, query, actionability checks and extraction call it.
//
//go:embed agent.js
var AgentJS string

// AgentCall formats globalThis.__bap.fn(args…) with the arguments as JSON literals, never as code.
func AgentCall(fn string, args ...any) string {
	var b strings.Builder
	b.WriteString("globalThis.__bap.")
	b.WriteString(fn)
	b.WriteByte('(')
	for i, a := range args {
		if i > 0 {
			b.WriteByte(',')
		}
		j, _ := json.Marshal(a)
		b.Write(j)
	}
	b.WriteByte(')')
	return b.String()
}

// Minter mints node handles: nd_ and 8 characters, because a snapshot carries thousands of them.
// The 40-bit body is a keyed permutation (a Feistel network with a random key per minter, that is
// per session) of a counter, so a handle is never reused within a session, looks random, and tells
// nothing about the page. A Minter is not safe for concurrent use (its session's lock guards it).
type Minter struct {
	keys [4]uint32
	next uint64
}

// NewMinter is a minter with a fresh random key and a random start.
func NewMinter() Minter {
	var m Minter
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	for i := range m.keys {
		m.keys[i] = binary.LittleEndian.Uint32(b[i*4:])
	}
	m.next = uint64(binary.LittleEndian.Uint16(b[:2]))
	return m
}

const handleBits = 40

// permute maps the counter bijectively onto handleBits bits.
func (m *Minter) permute(n uint64) uint64 {
	const half = handleBits / 2
	const mask = 1<<half - 1
	l, rr := uint32(n>>half)&mask, uint32(n)&mask
	for _, k := range m.keys {
		f := rr*0x9E3779B1 ^ k
		f ^= f >> 15
		f *= 0x85EBCA77
		f ^= f >> 13
		l, rr = rr, (l^f)&mask
	}
	return uint64(l)<<half | uint64(rr)
}

const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// Next returns a handle the minter has not returned before.
func (m *Minter) Next() string {
	v := m.permute(m.next)
	m.next++
	if m.next >= 1<<handleBits {
		m.next = 0 // 10^12 handles later; never reached in one session
	}
	var buf [11]byte
	copy(buf[:], "nd_")
	for i := 10; i >= 3; i-- {
		buf[i] = crockford[v&31]
		v >>= 5
	}
	return string(buf[:])
}

// Record is the agent's compact record of one element (see agent.js's snapshot).
type Record struct {
	I  int      `json:"i"`
	R  string   `json:"r"`
	N  string   `json:"n"`
	V  string   `json:"v"`
	X  string   `json:"x"`
	U  string   `json:"u"`
	P  string   `json:"p"`
	Ty string   `json:"ty"`
	O  []string `json:"o"`
	C  []Record `json:"c"`
	Ch *int     `json:"ch"`
	Pr *int     `json:"pr"`
	D  int      `json:"d"`
	E  *int     `json:"e"`
	F  int      `json:"f"`
	Q  int      `json:"q"`
	Ro int      `json:"ro"`
	S  *int     `json:"s"`
	L  int      `json:"l"`
	Fr int      `json:"fr"`
	De string   `json:"de"`
	Sc float64  `json:"sc"`
}

// Nodes turns agent records into nodes: handle(i) names the element of agent index i (records
// with index 0 get none), and frames holds, by the agent index of an iframe element, the nodes of
// the document inside it.
func Nodes(rs []Record, handle func(idx int) string, frames map[int][]page.Node) []page.Node {
	if len(rs) == 0 {
		return nil
	}
	out := make([]page.Node, len(rs))
	for i := range rs {
		r := &rs[i]
		n := &out[i]
		n.Role = r.R
		n.Name = r.N
		n.Value = r.V
		n.URL = r.U
		n.Placeholder = r.P
		n.InputType = r.Ty
		n.Options = r.O
		n.Description = r.De
		n.Level = r.L
		if r.I != 0 {
			n.NodeID = handle(r.I)
		}
		if r.Ch != nil {
			switch *r.Ch {
			case 2:
				n.Mixed = true
			default:
				n.Checked = ptr(*r.Ch == 1)
			}
		}
		if r.Pr != nil && n.Checked == nil {
			// A toggle button's aria-pressed (page.Node has no pressed field).
			n.Checked = ptr(*r.Pr != 0)
		}
		if r.D != 0 {
			n.Disabled = ptr(true)
		}
		if r.E != nil {
			n.Expanded = ptr(*r.E == 1)
		}
		if r.F != 0 {
			n.Focused = ptr(true)
		}
		if r.Q != 0 {
			n.Required = ptr(true)
		}
		if r.Ro != 0 {
			n.ReadOnly = ptr(true)
		}
		if r.S != nil {
			n.Selected = ptr(*r.S == 1)
		}
		switch {
		case r.Fr != 0:
			n.Children = frames[r.I]
		case len(r.C) > 0:
			n.Children = Nodes(r.C, handle, frames)
		case r.X != "":
			n.Children = []page.Node{{Role: "text", Name: r.X}}
		}
	}
	return out
}

// TrimNodes keeps the first limit nodes in document order; n counts the nodes kept so far.
func TrimNodes(ns []page.Node, limit int, n *int, truncated bool) ([]page.Node, bool) {
	for i := range ns {
		if *n >= limit {
			return ns[:i], true
		}
		*n++
		if len(ns[i].Children) > 0 {
			var tr bool
			ns[i].Children, tr = TrimNodes(ns[i].Children, limit, n, false)
			truncated = truncated || tr
		}
	}
	return ns, truncated
}

func ptr[T any](v T) *T { return &v }

// ObservationID is a fresh observation id (ob_ and 10 random characters).
func ObservationID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	buf := []byte("ob_")
	for _, c := range b {
		buf = append(buf, crockford[c&31])
	}
	return string(buf)
}

// RedactURL returns u without userinfo, query and fragment, for events and errors (a query string
// may carry secrets), cut to 500 bytes on a rune boundary
// (and an ellipsis).
func RedactURL(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	if i := strings.Index(u, "://"); i >= 0 {
		rest := u[i+3:]
		slash := strings.IndexByte(rest, '/')
		host := rest
		if slash >= 0 {
			host = rest[:slash]
		}
		if at := strings.LastIndexByte(host, '@'); at >= 0 {
			u = u[:i+3] + rest[at+1:]
		}
	}
	return Clip(u, 500)
}

// Clip cuts s to n bytes on a rune boundary, with an ellipsis when it cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// QueryArgs is the page agent's query (agent.js's query).
type QueryArgs struct {
	Role        string `json:"role,omitempty"`
	Name        string `json:"name,omitempty"`
	Text        string `json:"text,omitempty"`
	Label       string `json:"label,omitempty"`
	Placeholder string `json:"placeholder,omitempty"`
	TestID      string `json:"testId,omitempty"`
	Exact       bool   `json:"exact,omitempty"`
	Within      int    `json:"within,omitempty"` // the agent index of the within node (0: the document)
	Limit       int    `json:"limit,omitempty"`
}

// NewQueryArgs is the agent's query for q, at most limit matches.
func NewQueryArgs(q page.Query, limit int) QueryArgs {
	return QueryArgs{Role: strings.ToLower(strings.TrimSpace(q.Role)), Name: q.Name, Text: q.Text, Label: q.Label,
		Placeholder: q.Placeholder, TestID: q.TestID, Exact: q.Exact, Limit: limit}
}

// ValidQuery refuses a query that names nothing to match.
func ValidQuery(q page.Query) error {
	if q.Role == "" && q.Name == "" && q.Text == "" && q.Label == "" && q.Placeholder == "" && q.TestID == "" {
		return fmt.Errorf("%w: a query needs at least one of role, name, text, label, placeholder, test_id", page.ErrInvalidRequest)
	}
	return nil
}

// SecretOriginAllowed reports whether a secret of origins may be typed into a document of origin
// (exact, as the browser reports it; a document without an origin gets none).
func SecretOriginAllowed(origin string, origins []string) bool {
	return origin != "" && slices.Contains(origins, origin)
}

// SafeFileName is a file name a page or a client gave (an upload's, a download's) made safe to
// create in a directory of ours: its last path element, without control characters or slashes,
// at most 200 bytes; "download" when nothing is left.
func SafeFileName(n string) string {
	n = filepath.Base(strings.ReplaceAll(n, "\\", "/"))
	n = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '/' {
			return -1
		}
		return r
	}, n)
	if n == "" || n == "." || n == ".." {
		n = "download"
	}
	return Clip(n, 200)
}
