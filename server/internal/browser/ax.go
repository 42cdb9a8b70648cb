package browser

import (
	"context"
	"strconv"
	"strings"

	"github.com/chromedp/cdproto/accessibility"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/runtime"
)

// This file asks the browser's own accessibility tree (CDP Accessibility)
// for the role, name and states of elements the page agent cannot judge
// from the DOM alone: custom elements, whose role and states may live in
// ElementInternals (invisible to any script) and whose properties belong to
// the page's world, and the controls inside shadow trees, whose labels may
// cross shadow boundaries. The agent computes everything else itself, which
// keeps heavy pages of plain HTML fast (a full AX tree of a 5,000-element
// page costs several times the agent's walk).

// maxAXNodes bounds how many elements one walk asks the browser about; past
// it the agent's own computation stands.
const maxAXNodes = 400

// axState is the browser's accessibility view of one element, in the
// agent's compact record spelling (see rec and agent.js).
type axState struct {
	R  string `json:"r"`
	Ig bool   `json:"ig,omitempty"`
	N  string `json:"n,omitempty"`
	V  string `json:"v,omitempty"`
	De string `json:"de,omitempty"`
	Ch *int   `json:"ch,omitempty"`
	Pr *int   `json:"pr,omitempty"`
	E  *int   `json:"e,omitempty"`
	S  *int   `json:"s,omitempty"`
	D  int    `json:"d,omitempty"`
	Q  int    `json:"q,omitempty"`
	Ro int    `json:"ro,omitempty"`
	L  int    `json:"l,omitempty"`
}

// axStates returns the browser's view of the agent's elements idx in world
// w, keyed by index. Elements it could not resolve are left out (the agent
// then keeps its own reading).
func (s *Session) axStates(ctx context.Context, w *world, idx []int) (map[int]axState, error) {
	if len(idx) > maxAXNodes {
		idx = idx[:maxAXNodes]
	}
	out := make(map[int]axState, len(idx))
	if len(idx) == 0 {
		return out, nil
	}
	arr, err := s.evalObject(ctx, w, agentCall("elements", idx))
	if err != nil || arr == "" {
		return out, err
	}
	defer fireCmd(w.host.sess, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: arr})
	props, err := call(ctx, w.host.sess, runtime.GetProperties, runtime.GetPropertiesParams{ObjectID: arr, OwnProperties: ptr(true)})
	if err != nil {
		return out, s.mapErr(err)
	}
	type pending struct {
		i   int
		obj runtime.RemoteObjectID
		f   *future
	}
	var ps []pending
	for _, p := range props.Result {
		k, err := strconv.Atoi(p.Name)
		if err != nil || k < 0 || k >= len(idx) || p.Value == nil || p.Value.ObjectID == "" {
			continue
		}
		ps = append(ps, pending{i: idx[k], obj: p.Value.ObjectID, f: start(ctx, w.host.sess, accessibility.GetPartialAXTree,
			accessibility.GetPartialAXTreeParams{ObjectID: p.Value.ObjectID, FetchRelatives: ptr(false)})})
	}
	for _, p := range ps {
		var res accessibility.GetPartialAXTreeResult
		err := p.f.wait(ctx, &res)
		fireCmd(w.host.sess, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: p.obj})
		if err != nil || len(res.Nodes) == 0 {
			continue
		}
		out[p.i] = axOf(res.Nodes[0])
	}
	return out, ctx.Err()
}

// axRoles maps Chromium's internal role names (those that are not ARIA
// roles) to BAP's; "" makes the element transparent (its content is
// hoisted), as for generic containers.
var axRoles = map[string]string{
	"img": "image", "image": "image", "MenuListOption": "option", "MenuListPopup": "",
	"Iframe": "iframe", "IframePresentational": "", "RootWebArea": "", "StaticText": "",
	"LabelText": "", "InlineTextBox": "", "LineBreak": "", "ListMarker": "", "generic": "",
	"none": "", "presentation": "", "Section": "", "Canvas": "", "Abbr": "", "Pre": "",
	"Ruby": "", "DescriptionListDetail": "definition", "DescriptionListTerm": "term",
	"DescriptionList": "list", "Legend": "", "Figcaption": "", "Mark": "", "Summary": "button",
	"DisclosureTriangle": "button", "DisclosureTriangleGrouping": "button", "SectionWithoutName": "",
	"ToggleButton": "button", "PopUpButton": "combobox", "ComboBoxMenuButton": "combobox",
	"ComboBoxGrouping": "combobox", "ComboBoxSelect": "combobox", "TextField": "textbox",
	"SearchBox": "searchbox", "TextFieldWithComboBox": "combobox",
}

// axOf turns one CDP AX node into an axState.
func axOf(n *accessibility.Node) axState {
	var st axState
	if n.Ignored {
		st.Ig = true
		return st
	}
	role := axString(n.Role)
	if r, ok := axRoles[role]; ok {
		role = r
	} else if strings.ToLower(role) != role {
		role = "" // an internal role with no ARIA counterpart
	}
	st.R = role
	st.N = clipText(normSpace(axString(n.Name)), 200)
	st.V = clipText(normSpace(axString(n.Value)), 200)
	st.De = clipText(normSpace(axString(n.Description)), 200)
	for _, p := range n.Properties {
		if p == nil || p.Value == nil {
			continue
		}
		v := axString(p.Value)
		switch p.Name {
		case accessibility.PropertyNameChecked:
			st.Ch = triState(v)
		case accessibility.PropertyNamePressed:
			st.Pr = triState(v)
		case accessibility.PropertyNameExpanded:
			st.E = triState(v)
		case accessibility.PropertyNameSelected:
			st.S = triState(v)
		case accessibility.PropertyNameDisabled:
			st.D = flag(v)
		case accessibility.PropertyNameRequired:
			st.Q = flag(v)
		case accessibility.PropertyNameReadonly:
			st.Ro = flag(v)
		case accessibility.PropertyNameLevel:
			st.L, _ = strconv.Atoi(v)
		case accessibility.PropertyNameValuetext:
			if v != "" {
				st.V = clipText(normSpace(v), 200)
			}
		default: // the snapshot carries only the states above
		}
	}
	return st
}

// axString is a value's text: strings as they are, numbers and booleans
// in their JSON spelling.
func axString(v *accessibility.Value) string {
	if v == nil || len(v.Value) == 0 {
		return ""
	}
	var s string
	if jsonv2.Unmarshal(v.Value, &s) == nil {
		return s
	}
	return strings.Trim(string(v.Value), `"`)
}

func triState(v string) *int {
	switch v {
	case "true":
		return ptr(1)
	case "false":
		return ptr(0)
	case "mixed":
		return ptr(2)
	}
	return nil
}

func flag(v string) int {
	if v == "true" {
		return 1
	}
	return 0
}

// normSpace collapses white space as the agent's norm does.
func normSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

// clipText clips to n characters as the agent's clip does (n-1 and an ellipsis), so that the
// browser's names are as long as the agent's; clipString (session.go) bounds bytes instead.
func clipText(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
