package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/originweave/bap/server/internal/app"
)

// proposal is the planner's answer: one typed step of the public vocabulary, or done.
type proposal struct {
	Op     string          `json:"op"`
	Args   json.RawMessage `json:"args"`
	Reason string          `json:"reason"`
}

// opDone is the planner's "the goal is reached" (or cannot be reached: the postcondition decides).
const opDone = "done"

// plannerSchema constrains the planner's answer (JSON-schema-constrained output). It is derived
// from spec/schemas/PlanStep.json and the operation bodies it names (NavigateRequest,
// ObserveRequest, ActRequest, ExtractRequest, CaptureEvidenceRequest), self-contained; the step
// is validated again by validateProposal before anything runs.
var plannerSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["op", "args", "reason"],
  "properties": {
    "op": {"type": "string", "enum": ["navigate", "observe", "act", "extract", "capture_evidence", "done"]},
    "args": {"type": "object"},
    "reason": {"type": "string", "maxLength": 1000}
  },
  "allOf": [
    {"if": {"properties": {"op": {"const": "navigate"}}}, "then": {"properties": {"args": {
      "type": "object", "additionalProperties": false, "required": ["url"],
      "properties": {"url": {"type": "string", "minLength": 1, "maxLength": 8192},
        "context_id": {"type": "string", "maxLength": 68},
        "wait_until": {"enum": ["commit", "domcontentloaded", "load", "networkidle"]},
        "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 300000}}}}}},
    {"if": {"properties": {"op": {"const": "observe"}}}, "then": {"properties": {"args": {
      "type": "object", "additionalProperties": false,
      "properties": {"context_id": {"type": "string", "maxLength": 68}, "within": {"type": "string", "maxLength": 67},
        "max_nodes": {"type": "integer", "minimum": 1, "maximum": 5000}, "mode": {"enum": ["interactive", "full"]}}}}}},
    {"if": {"properties": {"op": {"const": "act"}}}, "then": {"properties": {"args": {
      "type": "object", "additionalProperties": false, "required": ["action"],
      "properties": {
        "action": {"enum": ["click", "fill", "clear", "select_option", "check", "uncheck", "press_key", "hover", "focus", "scroll_into_view", "upload_file"]},
        "node_id": {"type": "string", "maxLength": 67},
        "query": {"$ref": "#/$defs/query"},
        "value": {"type": "string", "maxLength": 65536},
        "secret_ref": {"type": "string", "pattern": "^sec_[A-Za-z0-9_-]{1,64}$", "maxLength": 68},
        "values": {"type": "array", "maxItems": 100, "items": {"type": "string", "maxLength": 1000}},
        "key": {"type": "string", "minLength": 1, "maxLength": 64},
        "artifact_id": {"type": "string", "maxLength": 68},
        "context_id": {"type": "string", "maxLength": 68},
        "wait_until": {"enum": ["commit", "domcontentloaded", "load", "networkidle"]},
        "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 300000}}}}}},
    {"if": {"properties": {"op": {"const": "extract"}}}, "then": {"properties": {"args": {
      "type": "object", "additionalProperties": false, "required": ["kind"],
      "properties": {"kind": {"enum": ["text", "table", "attributes", "links", "schema"]},
        "node_id": {"type": "string", "maxLength": 67}, "query": {"$ref": "#/$defs/query"},
        "context_id": {"type": "string", "maxLength": 68}, "schema": {"type": "object"},
        "fields": {"type": "object", "additionalProperties": {"$ref": "#/$defs/query"}}}}}}},
    {"if": {"properties": {"op": {"const": "capture_evidence"}}}, "then": {"properties": {"args": {
      "type": "object", "additionalProperties": false, "required": ["kinds"],
      "properties": {"kinds": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"enum": ["screenshot", "dom_snapshot", "ax_snapshot"]}},
        "context_id": {"type": "string", "maxLength": 68}, "full_page": {"type": "boolean"}, "node_id": {"type": "string", "maxLength": 67}}}}}}
  ],
  "$defs": {"query": {"type": "object", "additionalProperties": false, "minProperties": 1, "properties": {
    "role": {"type": "string", "minLength": 1, "maxLength": 64}, "name": {"type": "string", "minLength": 1, "maxLength": 1000},
    "text": {"type": "string", "minLength": 1, "maxLength": 1000}, "label": {"type": "string", "minLength": 1, "maxLength": 1000},
    "placeholder": {"type": "string", "minLength": 1, "maxLength": 1000}, "test_id": {"type": "string", "minLength": 1, "maxLength": 255},
    "within": {"type": "string", "maxLength": 67}, "exact": {"type": "boolean"}}}}
}`)

// verifierSchema constrains the verifier's answer.
var verifierSchema = json.RawMessage(`{
  "type": "object", "additionalProperties": false, "required": ["verdict", "reason"],
  "properties": {"verdict": {"enum": ["yes", "no", "unsure"]}, "reason": {"type": "string", "maxLength": 1000}}
}`)

// Closed argument shapes of each step kind, for validateProposal (the same fields as the
// operation bodies; unknown fields are refused).
type (
	vQuery struct {
		Role        *string `json:"role"`
		Name        *string `json:"name"`
		Text        *string `json:"text"`
		Label       *string `json:"label"`
		Placeholder *string `json:"placeholder"`
		TestID      *string `json:"test_id"`
		Within      *string `json:"within"`
		Exact       *bool   `json:"exact"`
	}
	vNavigate struct {
		URL       string `json:"url"`
		ContextID string `json:"context_id"`
		WaitUntil string `json:"wait_until"`
		TimeoutMs *int   `json:"timeout_ms"`
	}
	vObserve struct {
		ContextID string `json:"context_id"`
		Within    string `json:"within"`
		MaxNodes  *int   `json:"max_nodes"`
		Mode      string `json:"mode"`
	}
	vAct struct {
		Action     string   `json:"action"`
		NodeID     string   `json:"node_id"`
		Query      *vQuery  `json:"query"`
		Value      *string  `json:"value"`
		SecretRef  *string  `json:"secret_ref"`
		Values     []string `json:"values"`
		Key        *string  `json:"key"`
		ArtifactID string   `json:"artifact_id"`
		ContextID  string   `json:"context_id"`
		WaitUntil  string   `json:"wait_until"`
		TimeoutMs  *int     `json:"timeout_ms"`
	}
	vExtract struct {
		Kind      string            `json:"kind"`
		NodeID    string            `json:"node_id"`
		Query     *vQuery           `json:"query"`
		ContextID string            `json:"context_id"`
		Schema    json.RawMessage   `json:"schema"`
		Fields    map[string]vQuery `json:"fields"`
	}
	vEvidence struct {
		Kinds     []string `json:"kinds"`
		ContextID string   `json:"context_id"`
		FullPage  bool     `json:"full_page"`
		NodeID    string   `json:"node_id"`
	}
)

var (
	actActions    = []string{"click", "fill", "clear", "select_option", "check", "uncheck", "press_key", "hover", "focus", "scroll_into_view", "upload_file"}
	waitUntils    = []string{"", "commit", "domcontentloaded", "load", "networkidle"}
	extractKinds  = []string{"text", "table", "attributes", "links", "schema"}
	evidenceKinds = []string{"screenshot", "dom_snapshot", "ax_snapshot"}
)

// validateProposal checks a proposed step against the step schema (the public vocabulary only,
// closed arguments, bounded strings) and returns it as a plan step. What the step may do on which
// origin is not its business: the use-cases that run it apply the task's policy.
func validateProposal(p proposal) (app.PlanStep, error) {
	args := bytes.TrimSpace(p.Args)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	decode := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(args))
		d.DisallowUnknownFields()
		if err := d.Decode(v); err != nil {
			return fmt.Errorf("the arguments of a %s step do not match its schema: %w", p.Op, err)
		}
		return nil
	}
	bad := func(format string, a ...any) (app.PlanStep, error) {
		return app.PlanStep{}, fmt.Errorf(format, a...)
	}
	timeout := func(ms *int) bool { return ms == nil || (*ms >= 1 && *ms <= 300000) }
	switch p.Op {
	case "navigate":
		var a vNavigate
		if err := decode(&a); err != nil {
			return app.PlanStep{}, err
		}
		if a.URL == "" || len(a.URL) > 8192 || !(strings.HasPrefix(a.URL, "http://") || strings.HasPrefix(a.URL, "https://")) {
			return bad("navigate needs an absolute http(s) url")
		}
		if !slices.Contains(waitUntils, a.WaitUntil) || !timeout(a.TimeoutMs) {
			return bad("navigate: wait_until or timeout_ms out of range")
		}
	case "observe":
		var a vObserve
		if err := decode(&a); err != nil {
			return app.PlanStep{}, err
		}
		if (a.Mode != "" && a.Mode != "interactive" && a.Mode != "full") || (a.MaxNodes != nil && (*a.MaxNodes < 1 || *a.MaxNodes > 5000)) {
			return bad("observe: mode or max_nodes out of range")
		}
	case "act":
		var a vAct
		if err := decode(&a); err != nil {
			return app.PlanStep{}, err
		}
		if !slices.Contains(actActions, a.Action) {
			return bad("act: unknown action %q", truncate(a.Action, 40))
		}
		if (a.NodeID == "") == (a.Query == nil) {
			return bad("act needs exactly one of node_id and query")
		}
		if a.Query != nil && !a.Query.valid() {
			return bad("act: the query is empty or too long")
		}
		if (a.Value != nil && len(*a.Value) > 65536) || len(a.Values) > 100 || (a.Key != nil && (len(*a.Key) == 0 || len(*a.Key) > 64)) {
			return bad("act: value, values or key out of range")
		}
		if a.SecretRef != nil && (a.Action != "fill" || a.Value != nil || !app.ValidSecretRef(*a.SecretRef)) {
			return bad("act: secret_ref (sec_…) is for a fill, instead of its value")
		}
		if a.Action == "fill" && a.Value == nil && a.SecretRef == nil {
			return bad("act fill needs a value or a secret_ref")
		}
		if !slices.Contains(waitUntils, a.WaitUntil) || !timeout(a.TimeoutMs) {
			return bad("act: wait_until or timeout_ms out of range")
		}
	case "extract":
		var a vExtract
		if err := decode(&a); err != nil {
			return app.PlanStep{}, err
		}
		if !slices.Contains(extractKinds, a.Kind) || (a.NodeID != "" && a.Query != nil) || (a.Query != nil && !a.Query.valid()) {
			return bad("extract: kind or target out of range")
		}
	case "capture_evidence":
		var a vEvidence
		if err := decode(&a); err != nil {
			return app.PlanStep{}, err
		}
		if len(a.Kinds) == 0 || len(a.Kinds) > 3 {
			return bad("capture_evidence needs one to three kinds")
		}
		for _, k := range a.Kinds {
			if !slices.Contains(evidenceKinds, k) {
				return bad("capture_evidence: unknown kind %q", truncate(k, 40))
			}
		}
	default:
		return bad("unknown step kind %q: the vocabulary is navigate, observe, act, extract, capture_evidence (or done)", truncate(p.Op, 40))
	}
	return app.PlanStep{Op: p.Op, Args: json.RawMessage(args), MaxAttempts: 1}, nil
}

func (q *vQuery) valid() bool {
	n := 0
	for _, s := range []*string{q.Role, q.Name, q.Text, q.Label, q.Placeholder, q.TestID, q.Within} {
		if s == nil {
			continue
		}
		if len(*s) == 0 || len(*s) > 1000 {
			return false
		}
		n++
	}
	return n > 0
}
