package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/originweave/bap/server/internal/historychain"
	"github.com/originweave/bap/server/internal/pgcluster"
)

// The keyed hash chain over history, tried as an auditor would (issue #20 item 1): a task that
// ended is anchored, and its chain verifies over HTTP and with `bap audit verify`; a superuser
// who edits one history row with the append-only trigger disabled is named by its seq, and one
// who drops the tail (and hides it in the task row) is named by the gap against the anchor.
func TestAuditVerifyNamesWhatChangedBehindTheServer(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	r := start(t, bin, dir)

	ended := func(key string) string {
		id := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", key+"-create",
			`{"goal":"a task an auditor checks","policy":{"allowed_origins":["https://shop.example.com"]}}`), "task", "task_id")
		mustAPI(t, 200, r.listen, "POST", "/bap/v1/tasks/"+id+"/cancel", key+"-cancel", `{"reason":"done"}`)
		return id
	}
	edited, truncated, untouched := ended("audit-a"), ended("audit-b"), ended("audit-c")

	// Over HTTP: valid, anchored when it ended, the anchor's statement signed by a published key.
	audit := mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+edited+"/audit", "", "")
	if field(audit, "status") != "valid" || audit["head_seq"] != float64(7) || audit["events_checked"] != float64(7) {
		t.Fatalf("audit of a fresh task: %v", audit)
	}
	// The upkeep may have anchored the task while it ran (periodic); the last anchor is its end's.
	anchors, _ := audit["anchors"].([]any)
	if len(anchors) == 0 {
		t.Fatalf("no anchors, want the one made when the task ended")
	}
	for _, a := range anchors {
		if a.(map[string]any)["valid"] != true {
			t.Fatalf("anchor %v", a)
		}
	}
	anchor, _ := anchors[len(anchors)-1].(map[string]any)
	if anchor["reason"] != "task_ended" || anchor["seq"] != float64(7) || anchor["digest"] != audit["head_digest"] {
		t.Fatalf("anchor %v", anchor)
	}
	resp, err := http.Get("http://" + r.listen + "/bap/v1/audit/keys") // anonymous
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /bap/v1/audit/keys: %v %v", resp, err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	keys, err := historychain.ParseKeySet(raw)
	if err != nil {
		t.Fatal(err)
	}
	st, kid, err := historychain.ParseStatement(field(anchor, "statement"), keys)
	if err != nil || kid != field(anchor, "key_id") || st.TaskID != edited || st.Seq != 7 || st.Digest != field(anchor, "digest") ||
		st.HistorySHA256 != field(anchor, "history_sha256") {
		t.Fatalf("anchor statement %+v (kid %s): %v", st, kid, err)
	}
	// The task's result carries no anchor (a cancelled task has no result); get_task answers.
	mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+edited, "", "")

	verify := func(args ...string) (map[string]auditLine, string, error) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"audit", "verify", "--data-dir", dir}, args...)...)
		cmd.Env = append(os.Environ(), "BAP_DATABASE_URL=")
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		lines := map[string]auditLine{}
		sc := bufio.NewScanner(&so)
		for sc.Scan() {
			var l auditLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("bap audit verify printed %q: %v", sc.Text(), err)
			}
			lines[l.TaskID] = l
		}
		return lines, se.String(), err
	}
	lines, stderr, err := verify()
	if err != nil || len(lines) != 3 {
		t.Fatalf("bap audit verify before tampering: %v, %d lines\n%s", err, len(lines), stderr)
	}
	for id, l := range lines {
		if l.Status != "valid" || l.Anchors == 0 || l.HeadSeq != 7 {
			t.Fatalf("%s: %+v", id, l)
		}
	}

	// A superuser of the database, bypassing the append-only trigger and the foreign keys.
	dsn, err := pgcluster.ConnStringFor(dir, "bap")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []struct {
		sql  string
		task string
	}{
		{`SET session_replication_role = replica`, ""},
		// The cancellation's reason rewritten in the history.
		{`UPDATE agent_task_event SET cause = 'forged' WHERE task_id = $1 AND seq = 6`, edited},
		// The tail dropped, and the task row told it never was.
		{`DELETE FROM agent_task_event WHERE task_id = $1 AND seq > 4`, truncated},
		{`UPDATE agent_task SET last_seq = 4 WHERE task_id = $1`, truncated},
	} {
		var args []any
		if q.task != "" {
			args = append(args, q.task)
		}
		if _, err := conn.Exec(ctx, q.sql, args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}

	lines, stderr, err = verify()
	if err == nil || !strings.Contains(stderr, "history chain broken: 2 of 3 tasks") {
		t.Fatalf("bap audit verify after tampering: %v\n%s", err, stderr)
	}
	for id, want := range map[string]*brokenLine{edited: {Seq: 6, Reason: "digest_mismatch"}, truncated: {Seq: 5, Reason: "missing"}, untouched: nil} {
		l := lines[id]
		switch {
		case want == nil && l.Status != "valid":
			t.Errorf("%s: %+v, want valid", id, l)
		case want != nil && (l.Status != "broken" || l.BrokenAt == nil || l.BrokenAt.Seq != want.Seq || l.BrokenAt.Reason != want.Reason):
			t.Errorf("%s: %+v (%+v), want broken at %d (%s)", id, l, l.BrokenAt, want.Seq, want.Reason)
		}
	}
	// --task checks one, and the HTTP route says the same.
	if lines, _, err := verify("--task", edited); err == nil || len(lines) != 1 || lines[edited].BrokenAt == nil || lines[edited].BrokenAt.Seq != 6 {
		t.Fatalf("bap audit verify --task: %v %+v", err, lines)
	}
	audit = mustAPI(t, 200, r.listen, "GET", "/bap/v1/tasks/"+truncated+"/audit", "", "")
	if field(audit, "status") != "broken" || field(audit, "broken_at", "reason") != "missing" {
		t.Fatalf("audit of the truncated task: %v", audit)
	}
	if b, _ := audit["broken_at"].(map[string]any); b["seq"] != float64(5) {
		t.Fatalf("audit of the truncated task: %v", audit)
	}
}
