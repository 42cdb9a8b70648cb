package apimodel

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

const bundlePath = "../../server/internal/apigen/openapi.gen.json"

// routes is CONTRACT.md's operation table.
var routes = map[string]string{
	"create_task": "POST /bap/v1/tasks", "get_task": "GET /bap/v1/tasks/{task_id}",
	"list_task_events": "GET /bap/v1/tasks/{task_id}/events", "cancel_task": "POST /bap/v1/tasks/{task_id}/cancel",
	"resume_task": "POST /bap/v1/tasks/{task_id}/resume", "close_task": "POST /bap/v1/tasks/{task_id}/close",
	"create_browser_session":     "POST /bap/v1/tasks/{task_id}/browser-sessions",
	"checkpoint_browser_session": "POST /bap/v1/browser-sessions/{session_id}/checkpoint",
	"close_browser_session":      "POST /bap/v1/browser-sessions/{session_id}/close",
	"navigate":                   "POST /bap/v1/browser-sessions/{session_id}/navigate",
	"observe":                    "POST /bap/v1/browser-sessions/{session_id}/observe",
	"query_nodes":                "POST /bap/v1/browser-sessions/{session_id}/query-nodes",
	"act":                        "POST /bap/v1/browser-sessions/{session_id}/act",
	"extract":                    "POST /bap/v1/browser-sessions/{session_id}/extract",
	"capture_evidence":           "POST /bap/v1/browser-sessions/{session_id}/evidence",
	"list_task_secrets":          "GET /bap/v1/tasks/{task_id}/secrets",
	"request_approval":           "POST /bap/v1/tasks/{task_id}/approvals",
	"resolve_approval":           "POST /bap/v1/approvals/{approval_id}/resolve",
	"get_artifact":               "GET /bap/v1/artifacts/{artifact_id}",
	"verify_artifact":            "POST /bap/v1/artifacts/{artifact_id}/verify",
	"get_task_audit":             "GET /bap/v1/tasks/{task_id}/audit",
	"get_task_bundle":            "GET /bap/v1/tasks/{task_id}/bundle",
	"replay_task":                "POST /bap/v1/tasks/{task_id}/replay",
}

func TestContractOperations(t *testing.T) {
	d, err := LoadOpenAPI(bundlePath)
	if err != nil {
		t.Fatal(err)
	}
	ops := d.ContractOperations()
	if len(ops) != 23 {
		t.Fatalf("%d contract operations, want 23", len(ops))
	}
	for _, o := range ops {
		if got := o.Method + " " + o.Path; routes[o.ID] != got {
			t.Errorf("%s: %s, want %s", o.ID, got, routes[o.ID])
		}
		if o.Method == "POST" && o.Body != o.PascalID()+"Request" {
			t.Errorf("%s: body %q", o.ID, o.Body)
		}
		if o.Binary() != (o.ID == "get_artifact" || o.ID == "get_task_bundle") {
			t.Errorf("%s: binary %v", o.ID, o.Binary())
		}
		if !o.Binary() && o.Primary().Schema != o.PascalID()+"Response" {
			t.Errorf("%s: primary answer %s", o.ID, o.Primary().Schema)
		}
	}
	var nonContract, sdkOnly []string
	for _, o := range d.Operations {
		if !o.Contract {
			nonContract = append(nonContract, o.ID)
		}
		if o.Contract && !o.MCPTool {
			sdkOnly = append(sdkOnly, o.ID)
		}
	}
	if got := strings.Join(nonContract, ","); got != "get_service_info,list_approvals,get_audit_keys,stream_events,list_secrets,create_secret,delete_secret,rotate_secret,stream_task_events,hand_back_task,take_over_task,get_healthz,get_readyz" {
		t.Errorf("non-contract operations %s", got)
	}
	// replay_task is mutating and starts a browser: the SDKs carry it, MCP does not expose it.
	if got := strings.Join(sdkOnly, ","); got != "replay_task" {
		t.Errorf("SDK methods that are not MCP tools: %s", got)
	}
	if n := len(d.MCPOperations()); n != 22 {
		t.Errorf("%d MCP tools, want 22", n)
	}
}

func TestEvents(t *testing.T) {
	events, err := LoadEvents("../../server/internal/apigen/asyncapi.gen.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) < 10 {
		t.Fatalf("%d events", len(events))
	}
	for _, e := range events {
		if !strings.HasSuffix(e.Payload, "Event") || strings.TrimSuffix(e.Payload, "Event")+"Data" != e.Data {
			t.Errorf("%s: payload %s data %s", e.Type, e.Payload, e.Data)
		}
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string][3]string{
		"create_task":     {"CreateTask", "createTask", "createTask"},
		"task_id":         {"TaskId", "taskId", "taskID"},
		"artifact_id":     {"ArtifactId", "artifactId", "artifactID"},
		"type":            {"Type", "type", "type_"},
		"query_nodes":     {"QueryNodes", "queryNodes", "queryNodes"},
		"from_checkpoint": {"FromCheckpoint", "fromCheckpoint", "fromCheckpoint"},
	} {
		if got := [3]string{Pascal(in), Camel(in), GoLocal(in)}; got != want {
			t.Errorf("%s: %v, want %v", in, got, want)
		}
	}
}

func TestRejectsBrokenConventions(t *testing.T) {
	base := `{"info":{"title":"t","version":"1"},"components":{"schemas":{"XRequest":{"description":"x","type":"object"},"XResponse":{"description":"x","type":"object","properties":{"a":{"description":"a","type":"string"}}}}},"paths":{"/x/{id}":{"post":%s}}}`
	for name, op := range map[string]string{
		"no x-bap-mutating":  `{"operationId":"x","parameters":[{"name":"id","in":"path","required":true}],"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XRequest"}}}},"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XResponse"}}}}}}`,
		"mutating, no key":   `{"operationId":"x","x-bap-mutating":true,"parameters":[{"name":"id","in":"path","required":true}],"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XRequest"}}}},"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XResponse"}}}}}}`,
		"undeclared path":    `{"operationId":"x","x-bap-mutating":false,"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XRequest"}}}},"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XResponse"}}}}}}`,
		"wrong body name":    `{"operationId":"x","x-bap-mutating":false,"parameters":[{"name":"id","in":"path","required":true}],"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XResponse"}}}},"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XResponse"}}}}}}`,
		"no Response schema": `{"operationId":"x","x-bap-mutating":false,"parameters":[{"name":"id","in":"path","required":true}],"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XRequest"}}}},"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XRequest"}}}}}}`,
	} {
		if _, err := ParseOpenAPI([]byte(strings.Replace(base, "%s", op, 1))); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A schema or a property without a description would leave an SDK item undocumented.
	for name, schemas := range map[string]string{
		"schema without description":   `"XRequest":{"type":"object"},"XResponse":{"description":"x","type":"object"}`,
		"property without description": `"XRequest":{"description":"x","type":"object","properties":{"a":{"type":"string"}}},"XResponse":{"description":"x","type":"object"}`,
		"$ref property without one":    `"XRequest":{"description":"x","type":"object","properties":{"a":{"$ref":"#/components/schemas/XResponse"}}},"XResponse":{"description":"x","type":"object"}`,
		"allOf property without one":   `"XRequest":{"description":"x","allOf":[{"$ref":"#/components/schemas/XResponse"},{"type":"object","properties":{"a":{"const":"a"}}}]},"XResponse":{"description":"x","type":"object"}`,
		"nested property without one":  `"XRequest":{"description":"x","type":"object","properties":{"a":{"description":"a","type":"object","properties":{"b":{"type":"string"}}}}},"XResponse":{"description":"x","type":"object"}`,
	} {
		doc := `{"info":{"title":"t","version":"1"},"components":{"schemas":{` + schemas + `}},"paths":{}}`
		if _, err := ParseOpenAPI([]byte(doc)); err == nil || !strings.Contains(err.Error(), "no description") {
			t.Errorf("%s: %v, want a missing description", name, err)
		}
	}
	ok := `{"operationId":"x","x-bap-mutating":false,"parameters":[{"name":"id","in":"path","required":true}],"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XRequest"}}}},"responses":{"200":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XResponse"}}}}}}`
	if _, err := ParseOpenAPI([]byte(strings.Replace(base, "%s", ok, 1))); err != nil {
		t.Errorf("valid document rejected: %v", err)
	}
}

// TestOneOfAnswers: a 2xx answer whose schema is a oneOf becomes one Response per member, the
// closed ones told apart by their shape (Only), and the model refuses a oneOf whose members a
// body could match twice, or whose order or form the generators cannot read.
func TestOneOfAnswers(t *testing.T) {
	const doc = `{"info":{"title":"t","version":"1"},"components":{"schemas":{` +
		`"XRequest":{"description":"x","type":"object"},` +
		`"XResponse":{"description":"x","type":"object","required":%s,"properties":{"r":{"description":"r","type":"string"},"a":{"description":"a","type":"string"}}},` +
		`"Closed":{"description":"only r","type":"object","required":["r"],"additionalProperties":false,"properties":{"r":{"description":"r","type":"string"}}},` +
		`"Open":{"description":"open","type":"object","required":["r"],"properties":{"r":{"description":"r","type":"string"}}}}},` +
		`"paths":{"/x":{"post":{"operationId":"x","x-bap-mutating":false,"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/XRequest"}}}},` +
		`"responses":{"200":{"description":"d","content":{"application/json":{"schema":%s}}}}}}}}`
	parse := func(required, schema string) (*Operation, error) {
		d, err := ParseOpenAPI([]byte(fmt.Sprintf(doc, required, schema)))
		if err != nil {
			return nil, err
		}
		return d.Operations[0], nil
	}
	o, err := parse(`["r","a"]`, `{"oneOf":[{"$ref":"#/components/schemas/XResponse"},{"$ref":"#/components/schemas/Closed"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	alts := o.Alternatives()
	if p := o.Primary(); p.Schema != "XResponse" || p.Only != nil || o.Shaped(p) {
		t.Errorf("primary %+v", p)
	}
	if len(alts) != 1 || alts[0].Schema != "Closed" || alts[0].Status != 200 || !o.Shaped(alts[0]) ||
		fmt.Sprint(alts[0].Only, alts[0].Required) != "[r] [r]" || alts[0].Description != "only r" {
		t.Errorf("alternatives %+v", alts)
	}
	for name, c := range map[string][2]string{
		"ambiguous: the result requires only what the closed one admits": {`["r"]`, `{"oneOf":[{"$ref":"#/components/schemas/XResponse"},{"$ref":"#/components/schemas/Closed"}]}`},
		"closed member first": {`["r","a"]`, `{"oneOf":[{"$ref":"#/components/schemas/Closed"},{"$ref":"#/components/schemas/XResponse"}]}`},
		"two open members":    {`["r","a"]`, `{"oneOf":[{"$ref":"#/components/schemas/XResponse"},{"$ref":"#/components/schemas/Open"}]}`},
		"inline member":       {`["r","a"]`, `{"oneOf":[{"$ref":"#/components/schemas/XResponse"},{"type":"object"}]}`},
		"one member":          {`["r","a"]`, `{"oneOf":[{"$ref":"#/components/schemas/XResponse"}]}`},
		"another keyword":     {`["r","a"]`, `{"oneOf":[{"$ref":"#/components/schemas/XResponse"},{"$ref":"#/components/schemas/Closed"}],"description":"d"}`},
	} {
		if _, err := parse(c[0], c[1]); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestInterruptedAnswers: the operations the server may answer with the replay of an interrupted
// command — those whose commands run in two phases (app.runTwoPhase), whose claim outlives the
// transaction that takes it — admit InterruptedCommandResponse, and no other operation does.
func TestInterruptedAnswers(t *testing.T) {
	d, err := LoadOpenAPI(bundlePath)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range d.Operations {
		for _, a := range o.Alternatives() {
			if a.Schema == "InterruptedCommandResponse" {
				if a.Status != 200 || a.Only == nil {
					t.Errorf("%s: interrupted answer %+v", o.ID, a)
				}
				got = append(got, fmt.Sprintf("%s:%v", o.ID, o.Shaped(a)))
			}
		}
	}
	sort.Strings(got)
	want := "act:true,cancel_task:true,capture_evidence:true,checkpoint_browser_session:true,close_browser_session:true," +
		"create_browser_session:false,create_task:false,hand_back_task:true,navigate:true,replay_task:false,request_approval:false," +
		"resolve_approval:true,resume_task:true"
	if strings.Join(got, ",") != want {
		t.Errorf("interrupted answers\n got %s\nwant %s", strings.Join(got, ","), want)
	}
}
