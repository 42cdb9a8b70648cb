package e2e

import (
	"context"
	"testing"
)

// upload_file sends into a page only an artifact get_artifact would serve: a checkpoint's state
// (the session's cookies and storage) is never uploaded, as it is never served. The page
// receives nothing, on either engine. (The bap:artifacts.read capability is checked by the transport:
// api TestUploadFileNeedsArtifactsRead.)
func TestUploadFileChecksLikeGetArtifact(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"chromium", "firefox"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			sh := newShop(t)
			s := newStack(t, bothEngines(t))
			_, sess := openShopOn(t, s, sh, "upload-checks", engine)
			base := "/bap/v1/browser-sessions/" + sess
			cp := s.must(t, 200, "POST", base+"/checkpoint", "upload-chk", map[string]any{})
			var stateID string
			if err := s.db.QueryRow(context.Background(), `SELECT artifact_id FROM task_checkpoint WHERE checkpoint_id = $1`,
				cp.str("checkpoint", "checkpoint_id")).Scan(&stateID); err != nil {
				t.Fatal(err)
			}
			if status, _, _ := s.getRaw(t, "/bap/v1/artifacts/"+stateID); status != 404 {
				t.Fatalf("get_artifact of the checkpoint state: %d, want 404", status)
			}
			s.must(t, 200, "POST", base+"/navigate", "upload-to-form", map[string]any{"url": sh.srv.URL + "/upload"})
			r := s.call(t, "POST", base+"/act", "upload-state", map[string]any{"action": "upload_file", "query": map[string]any{"label": "Document"}, "artifact_id": stateID})
			if r.status != 404 || r.str("code") != "not_found" {
				t.Fatalf("upload_file of the checkpoint state: %d %s, want 404 not_found", r.status, r.raw)
			}
			s.must(t, 200, "POST", base+"/act", "upload-send", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Send"}})
			if got := sh.uploaded.Load(); got != nil {
				t.Fatalf("the page received %d bytes of the checkpoint state", len(*got))
			}
		})
	}
}
