package api_test

import "testing"

// upload_file needs bap:artifacts.read beside bap:browser.act — it sends an artifact into a page,
// and get_artifact needs that capability to read one — for an act and for a plan's step alike.
func TestUploadFileNeedsArtifactsRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	actOnly := "bap:browser.act bap:tasks.write"
	upload := `{"action":"upload_file","query":{"label":"Document"},"artifact_id":"art_x"}`
	if r := b.do(t, "POST", "/bap/v1/browser-sessions/bs_x/act", upload, "X-Test-Scopes", actOnly, "Idempotency-Key", "up-1"); r.status != 403 || r.code() != "insufficient_scope" {
		t.Fatalf("upload_file without bap:artifacts.read: %d %s", r.status, r.raw)
	}
	// With the capability the request goes on (here to the use-case, which has no browser).
	if r := b.do(t, "POST", "/bap/v1/browser-sessions/bs_x/act", upload, "X-Test-Scopes", actOnly+" bap:artifacts.read", "Idempotency-Key", "up-2"); r.status == 403 {
		t.Fatalf("upload_file with bap:artifacts.read: %d %s", r.status, r.raw)
	}
	// Other actions need no more than before.
	if r := b.do(t, "POST", "/bap/v1/browser-sessions/bs_x/act", `{"action":"click","node_id":"nd_1"}`, "X-Test-Scopes", actOnly, "Idempotency-Key", "up-3"); r.status == 403 {
		t.Fatalf("click: %d %s", r.status, r.raw)
	}
	plan := `{"goal":"g","policy":{"allowed_origins":["https://shop.example.com"]},"plan":[{"op":"navigate","args":{"url":"https://shop.example.com/"}},` +
		`{"op":"act","args":` + upload + `}]}`
	if r := b.do(t, "POST", "/bap/v1/tasks", plan, "X-Test-Scopes", actOnly, "Idempotency-Key", "up-plan-1"); r.status != 403 || r.code() != "insufficient_scope" {
		t.Fatalf("a plan with upload_file without bap:artifacts.read: %d %s", r.status, r.raw)
	}
	if r := b.do(t, "POST", "/bap/v1/tasks", plan, "X-Test-Scopes", actOnly+" bap:artifacts.read", "Idempotency-Key", "up-plan-2"); r.status != 201 {
		t.Fatalf("a plan with upload_file and bap:artifacts.read: %d %s", r.status, r.raw)
	}
}
