package apimodel

import (
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
}

func TestContractOperations(t *testing.T) {
	d, err := LoadOpenAPI(bundlePath)
	if err != nil {
		t.Fatal(err)
	}
	ops := d.ContractOperations()
	if len(ops) != 20 {
		t.Fatalf("%d contract operations, want 20", len(ops))
	}
	for _, o := range ops {
		if got := o.Method + " " + o.Path; routes[o.ID] != got {
			t.Errorf("%s: %s, want %s", o.ID, got, routes[o.ID])
		}
		if o.Method == "POST" && o.Body != o.PascalID()+"Request" {
			t.Errorf("%s: body %q", o.ID, o.Body)
		}
		if o.Binary() != (o.ID == "get_artifact") {
			t.Errorf("%s: binary %v", o.ID, o.Binary())
		}
		if !o.Binary() && o.Primary().Schema != o.PascalID()+"Response" {
			t.Errorf("%s: primary answer %s", o.ID, o.Primary().Schema)
		}
	}
	var nonContract []string
	for _, o := range d.Operations {
		if !o.Contract {
			nonContract = append(nonContract, o.ID)
		}
	}
	if got := strings.Join(nonContract, ","); got != "get_service_info,list_approvals,stream_events,list_secrets,create_secret,delete_secret,rotate_secret,stream_task_events,hand_back_task,take_over_task,get_healthz,get_readyz" {
		t.Errorf("non-contract operations %s", got)
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
