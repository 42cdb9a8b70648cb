package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A reader of Playwright's aria snapshots (the YAML that Playwright MCP's browser_snapshot
// answers), for the Playwright MCP side of BenchmarkComponentScores: it finds the element a task
// step names (role + accessible name) the way BAP's query ranks matches, and the ref to act on.
//
// The format (playwright-core, ariaSnapshotRenderer.ts, "ai" mode): one element per line,
//
//	- role "name" [checked] [active] [level=1] [selected] [ref=e12] [cursor=pointer]: text
//
// indented two spaces per level; the name is JSON-quoted; a key that YAML would misread is
// wrapped in single quotes ('' for '); a value is double-quoted with backslash escapes when
// needed; "- text: …" lines are text nodes and "- /url: …" lines properties. An element gets a
// ref only when it is visible and receives pointer events.

// ariaNode is one element line of a snapshot.
type ariaNode struct {
	Role   string
	Name   string
	Attrs  map[string]string // checked, active, selected, ref, cursor, … ("" for a bare flag)
	Text   string            // the inline value after the colon, if any
	Depth  int
	Parent int // index of the parent element, -1 at the top
	Line   int // 1-based line in the YAML
}

func (n ariaNode) ref() string { return n.Attrs["ref"] }

// checked reports the [checked] flag ([checked=mixed] is not checked).
func (n ariaNode) checked() bool {
	v, ok := n.Attrs["checked"]
	return ok && v == ""
}

// describe renders a node as a short line for failure reasons.
func (n ariaNode) describe() string {
	s := n.Role
	if n.Name != "" {
		s += " " + strconv.Quote(n.Name)
	}
	keys := make([]string, 0, len(n.Attrs))
	for k := range n.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v := n.Attrs[k]; v != "" {
			s += fmt.Sprintf(" [%s=%s]", k, v)
		} else {
			s += fmt.Sprintf(" [%s]", k)
		}
	}
	if n.Text != "" {
		s += ": " + n.Text
	}
	return s
}

// parseAriaSnapshot reads the element lines of a snapshot (text nodes and properties are
// skipped; their elements keep their place in the tree).
func parseAriaSnapshot(yaml string) ([]ariaNode, error) {
	var out []ariaNode
	var stack []int // element index at each depth
	for ln, line := range strings.Split(yaml, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" || !strings.HasPrefix(trimmed, "- ") && trimmed != "-" {
			continue
		}
		ind := len(line) - len(trimmed)
		if ind%2 != 0 {
			return nil, fmt.Errorf("line %d: odd indentation", ln+1)
		}
		depth := ind / 2
		body := strings.TrimPrefix(trimmed, "- ")
		key, value, err := splitAriaItem(body)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", ln+1, err)
		}
		if key == "text" || strings.HasPrefix(key, "/") {
			continue // a text node or a property
		}
		n, err := parseAriaKey(key)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", ln+1, err)
		}
		n.Text, n.Depth, n.Line = value, depth, ln+1
		if depth > len(stack) {
			return nil, fmt.Errorf("line %d: indented deeper than its parent", ln+1)
		}
		stack = stack[:depth]
		n.Parent = -1
		if depth > 0 {
			n.Parent = stack[depth-1]
		}
		out = append(out, n)
		stack = append(stack, len(out)-1)
	}
	return out, nil
}

// splitAriaItem splits "key: value" / "key:" / "key" (the key possibly single-quoted, the
// value possibly double- or single-quoted) into the unquoted key and value.
func splitAriaItem(body string) (key, value string, err error) {
	var rest string
	if strings.HasPrefix(body, "'") {
		var b strings.Builder
		i := 1
		for ; i < len(body); i++ {
			if body[i] == '\'' {
				if i+1 < len(body) && body[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			b.WriteByte(body[i])
		}
		if i >= len(body) {
			return "", "", fmt.Errorf("unterminated quoted key")
		}
		key, rest = b.String(), body[i+1:]
	} else {
		// The key ends at the first ": " or a final ":" outside a quoted name.
		inQ, end := false, len(body)
		for i := 0; i < len(body); i++ {
			c := body[i]
			switch {
			case inQ && c == '\\':
				i++
			case c == '"':
				inQ = !inQ
			case !inQ && c == ':' && (i+1 == len(body) || body[i+1] == ' '):
				end = i
				i = len(body)
			}
		}
		key, rest = body[:end], body[end:]
	}
	rest = strings.TrimPrefix(rest, ":")
	value = strings.TrimSpace(rest)
	switch {
	case strings.HasPrefix(value, `"`):
		v, err := unquoteYAMLDouble(value)
		if err != nil {
			return "", "", err
		}
		value = v
	case strings.HasPrefix(value, "'") && strings.HasSuffix(value, "'") && len(value) >= 2:
		value = strings.ReplaceAll(value[1:len(value)-1], "''", "'")
	}
	return key, value, nil
}

// unquoteYAMLDouble reads a double-quoted YAML scalar as Playwright writes it (JSON-like
// escapes plus \xNN).
func unquoteYAMLDouble(s string) (string, error) {
	if len(s) < 2 || !strings.HasSuffix(s, `"`) {
		return "", fmt.Errorf("unterminated quoted value %s", s)
	}
	var b strings.Builder
	in := s[1 : len(s)-1]
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c != '\\' || i+1 == len(in) {
			b.WriteByte(c)
			continue
		}
		i++
		switch in[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'x':
			if i+2 < len(in) {
				if v, err := strconv.ParseUint(in[i+1:i+3], 16, 8); err == nil {
					b.WriteRune(rune(v))
					i += 2
					continue
				}
			}
			b.WriteString(`\x`)
		default:
			b.WriteByte(in[i])
		}
	}
	return b.String(), nil
}

// parseAriaKey reads `role "name" [flag] [k=v]…`.
func parseAriaKey(key string) (ariaNode, error) {
	n := ariaNode{Attrs: map[string]string{}}
	key = strings.TrimSpace(key)
	i := strings.IndexAny(key, " [")
	if i < 0 {
		n.Role = key
		return n, nil
	}
	n.Role, key = key[:i], strings.TrimSpace(key[i:])
	if strings.HasPrefix(key, `"`) {
		// A JSON string: find its end.
		end := -1
		for j := 1; j < len(key); j++ {
			if key[j] == '\\' {
				j++
				continue
			}
			if key[j] == '"' {
				end = j
				break
			}
		}
		if end < 0 {
			return n, fmt.Errorf("unterminated name in %q", key)
		}
		if err := json.Unmarshal([]byte(key[:end+1]), &n.Name); err != nil {
			return n, fmt.Errorf("name %s: %w", key[:end+1], err)
		}
		key = strings.TrimSpace(key[end+1:])
	}
	for key != "" {
		if !strings.HasPrefix(key, "[") {
			return n, fmt.Errorf("unexpected %q after the name", key)
		}
		end := strings.IndexByte(key, ']')
		if end < 0 {
			return n, fmt.Errorf("unterminated attribute in %q", key)
		}
		k, v, _ := strings.Cut(key[1:end], "=")
		n.Attrs[k] = v
		key = strings.TrimSpace(key[end+1:])
	}
	return n, nil
}

// ariaQuery is the part of a step's query a snapshot can answer: role and accessible name; a
// label query matches the accessible name (a labelled control is named by its label); a text
// query matches the name or the inline text.
type ariaQuery struct {
	Role, Name, Label, Text string
	Exact                   bool
}

// ariaQueryOf converts a task step's query; placeholder and test_id have no counterpart in the
// snapshot (an agent reading it could not use them).
func ariaQueryOf(q map[string]any) (ariaQuery, error) {
	var a ariaQuery
	for k, v := range q {
		switch k {
		case "role":
			a.Role, _ = v.(string)
		case "name":
			a.Name, _ = v.(string)
		case "label":
			a.Label, _ = v.(string)
		case "text":
			a.Text, _ = v.(string)
		case "exact":
			a.Exact, _ = v.(bool)
		default:
			return a, fmt.Errorf("query field %q has no counterpart in an aria snapshot", k)
		}
	}
	if a.Role == "" && a.Name == "" && a.Label == "" && a.Text == "" {
		return a, fmt.Errorf("empty query")
	}
	return a, nil
}

func (q ariaQuery) String() string {
	m := map[string]any{}
	for k, v := range map[string]string{"role": q.Role, "name": q.Name, "label": q.Label, "text": q.Text} {
		if v != "" {
			m[k] = v
		}
	}
	if q.Exact {
		m["exact"] = true
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// ariaMatch ranks like BAP's query (server/internal/pagekit/agent.js): 3 equal, 2 equal but for
// case, 1 substring (not with exact), 0 no match.
func ariaMatch(want, have string, exact bool) float64 {
	w, h := strings.Join(strings.Fields(want), " "), strings.Join(strings.Fields(have), " ")
	switch {
	case h == "":
		return 0
	case h == w:
		return 3
	case exact:
		return 0
	case strings.EqualFold(h, w):
		return 2
	case strings.Contains(strings.ToLower(h), strings.ToLower(w)):
		return 1
	}
	return 0
}

// ariaInteractive are the roles BAP ranks before others among equal matches.
var ariaInteractive = []string{"button", "checkbox", "combobox", "link", "listbox", "menuitem", "menuitemcheckbox",
	"menuitemradio", "option", "radio", "searchbox", "slider", "spinbutton", "switch", "tab", "textbox", "treeitem"}

func ariaRoleMatches(have, want string) bool {
	have, want = strings.ToLower(have), strings.ToLower(want)
	return have == want || want == "textbox" && have == "searchbox" || want == "img" && have == "image"
}

// findAria returns the index of the best match of q (-1 if none): the highest score, then
// interactive roles, then elements with a ref, then document order. Elements marked
// [aria-hidden] are skipped, as BAP skips aria-hidden subtrees.
func findAria(nodes []ariaNode, q ariaQuery) int {
	best, bestScore := -1, 0.0
	for i, n := range nodes {
		if _, hidden := n.Attrs["aria-hidden"]; hidden {
			continue
		}
		if q.Role != "" && !ariaRoleMatches(n.Role, q.Role) {
			continue
		}
		score := 0.0
		for _, f := range []struct{ want, have string }{{q.Name, n.Name}, {q.Label, n.Name}} {
			if f.want == "" {
				continue
			}
			m := ariaMatch(f.want, f.have, q.Exact)
			if m == 0 {
				score = -1
				break
			}
			score += m
		}
		if score < 0 {
			continue
		}
		if q.Text != "" {
			m := max(ariaMatch(q.Text, n.Name, q.Exact), ariaMatch(q.Text, n.Text, q.Exact))
			if m == 0 {
				continue
			}
			score += m
		}
		if slices.Contains(ariaInteractive, n.Role) {
			score += 0.5
		}
		if n.ref() != "" {
			score += 0.25
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// ariaTarget is the ref to act on for nodes[i] and how it was chosen: the element's own ref;
// else, when Playwright gave it none (it does not receive pointer events: a visually hidden
// native input under a styled label), what a person would click instead: the nearest clickable
// ancestor with a ref ([cursor=pointer]), else a sibling with a ref whose name or text is the
// element's name (its visible label). "" when there is nothing to act on.
func ariaTarget(nodes []ariaNode, i int) (ref, via string) {
	n := nodes[i]
	if r := n.ref(); r != "" {
		return r, ""
	}
	for p := n.Parent; p >= 0; p = nodes[p].Parent {
		if nodes[p].ref() != "" && nodes[p].Attrs["cursor"] == "pointer" {
			return nodes[p].ref(), "clickable ancestor " + nodes[p].describe()
		}
	}
	if n.Name != "" {
		for j, s := range nodes {
			if j == i || s.Parent != n.Parent || s.ref() == "" {
				continue
			}
			if strings.EqualFold(strings.TrimSpace(s.Name), n.Name) || strings.EqualFold(strings.TrimSpace(s.Text), n.Name) {
				return s.ref(), "label " + s.describe()
			}
		}
	}
	return "", ""
}

// ariaNearMisses lists, for a failure reason, elements whose name matches the query's name or
// label under another role (what the query would have found but for the role).
func ariaNearMisses(nodes []ariaNode, q ariaQuery) []string {
	want := q.Name
	if want == "" {
		want = q.Label
	}
	if want == "" || q.Role == "" {
		return nil
	}
	var out []string
	for _, n := range nodes {
		if ariaMatch(want, n.Name, q.Exact) >= 2 || ariaMatch(want, n.Text, q.Exact) >= 2 {
			out = append(out, n.describe())
			if len(out) == 3 {
				break
			}
		}
	}
	return out
}

// extractSnapshotYAML returns the YAML of a browser_snapshot answer (the ```yaml block after
// "### Snapshot").
func extractSnapshotYAML(text string) (string, bool) {
	i := strings.Index(text, "```yaml\n")
	if i < 0 {
		return "", false
	}
	rest := text[i+len("```yaml\n"):]
	j := strings.Index(rest, "\n```")
	if j < 0 {
		return "", false
	}
	return rest[:j], true
}

const ariaSample = "### Page\n- Page URL: http://127.0.0.1/pages/x.html\n### Snapshot\n```yaml\n" + `- generic [active] [ref=e1]:
  - heading "Shoelace" [level=1] [ref=e2]
  - main [ref=e3]:
    - generic [ref=e5]:
      - generic [ref=e6]: Full name
      - textbox "Full name" [ref=e10]:
        - /placeholder: ""
    - generic [ref=e16]:
      - combobox "Country" [ref=e18]
      - textbox "Country search" [aria-hidden] [ref=e19]
    - generic [ref=e26] [cursor=pointer]:
      - checkbox "Subscribe to newsletter"
      - generic [ref=e28]: Subscribe to newsletter
    - switch "Email notifications" [checked] [ref=e33]
    - checkbox "Terms" [checked=mixed] [ref=e34]
    - group "Plan" [ref=e18b]:
      - radio "Basic" [checked]
      - generic [ref=e19b] [cursor=pointer]: Basic
      - radio "Pro"
      - generic [ref=e20] [cursor=pointer]: Pro
    - slider "Volume" [ref=e64]: "50"
    - tablist [ref=e69]:
      - tab "Profile" [selected] [ref=e71]
      - tab "Shipping" [ref=e73]
    - 'button "Say: \"hi\"" [ref=e80]'
    - button "Save" [ref=e81] [cursor=pointer]
    - button "Save draft" [ref=e82] [cursor=pointer]
    - generic "SAVE ALL" [ref=e83]
    - listbox:
      - option "Germany" [ref=e90]
  - generic: Cancel
` + "```\n"

func TestAriaSnapshotFind(t *testing.T) {
	t.Parallel()
	yaml, ok := extractSnapshotYAML(ariaSample)
	if !ok {
		t.Fatal("no yaml block in the sample")
	}
	nodes, err := parseAriaSnapshot(yaml)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		query   map[string]any
		ref     string // "" = not found
		via     string // prefix of how the ref was chosen ("" = the element's own)
		checked bool
		value   string
	}{
		{name: "textbox", query: map[string]any{"role": "textbox", "name": "Full name"}, ref: "e10"},
		{name: "case-insensitive", query: map[string]any{"role": "textbox", "name": "full NAME"}, ref: "e10"},
		{name: "exact refuses case", query: map[string]any{"role": "textbox", "name": "full name", "exact": true}},
		{name: "exact beats substring", query: map[string]any{"role": "button", "name": "Save"}, ref: "e81"},
		{name: "substring", query: map[string]any{"role": "button", "name": "draft"}, ref: "e82"},
		{name: "exact refuses substring", query: map[string]any{"role": "button", "name": "draft", "exact": true}},
		{name: "quoted key", query: map[string]any{"role": "button", "name": `Say: "hi"`}, ref: "e80"},
		{name: "role must match", query: map[string]any{"role": "button", "name": "Save all"}},
		{name: "label is the name", query: map[string]any{"label": "Country"}, ref: "e18"},
		{name: "aria-hidden skipped", query: map[string]any{"role": "textbox", "name": "Country search"}},
		{name: "no ref: clickable ancestor", query: map[string]any{"role": "checkbox", "name": "Subscribe to newsletter"}, ref: "e26", via: "clickable ancestor"},
		{name: "no ref: sibling label", query: map[string]any{"role": "radio", "name": "Pro"}, ref: "e20", via: "label"},
		{name: "checked", query: map[string]any{"role": "switch", "name": "Email notifications"}, ref: "e33", checked: true},
		{name: "mixed is not checked", query: map[string]any{"role": "checkbox", "name": "Terms"}, ref: "e34"},
		{name: "checked radio without ref", query: map[string]any{"role": "radio", "name": "Basic"}, ref: "e19b", via: "label", checked: true},
		{name: "value", query: map[string]any{"role": "slider", "name": "Volume"}, ref: "e64", value: "50"},
		{name: "tab", query: map[string]any{"role": "tab", "name": "Shipping"}, ref: "e73"},
		{name: "option", query: map[string]any{"role": "option", "name": "germany"}, ref: "e90"},
		{name: "absent", query: map[string]any{"role": "button", "name": "Confirm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := ariaQueryOf(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			i := findAria(nodes, q)
			if tc.ref == "" {
				if i >= 0 {
					t.Fatalf("found %s, want nothing", nodes[i].describe())
				}
				return
			}
			if i < 0 {
				t.Fatalf("not found, want %s", tc.ref)
			}
			ref, via := ariaTarget(nodes, i)
			if ref != tc.ref || !strings.HasPrefix(via, tc.via) || (tc.via == "") != (via == "") {
				t.Fatalf("ref %q via %q, want %q via %q… (node %s)", ref, via, tc.ref, tc.via, nodes[i].describe())
			}
			if nodes[i].checked() != tc.checked || nodes[i].Text != tc.value {
				t.Fatalf("checked %v value %q, want %v %q", nodes[i].checked(), nodes[i].Text, tc.checked, tc.value)
			}
		})
	}
	// The tree: parents by indentation; text and property lines are not elements.
	i := findAria(nodes, ariaQuery{Role: "option", Name: "Germany"})
	if p := nodes[i].Parent; p < 0 || nodes[p].Role != "listbox" || nodes[nodes[p].Parent].Role != "main" {
		t.Fatalf("option's parent chain is wrong: %+v", nodes[i])
	}
	if _, err := parseAriaSnapshot("- a\n   - b"); err == nil {
		t.Fatal("odd indentation accepted")
	}
	if _, ok := extractSnapshotYAML("### Page\nno snapshot"); ok {
		t.Fatal("a text without a yaml block yields one")
	}
	// A tool's error: the message and the call log's last finding, without colour codes.
	got := toolError("### Error\nTimeoutError: Timeout 8000ms exceeded.\nCall log:\n\x1b[2m  - waiting for locator('aria-ref=e27')\x1b[22m\n" +
		"\x1b[2m      - <div part=\"control\"> intercepts pointer events\x1b[22m\n\x1b[2m    - retrying click action\x1b[22m\n\x1b[2m      - waiting 500ms\x1b[22m\n")
	if want := `TimeoutError: Timeout 8000ms exceeded. (call log: <div part="control"> intercepts pointer events)`; got != want {
		t.Fatalf("toolError: %q, want %q", got, want)
	}
}
