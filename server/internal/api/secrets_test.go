package api_test

import (
	"bytes"
	"io/fs"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/originweave/bap/spec"
)

// secretSchema compiles one spec schema (with every schema file it may $ref).
func secretSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	files, err := fs.Glob(spec.FS, "schemas/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(spec.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource("https://bap.invalid/"+f, doc); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Compile("https://bap.invalid/schemas/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func conforms(t *testing.T, name string, raw []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := secretSchema(t, name).Validate(v); err != nil {
		t.Fatalf("%s does not validate: %v\n%s", name, err, raw)
	}
}

// The operator's secrets API (issue #17): only the operator (bap:secrets.write) stores, lists,
// rotates and deletes secrets, and no answer carries a value; the agent lists, with
// bap:secrets.read, the names usable on its task's origins, and a deleted or unknown reference is
// refused with its own code.
func TestSecretsAPIIsTheOperatorsAndShowsNoValue(t *testing.T) {
	t.Parallel()
	const canary = "pw-CANARY-api-4f7d2c"
	b := setupLocal(t)
	put := `{"name":"shop-login","origins":["https://SHOP.example.com:443"],"note":"buyer","value":"` + canary + `"}`

	// The agent (TCP loopback) holds neither the operator's scope nor any way to claim it.
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/bap/v1/secrets", put},
		{"GET", "/bap/v1/secrets", ""},
		{"POST", "/bap/v1/secrets/sec_x/rotate", `{"value":"other-value"}`},
		{"POST", "/bap/v1/secrets/sec_x/delete", `{}`},
	} {
		r := b.do(t, false, req.method, req.path, req.body, "Idempotency-Key", "agent-"+req.path)
		if r.status != 403 || r.code() != "insufficient_scope" || !strings.Contains(r.field("detail").(string), "bap secret put") {
			t.Fatalf("the agent's %s %s: %d %s", req.method, req.path, r.status, r.raw)
		}
	}

	r := b.do(t, true, "POST", "/bap/v1/secrets", put, "Idempotency-Key", "put-1")
	if r.status != 201 || r.field("secret", "name") != "shop-login" || r.field("secret", "version") != float64(1) {
		t.Fatalf("create_secret: %d %s", r.status, r.raw)
	}
	conforms(t, "CreateSecretResponse", r.raw)
	id := r.field("secret", "secret_id").(string)
	if o := r.field("secret", "origins").([]any); len(o) != 1 || o[0] != "https://shop.example.com" {
		t.Fatalf("origins not normalised: %v", o)
	}
	responses := [][]byte{r.raw}
	if again := b.do(t, true, "POST", "/bap/v1/secrets", put, "Idempotency-Key", "put-1"); again.status != 201 ||
		again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.raw, r.raw) {
		t.Fatalf("replayed create_secret: %d %s", again.status, again.raw)
	}
	if dup := b.do(t, true, "POST", "/bap/v1/secrets", put, "Idempotency-Key", "put-2"); dup.status != 400 || dup.code() != "invalid_request" {
		t.Fatalf("a second live secret of the name: %d %s", dup.status, dup.raw)
	}
	l := b.do(t, true, "GET", "/bap/v1/secrets", "")
	conforms(t, "ListSecretsResponse", l.raw)
	if ss := l.field("secrets").([]any); l.status != 200 || len(ss) != 1 {
		t.Fatalf("list_secrets: %d %s", l.status, l.raw)
	}
	responses = append(responses, l.raw)
	rot := b.do(t, true, "POST", "/bap/v1/secrets/"+id+"/rotate", `{"value":"`+canary+`-v2"}`, "Idempotency-Key", "rot-1")
	if rot.status != 200 || rot.field("secret", "version") != float64(2) || rot.field("secret", "rotated_at") == nil {
		t.Fatalf("rotate_secret: %d %s", rot.status, rot.raw)
	}
	conforms(t, "RotateSecretResponse", rot.raw)
	responses = append(responses, rot.raw)

	// The agent lists what it may use on a task: on the secret's origin, yes; elsewhere, nothing.
	for _, c := range []struct {
		origins string
		want    int
	}{{`["https://shop.example.com"]`, 1}, {`["https://*.example.com"]`, 1}, {`["https://other.example.net"]`, 0}} {
		tr := b.do(t, false, "POST", "/bap/v1/tasks", `{"goal":"g","policy":{"allowed_origins":`+c.origins+`}}`, "Idempotency-Key", "task-"+c.origins)
		if tr.status != 201 {
			t.Fatalf("create_task: %d %s", tr.status, tr.raw)
		}
		ls := b.do(t, false, "GET", "/bap/v1/tasks/"+tr.field("task", "task_id").(string)+"/secrets", "")
		conforms(t, "ListTaskSecretsResponse", ls.raw)
		if got := ls.field("secrets").([]any); ls.status != 200 || len(got) != c.want ||
			(c.want == 1 && got[0].(map[string]any)["secret_id"] != id) || strings.Contains(string(ls.raw), "buyer") {
			t.Fatalf("list_task_secrets on %s: %d %s", c.origins, ls.status, ls.raw)
		}
		responses = append(responses, ls.raw)
	}
	if ls := b.do(t, false, "GET", "/bap/v1/tasks/tsk_unknown/secrets", ""); ls.status != 404 || ls.code() != "not_found" {
		t.Fatalf("list_task_secrets of an unknown task: %d %s", ls.status, ls.raw)
	}

	del := b.do(t, true, "POST", "/bap/v1/secrets/"+id+"/delete", `{}`, "Idempotency-Key", "del-1")
	if del.status != 200 || del.field("deleted") != true || del.field("secret_id") != id {
		t.Fatalf("delete_secret: %d %s", del.status, del.raw)
	}
	conforms(t, "DeleteSecretResponse", del.raw)
	if again := b.do(t, true, "POST", "/bap/v1/secrets/"+id+"/delete", `{}`, "Idempotency-Key", "del-2"); again.status != 404 || again.code() != "not_found" {
		t.Fatalf("deleting twice: %d %s", again.status, again.raw)
	}
	if r := b.do(t, true, "POST", "/bap/v1/secrets/"+id+"/rotate", `{"value":"after-delete"}`, "Idempotency-Key", "rot-2"); r.status != 404 {
		t.Fatalf("rotating a deleted secret: %d %s", r.status, r.raw)
	}
	if l := b.do(t, true, "GET", "/bap/v1/secrets", ""); len(l.field("secrets").([]any)) != 0 {
		t.Fatalf("a deleted secret is still listed: %s", l.raw)
	}
	for _, raw := range responses {
		if bytes.Contains(raw, []byte(canary)) {
			t.Fatalf("an answer carries the value: %s", raw)
		}
	}
}
