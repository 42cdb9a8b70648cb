package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/originweave/bap/server/internal/app"
)

// The protocol records written and read, and verifiable task results (issue #23 items 1 and 5,
// ADR 0019).

// matchesSchema fails the test when raw does not validate against the spec's schema name.
func matchesSchema(t *testing.T, name string, raw []byte) {
	t.Helper()
	sch, err := eventSchema(name)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(doc); err != nil {
		t.Fatalf("does not match %s.json: %v\n%s", name, err, raw)
	}
}

// Every handle observe and query_nodes hand out is recorded under its epoch; a handle the browser
// no longer knows is stale with its reason — epoch_superseded in its own session, session_lost
// in another session of the task once its own ended — and one no session issued is not found.
func TestNodeHandlesAreDurable(t *testing.T) {
	t.Parallel()
	s, sh := newStack(t), newShop(t)
	taskID, sid := openShop(t, s, sh, "handles")
	place := s.query(t, sid, map[string]any{"role": "button", "name": "Place order"})
	obs := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/observe", "", map[string]any{})
	ctx := context.Background()
	var n int
	var recordedSession string
	if err := s.db.QueryRow(ctx, `SELECT count(*) OVER (), c.session_id FROM node_handle_record h
		JOIN document_epoch e ON e.epoch_id = h.epoch_id JOIN browsing_context c ON c.context_id = e.context_id
		WHERE h.node_handle_id = $1 AND h.epoch_id = $2`, place, obs.str("epoch_id")).Scan(&n, &recordedSession); err != nil || n != 1 || recordedSession != sid {
		t.Fatalf("record of %s: %d rows of session %q, %v; want 1 of %s", place, n, recordedSession, err, sid)
	}

	act := func(session, key, handle string) reply {
		r := s.call(t, "POST", "/bap/v1/browser-sessions/"+session+"/act", key, map[string]any{"action": "click", "node_id": handle})
		if r.status >= 400 {
			matchesSchema(t, "Problem", r.raw)
		}
		return r
	}
	// Another document in the same session: the handle's epoch is superseded.
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/navigate", "handles-reload", map[string]any{"url": sh.srv.URL + "/checkout"})
	if r := act(sid, "handles-act-1", place); r.status != 409 || r.str("code") != "stale_node_handle" || r.str("reason") != app.HandleEpochSuperseded {
		t.Fatalf("a handle of the previous document: %d %s, want 409 stale_node_handle (epoch_superseded)", r.status, r.raw)
	}
	fresh := s.query(t, sid, map[string]any{"role": "button", "name": "Place order"})

	// A second session of the task: the first's live handle names nothing here (404); once the
	// first session has ended, its handles are stale with session_lost — never resolved here.
	other := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "handles-session-2", map[string]any{}).str("session", "session_id")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+other+"/navigate", "handles-nav-2", map[string]any{"url": sh.srv.URL + "/checkout"})
	if r := act(other, "handles-act-2", fresh); r.status != 404 || r.str("code") != "not_found" {
		t.Fatalf("a live handle of another session: %d %s, want 404 not_found", r.status, r.raw)
	}
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/close", "handles-close-1", map[string]any{})
	r := act(other, "handles-act-3", fresh)
	if r.status != 409 || r.str("code") != "stale_node_handle" || r.str("reason") != app.HandleSessionLost || r.str("receipt", "outcome") != "rejected" {
		t.Fatalf("a handle of the closed session: %d %s, want 409 stale_node_handle (session_lost), rejected", r.status, r.raw)
	}
	if got := sh.orders.Load(); got != 0 {
		t.Fatalf("%d orders placed by stale handles", got)
	}
	if r := act(other, "handles-act-4", "nd_00000000"); r.status != 404 || r.str("code") != "not_found" {
		t.Fatalf("a handle no session issued: %d %s, want 404 not_found", r.status, r.raw)
	}
	// query_nodes within a stale handle says the same.
	q := s.call(t, "POST", "/bap/v1/browser-sessions/"+other+"/query-nodes", "", map[string]any{"query": map[string]any{"role": "button", "within": fresh}})
	if q.status != 409 || q.str("reason") != app.HandleSessionLost {
		t.Fatalf("query_nodes within a handle of the closed session: %d %s", q.status, q.raw)
	}
}

// GET /bap/v1 lists what the node recorded at start in protocol_adapter, with versions — not a
// list kept in code.
func TestServiceInfoReadsTheRecordedAdapters(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	info := func() []map[string]any {
		r := s.must(t, 200, "GET", "/bap/v1", "", nil)
		matchesSchema(t, "ServiceInfo", r.raw)
		var v struct {
			Adapters []map[string]any `json:"adapters"`
		}
		if err := json.Unmarshal(r.raw, &v); err != nil {
			t.Fatal(err)
		}
		return v.Adapters
	}
	if got := info(); len(got) != 0 {
		t.Fatalf("adapters before the node recorded any: %v", got)
	}
	product, protocol := shared.Version()
	if !strings.Contains(product, "/") || protocol == "" {
		t.Fatalf("browser version %q, protocol %q", product, protocol)
	}
	if err := s.svc.RecordAdapters(context.Background(), []app.ProtocolAdapter{
		{ID: app.AdapterBAPHTTP, Name: "BAP over HTTP", ProtocolVersion: "1.0.0"},
		{ID: app.AdapterMCP, Name: "Model Context Protocol", ProtocolVersion: "2026-07-28"},
		{ID: app.AdapterCDP, Name: "Chrome DevTools Protocol", ProtocolVersion: protocol, Implementation: product},
	}); err != nil {
		t.Fatal(err)
	}
	got := info()
	if len(got) != 3 || got[0]["adapter_id"] != "bap-http" || got[1]["adapter_id"] != "cdp" || got[2]["adapter_id"] != "mcp" ||
		got[1]["implementation"] != product || got[1]["protocol_version"] != protocol || got[2]["protocol_version"] != "2026-07-28" {
		t.Fatalf("adapters %v", got)
	}
	// The answer is the table's: change the row, the answer follows.
	if _, err := s.db.Exec(context.Background(), `UPDATE node_protocol_adapter SET implementation = 'Chrome/0.0' WHERE adapter_id = 'cdp'`); err != nil {
		t.Fatal(err)
	}
	if got := info(); got[1]["implementation"] != "Chrome/0.0" {
		t.Fatalf("after the row changed: %v", got)
	}
}

// A closed task carries result {summary, evidence, verification, integrity}: verified only with a
// postcondition that held and evidence; the digest is the manifest artifact's, verify_artifact
// re-builds the manifest from the records, and a changed receipt makes it invalid.
func TestTaskResultIsVerifiable(t *testing.T) {
	t.Parallel()
	s, sh := newStack(t), newShop(t)
	ctx := context.Background()

	// Verified: the postcondition holds on the page the close's evidence shows.
	taskID, sid := openShop(t, s, sh, "result")
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sid+"/navigate", "result-thanks", map[string]any{"url": sh.srv.URL + "/thanks?order=7"})
	closed := s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/close", "result-close", map[string]any{})
	matchesSchema(t, "CloseTaskResponse", closed.raw)
	got := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID, "", nil)
	matchesSchema(t, "GetTaskResponse", got.raw)
	var tr struct {
		Task struct {
			State  string `json:"state"`
			Result struct {
				Summary  string `json:"summary"`
				Evidence []struct {
					ArtifactID string `json:"artifact_id"`
					SHA256     string `json:"sha256"`
				} `json:"evidence"`
				Verification struct{ State, Reason string } `json:"verification"`
				Integrity    struct {
					Algorithm          string `json:"algorithm"`
					Digest             string `json:"digest"`
					ManifestArtifactID string `json:"manifest_artifact_id"`
				} `json:"integrity"`
				Anchor *struct {
					Seq    int64  `json:"seq"`
					Reason string `json:"reason"`
					Digest string `json:"digest"`
				} `json:"anchor"`
			} `json:"result"`
		} `json:"task"`
	}
	if err := json.Unmarshal(got.raw, &tr); err != nil {
		t.Fatal(err)
	}
	res := tr.Task.Result
	// The result carries the anchor made when the task ended (ADR 0033): the head of its history
	// chain then (the sessions' closing comes after), which get_task_audit finds valid.
	audit := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/audit", "", nil)
	matchesSchema(t, "GetTaskAuditResponse", audit.raw)
	var ar struct {
		Status  string `json:"status"`
		HeadSeq int64  `json:"head_seq"`
		Anchors []struct {
			Seq    int64  `json:"seq"`
			Digest string `json:"digest"`
			Valid  bool   `json:"valid"`
		} `json:"anchors"`
	}
	if err := json.Unmarshal(audit.raw, &ar); err != nil {
		t.Fatal(err)
	}
	if a := res.Anchor; a == nil || a.Reason != "task_ended" || ar.Status != "valid" || a.Seq > ar.HeadSeq ||
		len(ar.Anchors) == 0 || ar.Anchors[0].Seq != a.Seq || ar.Anchors[0].Digest != a.Digest || !ar.Anchors[0].Valid {
		t.Fatalf("result anchor %+v, audit %s", a, audit.raw)
	}
	if tr.Task.State != "succeeded" || res.Verification.State != "verified" || res.Verification.Reason == "" || res.Summary == "" ||
		len(res.Evidence) < 2 || res.Integrity.Algorithm != "sha256" || len(res.Integrity.Digest) != 64 {
		t.Fatalf("result of a verified close: %s", got.raw)
	}
	if !strings.Contains(string(closed.raw), res.Integrity.Digest) {
		t.Fatalf("close_task's answer does not carry the result get_task shows: %s", closed.raw)
	}
	// The manifest: its bytes hash to the digest and list every receipt through the close's own
	// and every evidence digest.
	status, _, manifest := s.getRaw(t, "/bap/v1/artifacts/"+res.Integrity.ManifestArtifactID)
	sum := sha256.Sum256(manifest)
	if status != 200 || hex.EncodeToString(sum[:]) != res.Integrity.Digest {
		t.Fatalf("manifest: %d, sha256 %x, want %s", status, sum, res.Integrity.Digest)
	}
	var m struct {
		TaskID   string `json:"task_id"`
		State    string `json:"state"`
		Receipts []struct {
			ReceiptID string `json:"receipt_id"`
			Operation string `json:"operation"`
		} `json:"receipts"`
		Evidence []struct {
			SHA256 string `json:"sha256"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	closeReceipt := closed.str("receipt", "receipt_id")
	if m.TaskID != taskID || m.State != "succeeded" || len(m.Receipts) < 4 || m.Receipts[len(m.Receipts)-1].ReceiptID != closeReceipt ||
		len(m.Evidence) != len(res.Evidence) || m.Evidence[0].SHA256 != res.Evidence[0].SHA256 {
		t.Fatalf("manifest %s (close receipt %s)", manifest, closeReceipt)
	}
	verify := func() bool {
		r := s.must(t, 200, "POST", "/bap/v1/artifacts/"+res.Integrity.ManifestArtifactID+"/verify", "", map[string]any{})
		v, _ := r.body["valid"].(bool)
		return v
	}
	if !verify() {
		t.Fatal("verify_artifact on an untouched manifest: invalid")
	}
	// A command rejected after the close (close_task again) is not part of the result.
	s.must(t, 409, "POST", "/bap/v1/tasks/"+taskID+"/close", "result-close-again", map[string]any{})
	if !verify() {
		t.Fatal("verify_artifact after a later rejected command: invalid")
	}
	// A receipt changed afterwards: the records no longer build the manifest.
	if _, err := s.db.Exec(ctx, `UPDATE task_receipt SET detail = 'rewritten' WHERE receipt_id = $1`, m.Receipts[1].ReceiptID); err != nil {
		t.Fatal(err)
	}
	if !verify() {
		t.Fatal("a receipt's detail is not in the manifest; changing it must not matter")
	}
	if _, err := s.db.Exec(ctx, `UPDATE task_receipt SET outcome = 'no_side_effect' WHERE receipt_id = $1`, closeReceipt); err != nil {
		t.Fatal(err)
	}
	if verify() {
		t.Fatal("verify_artifact after the close's receipt was rewritten: still valid")
	}
	// The result itself is written once.
	if _, err := s.db.Exec(ctx, `UPDATE task_result SET verification_state = 'verified' WHERE task_id = $1`, taskID); err == nil {
		t.Fatal("task_result accepted an UPDATE")
	}

	// Succeeded without a postcondition, and without evidence (no browser session): unverified
	// with its reason, whatever anyone claimed.
	for _, tc := range []struct {
		name, reason string
		session      bool
	}{
		{name: "no-postcondition", reason: "no postcondition", session: true},
		{name: "no-evidence", reason: "no evidence"},
	} {
		id := s.must(t, 201, "POST", "/bap/v1/tasks", "result-"+tc.name, map[string]any{
			"goal": "claim success", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}},
		}).str("task", "task_id")
		if tc.session {
			sess := s.must(t, 201, "POST", "/bap/v1/tasks/"+id+"/browser-sessions", "result-"+tc.name+"-s", map[string]any{}).str("session", "session_id")
			s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sess+"/navigate", "result-"+tc.name+"-n", map[string]any{"url": sh.srv.URL + "/thanks"})
		}
		r := s.must(t, 200, "POST", "/bap/v1/tasks/"+id+"/close", "result-"+tc.name+"-close", map[string]any{})
		var c struct {
			Task struct {
				State  string `json:"state"`
				Result struct {
					Evidence     []any                          `json:"evidence"`
					Verification struct{ State, Reason string } `json:"verification"`
				} `json:"result"`
			} `json:"task"`
		}
		if err := json.Unmarshal(r.raw, &c); err != nil {
			t.Fatal(err)
		}
		if c.Task.State != "succeeded" || c.Task.Result.Verification.State != "unverified" ||
			!strings.Contains(c.Task.Result.Verification.Reason, tc.reason) || (len(c.Task.Result.Evidence) == 0) == tc.session {
			t.Errorf("%s: %s", tc.name, r.raw)
		}
	}
}

// A goal-driven task whose planner says done and whose verifier model says yes, without a
// postcondition: it finishes succeeded, and its result is unverified — the models' claims are
// recorded (verifier.judged) but check nothing.
func TestModelClaimsLeaveTheResultUnverified(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	fake := newFake(step("navigate", map[string]any{"url": sh.srv.URL + "/thanks"}), step("done", nil))
	s := newStack(t, withOrchestrator(fake))
	s.startWorkers(t)
	taskID := s.createAutonomous(t, "claims", map[string]any{"goal": "place the order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}}})
	done := s.awaitState(t, taskID, "succeeded", "failed")
	matchesSchema(t, "GetTaskResponse", done.raw)
	var got struct {
		Task struct {
			State  string `json:"state"`
			Result struct {
				Verification struct{ State, Reason string } `json:"verification"`
			} `json:"result"`
		} `json:"task"`
	}
	if err := json.Unmarshal(done.raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Task.State != "succeeded" || got.Task.Result.Verification.State != "unverified" ||
		!strings.Contains(got.Task.Result.Verification.Reason, "no postcondition") {
		t.Fatalf("a task the models called done: %s", done.raw)
	}
	if judged := ofType(s.history(t, taskID), "verifier.judged"); len(judged) != 1 || data(judged[0])["verdict"] != "yes" {
		t.Fatalf("verifier.judged: %v", judged)
	}
}
