package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"image/png"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// getRaw answers the status, headers and bytes of a GET.
func (s *stack) getRaw(t *testing.T, path string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "GET", s.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func TestEvidenceArtifactsMatchTheirDigests(t *testing.T) {
	sh := newShop(t)
	s := newStack(t)
	taskID, sessionID := openShop(t, s, sh, "evidence")

	body := map[string]any{"kinds": []string{"screenshot", "dom_snapshot", "ax_snapshot"}}
	r := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/evidence", "ev-1", body)
	arts, _ := r.body["artifacts"].([]any)
	if len(arts) != 3 {
		t.Fatalf("want 3 artifacts: %s", r.raw)
	}
	if r.str("receipt", "outcome") != "applied" {
		t.Fatalf("receipt: %s", r.raw)
	}
	// The same key answers the first response again, capturing nothing more.
	again := s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+sessionID+"/evidence", "ev-1", body)
	if string(again.raw) != string(r.raw) {
		t.Fatalf("replay differs:\n%s\n%s", again.raw, r.raw)
	}

	wantType := map[string]string{"screenshot": "image/png", "dom_snapshot": "multipart/related", "ax_snapshot": "application/json"}
	var firstID string
	for _, a := range arts {
		m := a.(map[string]any)
		id, sum, kind := m["artifact_id"].(string), m["sha256"].(string), m["kind"].(string)
		if !strings.HasPrefix(id, "art_") || !hex64.MatchString(sum) {
			t.Fatalf("artifact %v", m)
		}
		if m["media_type"] != wantType[kind] {
			t.Fatalf("%s has media type %v", kind, m["media_type"])
		}
		if firstID == "" {
			firstID = id
		}
		status, h, b := s.getRaw(t, "/bap/v1/artifacts/"+id)
		if status != 200 {
			t.Fatalf("get_artifact %s: %d %s", id, status, b)
		}
		got := sha256.Sum256(b)
		if hex.EncodeToString(got[:]) != sum || int(m["size"].(float64)) != len(b) {
			t.Fatalf("%s: bytes hash to %x (%d bytes), artifact says %s (%v)", kind, got, len(b), sum, m["size"])
		}
		if want := "sha-256=:" + base64.StdEncoding.EncodeToString(got[:]) + ":"; h.Get("Repr-Digest") != want {
			t.Fatalf("Repr-Digest %q, want %q", h.Get("Repr-Digest"), want)
		}
		if !strings.HasPrefix(h.Get("Content-Type"), wantType[kind]) {
			t.Fatalf("Content-Type %q for %s", h.Get("Content-Type"), kind)
		}
		switch kind {
		case "screenshot":
			if !strings.HasPrefix(string(b), "\x89PNG") {
				t.Fatalf("the screenshot is not a PNG")
			}
		case "dom_snapshot":
			if !strings.Contains(string(b), "MIME-Version") {
				t.Fatalf("the DOM snapshot is not MHTML: %.200s", b)
			}
		case "ax_snapshot":
			if !strings.Contains(string(b), `"nodes"`) {
				t.Fatalf("the AX snapshot has no nodes: %.200s", b)
			}
		}
		v := s.must(t, 200, "POST", "/bap/v1/artifacts/"+id+"/verify", "", nil)
		if v.body["valid"] != true || v.str("sha256") != sum || v.str("provenance", "task_id") != taskID ||
			v.str("provenance", "session_id") != sessionID || !strings.HasPrefix(v.str("provenance", "receipt_id"), "rcp_") ||
			!strings.HasPrefix(v.str("provenance", "epoch_id"), "ep_") || !strings.HasPrefix(v.str("provenance", "url"), sh.srv.URL) {
			t.Fatalf("verify %s: %s", kind, v.raw)
		}
	}

	// The event names the artifacts, never their content.
	ev := s.must(t, 200, "GET", "/bap/v1/tasks/"+taskID+"/events", "", nil)
	if !strings.Contains(string(ev.raw), `"evidence.captured"`) || strings.Contains(string(ev.raw), "MIME-Version") {
		t.Fatalf("events: %.2000s", ev.raw)
	}

	// A verify naming another digest is not valid.
	v := s.must(t, 200, "POST", "/bap/v1/artifacts/"+firstID+"/verify", "", map[string]any{"sha256": strings.Repeat("0", 64)})
	if v.body["valid"] != false {
		t.Fatalf("verify with a foreign digest: %s", v.raw)
	}

	// Tampered bytes fail verification.
	if _, err := s.db.Exec(context.Background(), `UPDATE artifact_content SET content = '\x00'::bytea, size = 1
		WHERE sha256 = (SELECT sha256 FROM artifact_reference WHERE artifact_id = $1)`, firstID); err != nil {
		t.Fatal(err)
	}
	v = s.must(t, 200, "POST", "/bap/v1/artifacts/"+firstID+"/verify", "", nil)
	if v.body["valid"] != false {
		t.Fatalf("verify after tampering: %s", v.raw)
	}

	// Unknown artifacts are 404.
	s.must(t, 404, "GET", "/bap/v1/artifacts/art_doesnotexist", "", nil)
	s.must(t, 404, "POST", "/bap/v1/artifacts/art_doesnotexist/verify", "", nil)
}

// Screenshots of the whole page and of one node go through the API too; both at once is a 400.
func TestEvidenceFullPageAndNodeScreenshots(t *testing.T) {
	sh := newShop(t)
	s := newStack(t)
	_, sessionID := openShop(t, s, sh, "shots")
	base := "/bap/v1/browser-sessions/" + sessionID + "/evidence"
	button := s.query(t, sessionID, map[string]any{"role": "button", "name": "Place order"})
	sizes := map[string][2]int{}
	for name, body := range map[string]map[string]any{
		"view": {"kinds": []string{"screenshot"}},
		"full": {"kinds": []string{"screenshot"}, "full_page": true},
		"node": {"kinds": []string{"screenshot"}, "node_id": button},
	} {
		r := s.must(t, 200, "POST", base, "shot-"+name, body)
		id := r.body["artifacts"].([]any)[0].(map[string]any)["artifact_id"].(string)
		_, _, b := s.getRaw(t, "/bap/v1/artifacts/"+id)
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		sizes[name] = [2]int{cfg.Width, cfg.Height}
	}
	if v, n := sizes["view"], sizes["node"]; n[0] >= v[0]/2 || n[1] >= v[1]/4 {
		t.Errorf("node screenshot %v is not a button's box (viewport %v)", n, v)
	}
	if v, f := sizes["view"], sizes["full"]; f[1] < v[1]/2 || f[0] < v[0]/2 {
		t.Errorf("full-page screenshot %v (viewport %v)", f, v)
	}
	if r := s.call(t, "POST", base, "shot-both", map[string]any{"kinds": []string{"screenshot"}, "full_page": true, "node_id": button}); r.status != 400 {
		t.Errorf("full_page with node_id: %d %s", r.status, r.raw)
	}
}
