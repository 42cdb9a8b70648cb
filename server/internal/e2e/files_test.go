package e2e

import (
	"bytes"
	"io"
	"net/http"
	"testing"
)

// An artifact goes up with upload_file; a file the page downloads comes back as an artifact; on
// both engines.
func TestUploadFromArtifactAndDownloadToArtifact(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"chromium", "firefox"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			sh := newShop(t)
			s := newStack(t, bothEngines(t))
			_, sess := openShopOn(t, s, sh, "files", engine)
			base := "/bap/v1/browser-sessions/" + sess

			// A screenshot of the checkout is an artifact of the task; upload it.
			ev := s.must(t, 200, "POST", base+"/evidence", "shot", map[string]any{"kinds": []string{"screenshot"}})
			art := ev.body["artifacts"].([]any)[0].(map[string]any)
			artID := art["artifact_id"].(string)
			s.must(t, 200, "POST", base+"/navigate", "to-upload", map[string]any{"url": sh.srv.URL + "/upload"})
			s.must(t, 200, "POST", base+"/act", "attach", map[string]any{"action": "upload_file", "query": map[string]any{"label": "Document"}, "artifact_id": artID})
			s.must(t, 200, "POST", base+"/act", "send", map[string]any{"action": "click", "query": map[string]any{"role": "button", "name": "Send"}})
			got := sh.uploaded.Load()
			if got == nil || int64(len(*got)) != int64(art["size"].(float64)) || !bytes.HasPrefix(*got, []byte("\x89PNG")) {
				t.Fatalf("the page received %v bytes, want the %v-byte PNG artifact", got, art["size"])
			}
			if r := s.call(t, "POST", base+"/act", "attach-unknown", map[string]any{"action": "upload_file", "query": map[string]any{"label": "Document"}, "artifact_id": "art_unknown"}); r.status != 404 {
				t.Fatalf("unknown artifact: %d %s", r.status, r.raw)
			}

			// A download link: the act reports the file and where its content is kept.
			s.must(t, 200, "POST", base+"/navigate", "to-files", map[string]any{"url": sh.srv.URL + "/files"})
			r := s.must(t, 200, "POST", base+"/act", "download", map[string]any{"action": "click", "query": map[string]any{"role": "link", "name": "Invoice"}})
			dls, _ := r.body["downloads"].([]any)
			if engine == "firefox" {
				// Firefox lacks the downloads capability (docs/engines.md, ADR 0029): GET /bap/v1
				// does not list it, and the browser refuses the download, so the act keeps none.
				if len(dls) != 0 {
					t.Fatalf("an engine without downloads kept one: %s", r.raw)
				}
				info := s.must(t, 200, "GET", "/bap/v1", "", nil)
				for _, e := range info.body["engines"].([]any) {
					if e := e.(map[string]any); e["engine"] == "firefox" {
						for _, c := range e["capabilities"].([]any) {
							if c == "downloads" {
								t.Fatalf("GET /bap/v1 lists downloads for firefox: %s", info.raw)
							}
						}
					}
				}
				return
			}
			if len(dls) != 1 {
				t.Fatalf("downloads: %s", r.raw)
			}
			dl := dls[0].(map[string]any)
			id, _ := dl["artifact_id"].(string)
			if id == "" {
				t.Fatalf("download not stored: %s", r.raw)
			}
			resp, err := http.Get(s.srv.URL + "/bap/v1/artifacts/" + id)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(body) != invoiceText {
				t.Fatalf("downloaded artifact: %d %q", resp.StatusCode, body)
			}
		})
	}
}
