package e2e

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
)

// TestBundleIsStreamedNotHeld: get_task_bundle sends a task's archive without holding it in
// memory. A task whose archive is 48 MiB exports with a small fraction of that allocated in the
// whole process (building the bundle in memory allocated at least twice the archive); the bundle
// carries the archive's very bytes, and the response's Content-Length and Repr-Digest describe
// the bytes sent.
func TestBundleIsStreamedNotHeld(t *testing.T) {
	dir := t.TempDir()
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(dir, 0, 0, nil) })
	taskID := s.must(t, 201, "POST", "/bap/v1/tasks", "bundle-big", map[string]any{"goal": "a task with a large archive",
		"policy": map[string]any{"allowed_origins": []string{"https://shop.example"}}}).str("task", "task_id")
	s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/cancel", "bundle-big-cancel", map[string]any{})

	// The archive the task's sessions left, where the node keeps it (tenant "local", the stack's).
	const archiveSize = 48 << 20
	warcDir := filepath.Join(dir, "local", taskID)
	if err := os.MkdirAll(warcDir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(warcDir, "ses_a.warc"))
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	chunk := make([]byte, 1<<20)
	for i := range archiveSize / len(chunk) {
		for j := range chunk {
			chunk[j] = byte(i*31 + j*7)
		}
		if _, err := io.MultiWriter(f, want).Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	req, err := http.NewRequestWithContext(context.Background(), "GET", s.srv.URL+"/bap/v1/tasks/"+taskID+"/bundle", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("get_task_bundle: %d %s", resp.StatusCode, raw)
	}
	body := sha256.New()
	counted := &byteCounter{}
	tr := tar.NewReader(io.TeeReader(resp.Body, io.MultiWriter(body, counted)))
	var got []byte
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == "archive/sessions.warc" {
			h := sha256.New()
			if _, err := io.Copy(h, tr); err != nil {
				t.Fatal(err)
			}
			got = h.Sum(nil)
		}
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil { // the tar's padding after its end
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)

	if got == nil || string(got) != string(want.Sum(nil)) {
		t.Fatalf("the bundle's archive member is not the task's archive (found %v)", got != nil)
	}
	if cl := resp.Header.Get("Content-Length"); cl != strconv.FormatInt(counted.n, 10) {
		t.Errorf("Content-Length %s, %d bytes sent", cl, counted.n)
	}
	if rd, wantRD := resp.Header.Get("Repr-Digest"), "sha-256=:"+base64.StdEncoding.EncodeToString(body.Sum(nil))+":"; rd != wantRD {
		t.Errorf("Repr-Digest %s, the bytes sent have %s", rd, wantRD)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("a bundle with a %d MiB archive: %.1f MiB allocated in the process", archiveSize>>20, float64(alloc)/(1<<20))
	if alloc > archiveSize/3 {
		t.Errorf("exporting a bundle with a %d MiB archive allocated %s in the process: it was held in memory",
			archiveSize>>20, fmt.Sprintf("%.1f MiB", float64(alloc)/(1<<20)))
	}
}

// byteCounter counts the bytes written to it.
type byteCounter struct{ n int64 }

func (c *byteCounter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}
