package browser

import (
	"context"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	cdpbrowser "github.com/chromedp/cdproto/browser"

	"github.com/originweave/bap/server/internal/pagekit"
)

// download is one file a page downloads. Downloads are saved by the
// browser into the session's directory under their guid, capped at
// Config.MaxDownloadBytes (a larger one is cancelled), and handed to the
// caller by the act that caused them.
type download struct {
	s        *Session
	t        *tab
	guid     string
	name     string
	url      string
	received int64
	state    string
	tooBig   bool
	done     chan struct{}
}

func (b *Browser) onDownloadBegin(ps *procState, ev *cdpbrowser.EventDownloadWillBegin) {
	b.mu.Lock()
	var owner *Session
	var t *tab
	for _, s := range ps.owners {
		s.mu.Lock()
		for _, tt := range s.tabs {
			if tt.frames[ev.FrameID] != nil {
				owner, t = s, tt
			}
		}
		s.mu.Unlock()
		if owner != nil {
			break
		}
	}
	if owner == nil {
		b.mu.Unlock()
		return
	}
	d := &download{s: owner, t: t, guid: ev.GUID, name: safeName(ev.SuggestedFilename), url: ev.URL, state: "inProgress", done: make(chan struct{})}
	ps.downloads[ev.GUID] = d
	b.mu.Unlock()
	owner.mu.Lock()
	t.downloads = append(t.downloads, d)
	owner.notifyLocked()
	owner.mu.Unlock()
}

func (b *Browser) onDownloadProgress(ps *procState, ev *cdpbrowser.EventDownloadProgress) {
	b.mu.Lock()
	d := ps.downloads[ev.GUID]
	b.mu.Unlock()
	if d == nil {
		return
	}
	s := d.s
	s.mu.Lock()
	if d.state != "inProgress" {
		s.mu.Unlock()
		return
	}
	d.received = int64(ev.ReceivedBytes)
	limit := b.cfg.MaxDownloadBytes
	over := d.received > limit || int64(ev.TotalBytes) > limit
	if over && !d.tooBig {
		d.tooBig = true
		s.mu.Unlock()
		fireCmd(ps.p.conn.root, cdpbrowser.CancelDownload, cdpbrowser.CancelDownloadParams{GUID: d.guid, BrowserContextID: s.bctx})
		s.mu.Lock()
	}
	finished := ev.State == cdpbrowser.DownloadProgressStateCompleted || ev.State == cdpbrowser.DownloadProgressStateCanceled
	if finished {
		d.state = string(ev.State)
		close(d.done)
		s.notifyLocked()
	}
	ctxID := d.t.id
	s.mu.Unlock()
	if finished {
		b.mu.Lock()
		delete(ps.downloads, d.guid)
		b.mu.Unlock()
		data := map[string]any{"name": d.name, "size": d.received, "state": d.state}
		if d.tooBig {
			data["reason"] = "larger than the download limit"
		}
		s.emit(Event{Type: EventDownloadCompleted, ContextID: ctxID, URL: redactURL(d.url), Data: data})
	}
}

// collect waits for the download to finish and returns it with its content
// (nil when it was cancelled or too big). The file is removed.
func (d *download) collect(ctx context.Context, limit int64) Download {
	out := Download{Name: d.name}
	select {
	case <-d.done:
	case <-ctx.Done():
		out.Reason = "still in progress when the action's timeout ran out"
		out.Size = d.received
		return out
	}
	path := filepath.Join(d.s.dlDir, d.guid)
	defer os.Remove(path)
	switch {
	case d.tooBig:
		out.Reason = "larger than the download limit"
		out.Size = d.received
		return out
	case d.state != "completed":
		out.Reason = "cancelled"
		return out
	}
	b, err := d.s.ps.p.readDownload(path, limit) // a file the browser wrote into the session's own directory, named by guid
	if err != nil {
		out.Reason = "not readable"
		return out
	}
	out.Content = b
	out.Size = int64(len(b))
	out.MediaType = mime.TypeByExtension(strings.ToLower(filepath.Ext(d.name)))
	if out.MediaType == "" {
		out.MediaType = http.DetectContentType(b)
	}
	return out
}

// safeName keeps the base name of a suggested file name, without path
// separators or control characters.
func safeName(n string) string { return pagekit.SafeFileName(n) }
