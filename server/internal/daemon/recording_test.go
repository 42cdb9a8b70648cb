package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/warcrecord"
)

// exchanger is what the proxy sees of a session's recorder.
type exchanger interface {
	Exchange(req *http.Request) func(*http.Response)
}

// exchange records one GET answered with body through rec.
func exchange(t *testing.T, rec page.Recorder, url, body string) {
	t.Helper()
	x, ok := rec.(exchanger)
	if !ok {
		t.Fatalf("%T is not a recorder the proxy can use", rec)
	}
	req, _ := http.NewRequest("GET", url, nil)
	done := x.Exchange(req)
	resp := &http.Response{StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", Header: http.Header{},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
	done(resp)
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
}

func TestRecordingsKeepATasksSessionsInItsOwnFilesUnderOneCap(t *testing.T) {
	dir := t.TempDir()
	var events []page.Event
	report := func(ev page.Event) { events = append(events, ev) }
	r := NewRecordings(dir, 4000, 0, nil)
	ctx := context.Background()
	task := ids.New(ids.Task)

	for _, bad := range []struct{ tenant, task, session string }{
		{"..", task, ids.New(ids.BrowserSession)},
		{".spool", task, ids.New(ids.BrowserSession)},
		{"a/b", task, ids.New(ids.BrowserSession)},
		{"local", "../../etc", ids.New(ids.BrowserSession)},
		{"local", task, "../x"},
	} {
		if _, err := r.Open(ctx, bad.tenant, bad.task, bad.session, report); err == nil {
			t.Fatalf("Open(%q, %q, %q) made an archive", bad.tenant, bad.task, bad.session)
		}
	}

	first, err := r.Open(ctx, "local", task, ids.New(ids.BrowserSession), report)
	if err != nil {
		t.Fatal(err)
	}
	r.Protect("local", task, "card_pin", "4242-canary-pin")
	exchange(t, first, "http://shop.test/a", "first page 4242-canary-pin")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// A later session of the task: the cap counts what the first one wrote (the use-cases protect
	// the tenant's secrets again when it opens; the values of a task no session records any more
	// have left memory).
	second, err := r.Open(ctx, "local", task, ids.New(ids.BrowserSession), report)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, second, "http://shop.test/b", strings.Repeat("b", 2000))
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}

	rc, err := r.Archive(ctx, "local", task)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	raw, _ := io.ReadAll(rc)
	recs, err := warcrecord.ReadAll(bytes.NewReader(raw), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, rec := range recs {
		types = append(types, rec.Type)
	}
	if got := strings.Join(types, ","); got != "warcinfo,request,response,warcinfo,request,response" {
		t.Fatalf("records %s", got)
	}
	if bytes.Contains(raw, []byte("4242-canary-pin")) || !bytes.Contains(recs[2].Block, []byte("first page [masked:card_pin]")) {
		t.Fatalf("first response %q", recs[2].Block)
	}
	if recs[5].Header.Get("WARC-Truncated") != "length" || len(events) != 1 || events[0].Type != page.EventRecordTruncated ||
		events[0].Data["reason"] != "task_bytes" || events[0].Data["limit_bytes"] != int64(4000) {
		t.Fatalf("second response truncated %q; events %+v", recs[5].Header.Get("WARC-Truncated"), events)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "local", task, "*.warc"))
	for _, f := range files {
		if st, _ := os.Stat(f); st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", f, st.Mode().Perm())
		}
	}
	if _, err := r.Archive(ctx, "local", ids.New(ids.Task)); !errors.Is(err, app.ErrNotFound) {
		t.Fatalf("the archive of a task that recorded nothing: %v", err)
	}
}

// A replay reads its task's archive through ReplayArchive: a whole archive answers its requests
// (a protected value matched masked); one edited behind its digests is served as it is, the
// edited exchange named (ADR 0038); one that no longer reads back at all or holds a tunnel is
// ErrNotReplayable without the reader's words (a file error names a path of this machine), and a
// task without one is ErrNotFound.
func TestReplayArchiveServesOnlyAnArchiveThatReadsBack(t *testing.T) {
	dir := t.TempDir()
	r := NewRecordings(dir, 0, 0, nil)
	ctx := context.Background()
	task, tunnelTask := ids.New(ids.Task), ids.New(ids.Task)
	rec, err := r.Open(ctx, "local", task, ids.New(ids.BrowserSession), func(page.Event) {})
	if err != nil {
		t.Fatal(err)
	}
	r.Protect("local", task, "token", "canary-token-77")
	exchange(t, rec, "http://shop.test/a?t=canary-token-77", "page a")
	_ = rec.Close()
	tun, err := r.Open(ctx, "local", tunnelTask, ids.New(ids.BrowserSession), func(page.Event) {})
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, tun, "http://shop.test/a", "page a")
	tun.(interface{ Tunnel(string) }).Tunnel("shop.test:443")
	_ = tun.Close()

	a, err := r.ReplayArchive(ctx, "local", task, map[string]string{"canary-token-77": "token"})
	if err != nil {
		t.Fatal(err)
	}
	served, ok := a.(interface {
		Serve(*http.Request) (*http.Response, bool)
	})
	if !ok || a.Len() != 1 {
		t.Fatalf("%T with %d exchanges", a, a.Len())
	}
	req, _ := http.NewRequest("GET", "http://shop.test/a?t=canary-token-77", nil)
	if resp, ok := served.Serve(req); !ok || resp.StatusCode != 200 {
		t.Fatalf("the recorded page is not served: %v %v", resp, ok)
	}
	if _, err := r.ReplayArchive(ctx, "local", tunnelTask, nil); !errors.Is(err, app.ErrNotReplayable) || !strings.Contains(err.Error(), "shop.test:443") {
		t.Errorf("an archive with a tunnel: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "local", task, "*.warc"))
	raw, _ := os.ReadFile(files[0])
	if err := os.WriteFile(files[0], bytes.Replace(raw, []byte("page a"), []byte("page b"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if edited, err := r.ReplayArchive(ctx, "local", task, nil); err != nil || fmt.Sprint(edited.Altered()) != "[http://shop.test/a?t=[masked:token]]" {
		t.Errorf("an archive edited behind its digests: %v, altered %v", err, edited)
	}
	// Cut short: its last record no longer reads back at all.
	if err := os.WriteFile(files[0], raw[:len(raw)-40], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReplayArchive(ctx, "local", task, nil); !errors.Is(err, app.ErrNotReplayable) || strings.Contains(err.Error(), dir) {
		t.Errorf("a cut archive: %v", err)
	}
	if _, err := r.ReplayArchive(ctx, "local", ids.New(ids.Task), nil); !errors.Is(err, app.ErrNotFound) {
		t.Errorf("no archive: %v", err)
	}
}
