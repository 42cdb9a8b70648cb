package firefox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/page"
)

// upload_file on Firefox, as the CDP adapter's TestUploadAndDownload does it: the effect is
// file_upload; the files reach the page's file input (input.setFiles) with their names made safe,
// sizes and contents; a node that is not a file input is refused; the staged files are gone once
// the session closes.
func TestUploadFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hs := newHeldSite(t)
	s := portSession(t, ctx, &events{}, hs.srv.URL)
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: hs.srv.URL + "/upload.html"}); err != nil {
		t.Fatal(err)
	}
	in, err := s.QueryNodes(ctx, page.QueryRequest{Query: page.Query{Label: "Attachment"}})
	if err != nil || len(in.Nodes) != 1 {
		t.Fatalf("the file input: %+v %v", in, err)
	}
	req := page.ActRequest{Action: page.ActionUploadFile, NodeID: in.Nodes[0].NodeID, Files: []page.File{
		{Name: "notes.txt", MediaType: "text/plain", Content: []byte("hello upload")},
		{Name: "../../etc/evil.txt", Content: []byte("x")},
	}}
	if effect, _, err := s.ClassifyAction(ctx, req); err != nil || effect != page.EffectFileUpload {
		t.Fatalf("classify upload: %q %v", effect, err)
	}
	res, err := s.Act(ctx, req)
	if err != nil || res.Effect != page.EffectFileUpload {
		t.Fatalf("upload: %+v %v", res, err)
	}
	waitText(t, ctx, s, "notes.txt:12:hello upload|evil.txt:1:x")
	s.mu.Lock()
	staged := append([]string(nil), s.staged...)
	s.mu.Unlock()
	if len(staged) != 1 {
		t.Fatalf("staged %q, want one directory", staged)
	}
	if _, err := os.Stat(filepath.Join(staged[0], "evil.txt")); err != nil {
		t.Fatalf("the staged file: %v", err)
	}
	if _, err := s.Act(ctx, page.ActRequest{Action: page.ActionUploadFile, Query: &page.Query{Role: "status"},
		Files: req.Files}); !errors.Is(err, page.ErrInvalidRequest) {
		t.Fatalf("upload_file on a node that is not a file input: %v, want invalid_request", err)
	}
	if _, err := s.Act(ctx, page.ActRequest{Action: page.ActionUploadFile, NodeID: in.Nodes[0].NodeID}); !errors.Is(err, page.ErrInvalidRequest) {
		t.Fatalf("upload_file without files: %v, want invalid_request", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(staged[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the staged files outlived the session: %v", err)
	}
}
