package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/apigen"
)

// The spec is the wire: every value the spec lists for a request field must be accepted. The
// fields are read from the bundled OpenAPI document (every enum reachable from an operation's
// request body, through $ref, allOf/oneOf/anyOf, items and properties), so that a new enum field or
// value needs no edit here to be sent; a field without a case below fails the test until one is
// written. (wait_until's networkidle once passed validation and was then refused by the browser
// layer, which spelled it network_idle.)

// requestEnums maps "operationId.field.path" to the values the spec lists for it.
func requestEnums(t *testing.T) map[string][]string {
	t.Helper()
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(apigen.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	var walk func(s map[string]any, path string, seen map[string]bool)
	walk = func(s map[string]any, path string, seen map[string]bool) {
		if ref, ok := s["$ref"].(string); ok {
			name := ref[strings.LastIndexByte(ref, '/')+1:]
			if seen[name] {
				return
			}
			seen = maps.Clone(seen) // this path's own set: a sibling may reach the same schema
			seen[name] = true
			s = doc.Components.Schemas[name]
		}
		if enum, ok := s["enum"].([]any); ok {
			for _, v := range enum {
				if str, ok := v.(string); ok && !slices.Contains(out[path], str) {
					out[path] = append(out[path], str)
				}
			}
		}
		for _, k := range []string{"allOf", "oneOf", "anyOf"} {
			list, _ := s[k].([]any)
			for _, x := range list {
				if m, ok := x.(map[string]any); ok {
					walk(m, path, seen)
				}
			}
		}
		props, _ := s["properties"].(map[string]any)
		for name, x := range props {
			if m, ok := x.(map[string]any); ok {
				walk(m, path+"."+name, seen)
			}
		}
		if m, ok := s["items"].(map[string]any); ok {
			walk(m, path+"[]", seen)
		}
	}
	for _, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				OperationID string `json:"operationId"`
				RequestBody struct {
					Content map[string]struct {
						Schema map[string]any `json:"schema"`
					} `json:"content"`
				} `json:"requestBody"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			if s := op.RequestBody.Content["application/json"].Schema; s != nil {
				walk(s, op.OperationID, map[string]bool{})
			}
		}
	}
	return out
}

// accepted reports whether r shows the server took the value: not a validation refusal (400), not
// a 5xx, except the one refusal a value can meet for want of a service this stack does not run (an
// autonomous task and its model policy: orchestrator_unavailable).
func accepted(r reply) bool {
	if r.status == 503 && r.body["code"] == "orchestrator_unavailable" {
		return true
	}
	return r.status < 400 || (r.status != 400 && r.status < 500)
}

func TestEverySpecEnumValueIsAccepted(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	s := newStack(t)
	op := s.operator()
	_, sess := openShop(t, s, sh, "enums")
	base := "/bap/v1/browser-sessions/" + sess
	checkout := func(t *testing.T, key string) {
		s.must(t, 200, "POST", base+"/navigate", key+"-nav", map[string]any{"url": sh.srv.URL + "/checkout"})
	}
	shot := s.must(t, 200, "POST", base+"/evidence", "enums-shot", map[string]any{"kinds": []string{"screenshot"}})
	artifactID := shot.body["artifacts"].([]any)[0].(map[string]any)["artifact_id"].(string)
	task := func(extra map[string]any) map[string]any {
		body := map[string]any{"goal": "try a value", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}}}
		for k, v := range extra {
			body[k] = v
		}
		return body
	}
	// actBody is a request for each action, aimed at an element of the checkout that takes it.
	actBody := map[string]map[string]any{
		"click":            {"query": map[string]any{"role": "link", "name": "Back to cart"}},
		"fill":             {"query": map[string]any{"label": "Full name"}, "value": "Ada"},
		"clear":            {"query": map[string]any{"label": "Full name"}},
		"select_option":    {"query": map[string]any{"label": "Country"}, "values": []string{"France"}},
		"check":            {"query": map[string]any{"role": "checkbox"}},
		"uncheck":          {"query": map[string]any{"role": "checkbox"}},
		"press_key":        {"query": map[string]any{"label": "Full name"}, "key": "a"},
		"hover":            {"query": map[string]any{"role": "link", "name": "Back to cart"}},
		"focus":            {"query": map[string]any{"label": "Email"}},
		"scroll_into_view": {"query": map[string]any{"role": "link", "name": "Back to cart"}},
		"upload_file":      {"query": map[string]any{"label": "Document"}, "artifact_id": artifactID},
	}
	engineTask := s.must(t, 201, "POST", "/bap/v1/tasks", "enums-engine-task", task(nil)).str("task", "task_id")
	// cases sends one value of one field; each must be accepted.
	cases := map[string]func(t *testing.T, v string) reply{
		"navigate.wait_until": func(t *testing.T, v string) reply {
			return s.call(t, "POST", base+"/navigate", "nav-"+v, map[string]any{"url": sh.srv.URL + "/checkout?w=" + v, "wait_until": v})
		},
		"act.wait_until": func(t *testing.T, v string) reply {
			checkout(t, "actwait-"+v)
			return s.call(t, "POST", base+"/act", "actwait-"+v, map[string]any{"action": "click", "query": map[string]any{"role": "link", "name": "Back to cart"}, "wait_until": v})
		},
		"act.action": func(t *testing.T, v string) reply {
			body, ok := actBody[v]
			if !ok {
				t.Fatalf("the spec lists act action %q, which this test has no request for: add one to actBody", v)
			}
			if v == "upload_file" {
				s.must(t, 200, "POST", base+"/navigate", "action-nav-"+v, map[string]any{"url": sh.srv.URL + "/upload"})
			} else {
				checkout(t, "action-"+v)
			}
			req := map[string]any{"action": v}
			for k, x := range body {
				req[k] = x
			}
			return s.call(t, "POST", base+"/act", "action-"+v, req)
		},
		"capture_evidence.kinds[]": func(t *testing.T, v string) reply {
			return s.call(t, "POST", base+"/evidence", "kinds-"+v, map[string]any{"kinds": []string{v}})
		},
		"extract.kind": func(t *testing.T, v string) reply {
			checkout(t, "extract-"+v)
			req := map[string]any{"kind": v}
			switch v {
			case "schema":
				req["schema"] = map[string]any{"type": "object", "properties": map[string]any{"heading": map[string]any{"type": "string"}}}
			case "attributes":
				req["query"] = map[string]any{"role": "link"}
				req["attributes"] = []string{"href"}
			}
			return s.call(t, "POST", base+"/extract", "", req)
		},
		"replay_task.mode": func(t *testing.T, v string) reply {
			// The value is read; the live task it names is then refused (409 replay_not_possible).
			return s.call(t, "POST", "/bap/v1/tasks/"+engineTask+"/replay", "replay-"+v, map[string]any{"mode": v})
		},
		"observe.mode": func(t *testing.T, v string) reply {
			return s.call(t, "POST", base+"/observe", "", map[string]any{"mode": v})
		},
		"create_task.mode": func(t *testing.T, v string) reply {
			return s.call(t, "POST", "/bap/v1/tasks", "mode-"+v, task(map[string]any{"mode": v}))
		},
		"create_task.model_policy.data_classification": func(t *testing.T, v string) reply {
			return s.call(t, "POST", "/bap/v1/tasks", "class-"+v, task(map[string]any{"mode": "autonomous", "model_policy": map[string]any{"data_classification": v}}))
		},
		"create_task.plan[].op": func(t *testing.T, v string) reply {
			args := map[string]map[string]any{
				"navigate":         {"url": sh.srv.URL + "/checkout"},
				"observe":          {},
				"act":              {"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}},
				"extract":          {"kind": "text"},
				"capture_evidence": {"kinds": []string{"screenshot"}},
			}[v]
			if args == nil {
				t.Fatalf("the spec lists plan op %q, which this test has no arguments for", v)
			}
			return s.call(t, "POST", "/bap/v1/tasks", "plan-"+v, task(map[string]any{"plan": []any{map[string]any{"op": v, "args": args}}}))
		},
		"create_task.policy.approval_rules[].channel": func(t *testing.T, v string) reply {
			return s.call(t, "POST", "/bap/v1/tasks", "channel-"+v, task(map[string]any{"policy": map[string]any{
				"allowed_origins": []string{sh.srv.URL}, "approval_rules": []any{map[string]any{"effect": "any_action", "channel": v}}}}))
		},
		"create_task.policy.approval_rules[].effect": func(t *testing.T, v string) reply {
			return s.call(t, "POST", "/bap/v1/tasks", "effect-"+v, task(map[string]any{"policy": map[string]any{
				"allowed_origins": []string{sh.srv.URL}, "approval_rules": []any{map[string]any{"effect": v}}}}))
		},
		"create_browser_session.engine": func(t *testing.T, v string) reply {
			// Every engine of the spec opens a session, or, on a node that does not run it, answers
			// the documented 503 browser_unavailable naming it.
			r := s.call(t, "POST", "/bap/v1/tasks/"+engineTask+"/browser-sessions", "engine-"+v, map[string]any{"engine": v})
			runs := false
			for _, e := range s.svc.Engines() {
				runs = runs || (e.Name == v && e.Available)
			}
			switch {
			case runs && (r.status != 201 || r.str("session", "engine") != v):
				t.Errorf("engine %s, which this node runs: %d %s", v, r.status, r.raw)
			case !runs && (r.status != 503 || r.str("code") != "browser_unavailable" || !strings.Contains(r.str("detail"), v)):
				t.Errorf("engine %s, which this node does not run: %d %s, want 503 browser_unavailable naming it", v, r.status, r.raw)
			case !runs:
				r.status = 201 // the documented answer
			}
			return r
		},
		"resolve_approval.decision": func(t *testing.T, v string) reply {
			// A held action of a task of its own, resolved by the operator on the socket.
			_, held := heldShopTask(t, s, sh, "decision-"+v, map[string]any{})
			fillCheckout(t, s, held, "decision-"+v)
			apr := s.must(t, 202, "POST", "/bap/v1/browser-sessions/"+held+"/act", "decision-"+v+"-click", placeOrder).str("approval", "approval_id")
			return op.call(t, "POST", "/bap/v1/approvals/"+apr+"/resolve", "decision-"+v, map[string]any{"decision": v})
		},
	}
	fields := requestEnums(t)
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		run, ok := cases[f]
		if !ok {
			t.Errorf("the spec lists values for %s (%v) and this test sends none: add a case", f, fields[f])
			continue
		}
		for _, v := range fields[f] {
			t.Run(fmt.Sprintf("%s=%s", f, v), func(t *testing.T) {
				if r := run(t, v); !accepted(r) {
					t.Errorf("%s %q, which the spec lists, was refused: %d %s", f, v, r.status, r.raw)
				}
			})
		}
	}
	for f := range cases {
		if _, ok := fields[f]; !ok {
			t.Errorf("a case for %s, which the spec no longer lists: remove it", f)
		}
	}
}
