package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/version"
	"github.com/originweave/bap/server/internal/warcrecord"
)

// Recordings is app.Recording over files of this node (ADR 0034): each session of a recording
// task writes <dir>/<tenant>/<task>/<session>.warc; the task's sessions share one byte cap and one
// set of protected values while any of them records. Bodies of exchanges in flight past their
// first 256 KiB are spooled, masked, under <dir>/.spool.
type Recordings struct {
	dir                    string
	maxBytes, maxBodyBytes int64
	log                    *slog.Logger

	mu    sync.Mutex
	tasks map[string]*taskRecording // tenant/task → while a session of it records
}

// taskRecording is what a task's recording sessions share.
type taskRecording struct {
	budget    *warcrecord.Budget
	protected *warcrecord.Protected
	open      int
}

var _ app.Recording = (*Recordings)(nil)

// NewRecordings keeps archives under dir, with a task cap of maxBytes and a body cap of
// maxBodyBytes (0: warcrecord's defaults). What an earlier run left spooled is removed; the
// directories are made (0700) when a session first records, and a failure then refuses that
// session.
func NewRecordings(dir string, maxBytes, maxBodyBytes int64, log *slog.Logger) *Recordings {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.RemoveAll(filepath.Join(dir, ".spool")); err != nil {
		log.Warn("clearing the archive spool", "err", err)
	}
	if maxBytes <= 0 {
		maxBytes = warcrecord.DefaultMaxBytes
	}
	return &Recordings{dir: dir, maxBytes: maxBytes, maxBodyBytes: maxBodyBytes, log: log, tasks: make(map[string]*taskRecording)}
}

// taskDir is where a task's archives are: its parts are checked, so that no id reaches outside
// the archive directory.
func (r *Recordings) taskDir(tenant, taskID string) (string, error) {
	if !ids.Valid(ids.Task, taskID) || !safePart(tenant) {
		return "", fmt.Errorf("recording: tenant %q or task %q is not a path part", tenant, taskID)
	}
	return filepath.Join(r.dir, tenant, taskID), nil
}

// safePart is a path element of letters, digits, '.', '_' or '-' that does not start with '.'
// (not ".", "..", nor the spool).
func safePart(s string) bool {
	if s == "" || s[0] == '.' || len(s) > 128 {
		return false
	}
	return !strings.ContainsFunc(s, func(c rune) bool {
		return (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-'
	})
}

// Open implements app.Recording.
func (r *Recordings) Open(_ context.Context, tenant, taskID, sessionID string, report func(page.Event)) (page.Recorder, error) {
	dir, err := r.taskDir(tenant, taskID)
	if err != nil {
		return nil, err
	}
	if !ids.Valid(ids.BrowserSession, sessionID) {
		return nil, fmt.Errorf("recording: session %q is not a bs_ id", sessionID)
	}
	for _, d := range []string{dir, filepath.Join(r.dir, ".spool")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("recording: %w", err)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, sessionID+".warc"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("recording: %w", err)
	}
	tr, err := r.acquire(tenant+"/"+taskID, dir)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	release := func() { r.release(tenant + "/" + taskID) }
	w, err := warcrecord.New(warcrecord.Config{
		Out: f, Budget: tr.budget, MaxBodyBytes: r.maxBodyBytes, Protected: tr.protected,
		SpoolDir: filepath.Join(r.dir, ".spool"), Logger: r.log,
		Info: []warcrecord.Field{{Name: "bap-version", Value: version.Software}, {Name: "bap-task", Value: taskID}, {Name: "bap-session", Value: sessionID}},
		OnTruncated: func(t warcrecord.Truncation) {
			data := map[string]any{"reason": string(t.Reason)}
			if t.Limit > 0 {
				data["limit_bytes"] = t.Limit
			}
			if t.URL != "" {
				data["url"] = t.URL
			}
			if t.Reason == warcrecord.ReasonWriteFailed {
				r.log.Error("a session's archive could not be written: its exchanges go on unrecorded", "session_id", sessionID)
			}
			report(page.Event{Type: page.EventRecordTruncated, Data: data})
		},
	})
	if err != nil {
		_ = f.Close()
		release()
		return nil, err
	}
	return &sessionRecorder{Recorder: w, f: f, release: release}, nil
}

// acquire is the task's shared cap and protected values, its cap counting what earlier sessions
// of the task wrote on this node.
func (r *Recordings) acquire(key, dir string) (*taskRecording, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tr := r.tasks[key]
	if tr == nil {
		used, err := dirBytes(dir)
		if err != nil {
			return nil, err
		}
		tr = &taskRecording{budget: warcrecord.NewBudget(r.maxBytes, used), protected: warcrecord.NewProtected()}
		r.tasks[key] = tr
	}
	tr.open++
	return tr, nil
}

func (r *Recordings) release(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tr := r.tasks[key]; tr != nil {
		if tr.open--; tr.open <= 0 {
			delete(r.tasks, key) // the values leave memory with the task's last recording session
		}
	}
}

// Protect implements app.Recording: a task with no recording session on this node has nothing
// to mask (its next session masks the tenant's secrets again when it opens, and each fill as it
// is typed).
func (r *Recordings) Protect(tenant, taskID, name, value string) {
	r.mu.Lock()
	tr := r.tasks[tenant+"/"+taskID]
	r.mu.Unlock()
	if tr != nil {
		tr.protected.Add(name, value)
	}
}

// ReplayArchive implements app.Recording: the archive is checked record by record (digests
// included) before anything is served from it.
func (r *Recordings) ReplayArchive(ctx context.Context, tenant, taskID string, protected map[string]string) (page.Archive, error) {
	rc, err := r.Archive(ctx, tenant, taskID)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	// Altered records are kept and served as they are: the replay says where the archive was
	// changed (and compares what the pages show), rather than refusing to look.
	recs, err := warcrecord.ReadAltered(rc, max(r.maxBodyBytes, warcrecord.DefaultMaxBodyBytes)+64<<10)
	if err != nil {
		// Not the reader's own words to the caller: a file error names a path of this machine.
		r.log.Warn("a task's archive does not read back for its replay", "task_id", taskID, "err", err)
		return nil, fmt.Errorf("%w: a record of the archive does not read back (its form does not hold; the operator's log says which)", app.ErrNotReplayable)
	}
	p := warcrecord.NewProtected()
	for value, name := range protected {
		p.Add(name, value)
	}
	a, err := warcrecord.NewArchive(recs, p)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", app.ErrNotReplayable, err)
	}
	return a, nil
}

// Archive implements app.Recording.
func (r *Recordings) Archive(_ context.Context, tenant, taskID string) (io.ReadCloser, error) {
	dir, err := r.taskDir(tenant, taskID)
	if err != nil {
		return nil, app.ErrNotFound
	}
	files, err := warcFiles(dir)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(files) == 0 {
		return nil, app.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &concatFiles{paths: files}, nil
}

// warcFiles lists a task's archive files, oldest first.
func warcFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type file struct {
		path string
		mod  int64
	}
	var found []file
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".warc") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		found = append(found, file{filepath.Join(dir, e.Name()), info.ModTime().UnixNano()})
	}
	slices.SortFunc(found, func(a, b file) int {
		return cmp.Or(cmp.Compare(a.mod, b.mod), strings.Compare(a.path, b.path))
	})
	out := make([]string, len(found))
	for i, f := range found {
		out[i] = f.path
	}
	return out, nil
}

// dirBytes is the size of a task's archive files (0 when it has none yet).
func dirBytes(dir string) (int64, error) {
	files, err := warcFiles(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range files {
		info, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		n += info.Size()
	}
	return n, nil
}

// sessionRecorder is one session's recorder and its file: the proxy closes it with the session.
type sessionRecorder struct {
	*warcrecord.Recorder
	f       *os.File
	release func()
	once    sync.Once
}

// Close ends recording and closes the file (synced: the archive is evidence).
func (s *sessionRecorder) Close() error {
	var err error
	s.once.Do(func() {
		err = errors.Join(s.Recorder.Close(), s.f.Sync(), s.f.Close())
		s.release()
	})
	return err
}

// concatFiles reads files one after the other, opening each only when the previous one ends.
type concatFiles struct {
	paths []string
	cur   *os.File
}

func (c *concatFiles) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			if len(c.paths) == 0 {
				return 0, io.EOF
			}
			f, err := os.Open(c.paths[0])
			if err != nil {
				return 0, err
			}
			c.cur, c.paths = f, c.paths[1:]
		}
		n, err := c.cur.Read(p)
		if errors.Is(err, io.EOF) {
			_ = c.cur.Close()
			c.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *concatFiles) Close() error {
	c.paths = nil
	if c.cur != nil {
		err := c.cur.Close()
		c.cur = nil
		return err
	}
	return nil
}
