package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/originweave/bap/server/internal/evidencebundle"
)

// An evidence bundle tried as an auditor would (issue #20 item 3): a recorded checkout task is
// exported with `bap bundle export`, copied elsewhere, and `bap bundle verify` with nothing but
// the bundle and the server's published audit keys says valid; one byte changed in any member is
// named, as are the manifest and its signature.
func TestBundleAnAuditorVerifiesOffline(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	dir := dataDir(t)
	shop := newDraftShop(t)
	r := start(t, bin, dir)

	taskID := field(mustAPI(t, 201, r.listen, "POST", "/bap/v1/tasks", "bundle-task",
		`{"goal":"order for Ada","policy":{"allowed_origins":["`+shop.srv.URL+`"],"record":true}}`), "task", "task_id")
	status, m, raw := api(r.listen, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", "bundle-session", `{}`)
	if status != 201 {
		t.Fatalf("create_browser_session: %d %s (install chromium (scripts/install-deps.sh): a required test never skips)", status, raw)
	}
	sp := "/bap/v1/browser-sessions/" + field(m, "session", "session_id")
	mustAPI(t, 200, r.listen, "POST", sp+"/navigate", "bundle-nav", `{"url":"`+shop.srv.URL+`/form"}`)
	mustAPI(t, 200, r.listen, "POST", sp+"/act", "bundle-fill", `{"action":"fill","query":{"role":"textbox","name":"Name"},"value":"Ada"}`)
	mustAPI(t, 200, r.listen, "POST", sp+"/act", "bundle-send", `{"action":"click","query":{"role":"button","name":"Send"}}`)
	mustAPI(t, 200, r.listen, "POST", sp+"/evidence", "bundle-evidence", `{"kinds":["screenshot","dom_snapshot"]}`)
	mustAPI(t, 200, r.listen, "POST", "/bap/v1/tasks/"+taskID+"/close", "bundle-close", `{}`)
	if shop.orders.Load() != 1 {
		t.Fatalf("%d orders, want 1", shop.orders.Load())
	}

	// The auditor's copy: the bundle and the published keys, in a directory of their own.
	elsewhere := t.TempDir()
	file := filepath.Join(elsewhere, "task.bundle.tar")
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "BAP_DATABASE_URL=")
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		return so.String(), se.String(), err
	}
	if _, se, err := run("bundle", "export", taskID, "--out", file, "--data-dir", dir); err != nil {
		t.Fatalf("bap bundle export: %v\n%s", err, se)
	}
	resp, err := http.Get("http://" + r.listen + "/bap/v1/audit/keys")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /bap/v1/audit/keys: %v %v", resp, err)
	}
	keys, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	keysFile := filepath.Join(elsewhere, "keys.json")
	if err := os.WriteFile(keysFile, keys, 0o600); err != nil {
		t.Fatal(err)
	}
	// On the server's own machine, without --jwks: the keys come from the local server's socket.
	if so, se, err := run("bundle", "verify", file, "--data-dir", dir); err != nil || !strings.Contains(so, `"valid": true`) {
		t.Fatalf("bap bundle verify with the local server's keys: %v\n%s\n%s", err, so, se)
	}
	_ = r.stop(t, syscall.SIGTERM) // offline from here: the server is gone (its exit status is not the point)
	// Without --jwks and without a server, it says where the keys come from.
	if _, se, err := run("bundle", "verify", file, "--data-dir", dir); err == nil || !strings.Contains(se, "--jwks") {
		t.Fatalf("bap bundle verify without keys: %v\n%s", err, se)
	}

	verify := func(path string) (evidencebundle.Report, string, error) {
		t.Helper()
		so, se, err := run("bundle", "verify", path, "--jwks", keysFile)
		var rep evidencebundle.Report
		if jerr := json.Unmarshal([]byte(so), &rep); jerr != nil && so != "" {
			t.Fatalf("bap bundle verify printed %q: %v", so, jerr)
		}
		return rep, se, err
	}
	rep, se, err := verify(file)
	if err != nil || !rep.Valid || rep.TaskID != taskID || rep.Events < 10 || rep.Anchors == 0 {
		t.Fatalf("bap bundle verify of the exported bundle: %v %+v\n%s", err, rep, se)
	}

	// What the bundle holds: the WARC of the session, the evidence, the PROV document.
	members := readBundle(t, file)
	warc := string(members["archive/sessions.warc"])
	if !strings.Contains(warc, "WARC/1.1") || !strings.Contains(warc, "WARC-Target-URI: "+shop.srv.URL+"/order") {
		t.Fatalf("the bundle's archive does not hold the order's exchange (%d bytes)", len(warc))
	}
	var prov evidencebundle.Provenance
	if err := json.Unmarshal(members["prov.json"], &prov); err != nil {
		t.Fatal(err)
	}
	acts, gens := 0, 0
	for _, a := range prov.Activity {
		if a["bap:operation"] == "act" && a["bap:outcome"] == "applied" {
			acts++
		}
	}
	for _, g := range prov.WasGeneratedBy {
		if e, _ := g["prov:entity"].(string); strings.HasPrefix(e, "bap:artifact-") {
			gens++
		}
	}
	if acts != 2 || gens < 2 || len(prov.Agent) == 0 {
		t.Fatalf("prov.json: %d applied acts, %d generated artifacts, agents %v", acts, gens, prov.Agent)
	}

	// One byte changed in any member is named, and only that member.
	for name := range members {
		tampered := filepath.Join(elsewhere, "tampered.tar")
		writeBundle(t, tampered, file, name)
		rep, _, err := verify(tampered)
		if err == nil || rep.Valid || len(rep.Problems) == 0 || rep.Problems[0].Member != name {
			t.Errorf("one byte of %s changed: %v %+v, want the member named", name, err, rep.Problems)
		}
	}
}

// readBundle reads every member of a bundle file.
func readBundle(t *testing.T, file string) map[string][]byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name], _ = io.ReadAll(tr)
	}
}

// writeBundle copies the bundle src to dst with one byte of member changed.
func writeBundle(t *testing.T, dst, src, member string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Name == member && len(data) > 0 {
			data[len(data)/2] ^= 0x01
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
