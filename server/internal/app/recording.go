package app

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/originweave/bap/server/internal/page"
)

// Recording (issue #20 item 2, ADR 0034): a task with policy.record has what its browser
// sessions exchange archived as WARC by their egress proxies, with every secret and fill value
// of the task masked. The archive is kept on the node that ran each session; later evidence
// bundles and replay read it through TaskArchive.

// Recording is the port of policy.record; the composition root implements it (package
// warcrecord behind it). Safe for concurrent use.
type Recording interface {
	// Open begins the archive of one session of a task. report receives record.truncated events
	// (page.EventRecordTruncated) of the session.
	Open(ctx context.Context, tenant, taskID, sessionID string, report func(page.Event)) (page.Recorder, error)
	// Protect makes every open and later archive of the task mask value, shown as name (a secret's
	// name, or "protected"). The value stays in memory only.
	Protect(tenant, taskID, name, value string)
	// Archive returns the task's archive kept on this node: each of its sessions' WARC files,
	// oldest first, as one stream (WARC records concatenate). ErrNotFound when there is none.
	Archive(ctx context.Context, tenant, taskID string) (io.ReadCloser, error)
	// ReplayArchive reads the task's archive kept on this node, checks it, and indexes it for a
	// replay's sessions, masking what they send with protected (a value → its name: the secrets
	// the replay may type) before matching it. ErrNotFound when there is none;
	// ErrNotReplayable when it cannot answer a replay faithfully (it holds a tunnel).
	ReplayArchive(ctx context.Context, tenant, taskID string, protected map[string]string) (page.Archive, error)
}

// ErrNotReplayable reports an archive a replay cannot be served from (it holds a tunnel, whose
// content was never recorded, or no exchange at all).
var ErrNotReplayable = errors.New("the task's archive cannot be replayed")

// errRecording reports a session of a recording task whose archive could not be started: the
// session was closed unused.
var errRecording = errors.New("the session could not be recorded")

// startRecording gives a freshly opened session of a recording task its recorder, with the
// tenant's secrets usable on the task's origins masked from the start (a page may show a stored
// value before any fill types it). A session that cannot record is not used: the task asked
// for an archive.
func (s *Service) startRecording(ctx context.Context, sess BrowserSession, t *Task, sessionID string) error {
	if s.cfg.Recording == nil {
		return errors.New("this node cannot record sessions (no Recording configured)")
	}
	rec, err := s.cfg.Recording.Open(ctx, t.Tenant, t.ID, sessionID, s.browserEventSink(t.Tenant, t.ID, sessionID))
	if err != nil {
		return err
	}
	infos, err := s.secretsForTask(ctx, t)
	if err != nil {
		_ = rec.Close()
		return err
	}
	for _, info := range infos {
		_, sealed, err := s.store.GetSecret(ctx, t.Tenant, info.ID)
		if err != nil || sealed == nil {
			continue // deleted since: it can no longer be typed
		}
		v, err := s.keys.secrets.Open(sealed, secretAAD(info.Tenant, info.ID, info.Version))
		if err != nil {
			_ = rec.Close()
			return err
		}
		s.cfg.Recording.Protect(t.Tenant, t.ID, info.Name, string(v))
	}
	if err := sess.Record(rec); err != nil {
		_ = rec.Close()
		return err
	}
	return nil
}

// recordSession starts recording a session of a recording task, or closes the session unused
// and answers errRecording.
func (s *Service) recordSession(ctx context.Context, sess BrowserSession, t *Task, sessionID string) error {
	err := s.startRecording(ctx, sess, t, sessionID)
	if err == nil {
		return nil
	}
	s.cfg.Logger.Warn("a recording task's session could not be recorded: not opened", "session_id", sessionID, "err", err)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = sess.Close(cctx)
	return errRecording
}

// protectFill masks what a fill types in the task's archives, before it is typed.
func (s *Service) protectFill(tenant, taskID string, req page.ActRequest, secretName string) {
	if s.cfg.Recording == nil || req.Action != "fill" || req.Value == "" {
		return
	}
	name := secretName
	if name == "" {
		name = "protected"
	}
	s.cfg.Recording.Protect(tenant, taskID, name, req.Value)
}

// TaskArchive returns the WARC archive of a task of the actor's tenant kept on this node (for
// evidence bundles and replay): ErrNotFound when the task is unknown or recorded nothing here.
func (s *Service) TaskArchive(ctx context.Context, actor Actor, taskID string) (io.ReadCloser, error) {
	if _, err := s.store.GetTask(ctx, actor.Tenant, taskID); err != nil {
		return nil, err
	}
	if s.cfg.Recording == nil {
		return nil, ErrNotFound
	}
	return s.cfg.Recording.Archive(ctx, actor.Tenant, taskID)
}
