package worker

import (
	"encoding/json"
	"strings"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/page"
)

// Masking (issue #11, ADR 0013): nothing a model sees, and nothing the history keeps of a model's
// proposal, holds a protected value. Protected are what a fill types (the value of every form
// control, a password field's never being read at all), values this run filled wherever the page
// echoes them, and cookies, storage and secrets — which no observation carries in the first place
// (an observation is the accessibility tree: roles, names, visible text, link targets).

// masked replaces a protected value.
const masked = "***"

// minScrubLen is the shortest filled value scrubbed from page text (shorter ones would mangle the
// page beyond use; form-control values are masked whatever their length).
const minScrubLen = 3

// maskArgs returns a step's arguments with its protected values masked: the value a fill types.
func maskArgs(op string, args json.RawMessage) json.RawMessage {
	if op != "act" || len(args) == 0 {
		return args
	}
	var m map[string]any
	if err := json.Unmarshal(args, &m); err != nil {
		return json.RawMessage(`{}`)
	}
	if _, ok := m["value"]; ok {
		m["value"] = masked
	}
	out, err := json.Marshal(m)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return out
}

// filledValue is the value a step types, "" when none.
func filledValue(st app.PlanStep) string {
	if st.Op != "act" {
		return ""
	}
	var a struct {
		Value string `json:"value"`
	}
	_ = json.Unmarshal(st.Args, &a)
	return a.Value
}

// scrubber masks the values a run filled wherever they appear.
type scrubber struct{ values []string }

func (s *scrubber) add(v string) {
	v = strings.TrimSpace(v)
	if len(v) < minScrubLen {
		return
	}
	for _, have := range s.values {
		if have == v {
			return
		}
	}
	s.values = append(s.values, v)
}

func (s *scrubber) text(v string) string {
	for _, f := range s.values {
		if strings.Contains(v, f) {
			v = strings.ReplaceAll(v, f, masked)
		}
	}
	return v
}

// maskedObservation is what a model sees of a page.
type maskedObservation struct {
	URL       string      `json:"url"`
	Title     string      `json:"title"`
	Nodes     []page.Node `json:"nodes"`
	Truncated bool        `json:"truncated,omitempty"`
}

// maskSnapshot copies a snapshot with every form control's value masked and every filled value
// scrubbed from its text.
func maskSnapshot(snap *page.Snapshot, sc *scrubber) maskedObservation {
	out := maskedObservation{URL: sc.text(snap.URL), Title: sc.text(snap.Title), Truncated: snap.Truncated}
	out.Nodes = maskNodes(snap.Nodes, sc)
	return out
}

func maskNodes(nodes []page.Node, sc *scrubber) []page.Node {
	if len(nodes) == 0 {
		return nil
	}
	out := make([]page.Node, len(nodes))
	for i, n := range nodes {
		m := n
		if m.Value != "" && (m.Role != "text" || m.InputType != "") {
			m.Value = masked // a form control's value: what was typed into it
		}
		m.Name, m.Value, m.Description = sc.text(m.Name), sc.text(m.Value), sc.text(m.Description)
		m.URL, m.Placeholder = sc.text(m.URL), sc.text(m.Placeholder)
		if len(m.Options) > 0 {
			opts := make([]string, len(m.Options))
			for k, o := range m.Options {
				opts[k] = sc.text(o)
			}
			m.Options = opts
		}
		m.Children = maskNodes(n.Children, sc)
		out[i] = m
	}
	return out
}

// scrubJSON scrubs filled values from every string of a JSON value (a model's free text, a
// proposal's arguments) before it is recorded or sent on.
func scrubJSON(raw json.RawMessage, sc *scrubber) json.RawMessage {
	if len(sc.values) == 0 || len(raw) == 0 {
		return raw
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return json.RawMessage(`{}`)
	}
	out, err := json.Marshal(scrubValue(v, sc))
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return out
}

func scrubValue(v any, sc *scrubber) any {
	switch x := v.(type) {
	case string:
		return sc.text(x)
	case []any:
		for i := range x {
			x[i] = scrubValue(x[i], sc)
		}
	case map[string]any:
		for k := range x {
			x[k] = scrubValue(x[k], sc)
		}
	}
	return v
}
