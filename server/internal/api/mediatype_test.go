package api_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/apigen"
)

// bodyOperations lists "METHOD path" of every operation of the spec that takes a request body,
// with its path parameters filled in, and checks each lists a 415 response.
func bodyOperations(t *testing.T) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody *json.RawMessage           `json:"requestBody"`
			Responses   map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(apigen.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("{task_id}", "tsk_x", "{session_id}", "bs_x", "{approval_id}", "apr_x", "{artifact_id}", "art_x", "{secret_id}", "sec_x")
	var out []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if op.RequestBody == nil {
				continue
			}
			if _, ok := op.Responses["415"]; !ok {
				t.Errorf("%s %s takes a body but lists no 415 response", method, path)
			}
			out = append(out, strings.ToUpper(method)+" "+fill.Replace(path))
		}
	}
	sort.Strings(out)
	if len(out) < 10 {
		t.Fatalf("only %d body-carrying operations found in the spec", len(out))
	}
	return out
}

// A request body is accepted only as application/json: a cross-site "simple" request (a form,
// or a fetch without a preflight: text/plain, urlencoded, multipart) or a body without any
// Content-Type answers 415 unsupported_media_type, on every body-carrying operation, before it
// becomes a command.
func TestBodyNeedsApplicationJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ops := bodyOperations(t)
	for _, ct := range []string{"", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/merge-patch+json", "application/json; charset=latin1", "application/json;;"} {
		for i, op := range ops {
			method, path, _ := strings.Cut(op, " ")
			key := fmt.Sprintf("mt-%d-%s", i, strings.NewReplacer(" ", "", "/", "", ";", "", "=", "").Replace(ct))
			// "" deletes the application/json do() sets: a body without a type.
			r := b.do(t, method, path, `{"goal":"g","policy":{"allowed_origins":[]}}`, "Content-Type", ct, "Idempotency-Key", key)
			if r.status != 415 || r.code() != "unsupported_media_type" || r.field("status") != float64(415) ||
				r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("%s with Content-Type %q: %d %s, want 415 unsupported_media_type", op, ct, r.status, r.raw)
			}
		}
	}
	// Nothing refused was recorded: the keys are still free.
	r := b.do(t, "POST", "/bap/v1/tasks", taskBody, "Idempotency-Key", "mt-0-textplain")
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("a refused request's key was recorded: %d %s", r.status, r.raw)
	}
	// application/json with charset=utf-8 is JSON; an optional body may be absent without a type.
	if r := b.do(t, "POST", "/bap/v1/tasks", taskBody, "Content-Type", "application/json; charset=UTF-8", "Idempotency-Key", "mt-utf8"); r.status != 201 {
		t.Fatalf("application/json; charset=UTF-8: %d %s", r.status, r.raw)
	}
	taskID := b.createTask(t)
	if r := b.do(t, "POST", "/bap/v1/tasks/"+taskID+"/cancel", "", "Idempotency-Key", "mt-nobody"); r.status != 200 {
		t.Fatalf("an absent optional body: %d %s", r.status, r.raw)
	}
}

func TestIsJSONMediaType(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"application/json": true, "Application/JSON": true, "application/json; charset=utf-8": true, "application/json;charset=UTF-8": true,
		"": false, "text/plain": false, "application/json; charset=iso-8859-1": false, "application/json; v=1": false,
		"application/problem+json": false, "application/jsonx": false, "application/json, text/plain": false,
	} {
		if got := api.IsJSONMediaType(v); got != want {
			t.Errorf("IsJSONMediaType(%q) = %v, want %v", v, got, want)
		}
	}
}
