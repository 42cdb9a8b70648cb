package app

import (
	"context"
	"errors"

	"github.com/originweave/bap/server/internal/page"
)

// WatchSession streams a browser session's live view to onFrame (issue #18, the console's task
// page): read-only, at most one frame per page.LiveFrameInterval, until ctx ends or the session
// closes or is lost. The session must be one of the actor's tenant, open, and held by this node;
// the caller checks the actor's capability (bap:browser.observe). It returns nil when the session
// closed, a browser_session_lost problem when it was lost, and ctx's or onFrame's error otherwise.
// Nothing is recorded: watching is not a command, and frames are not evidence.
func (s *Service) WatchSession(ctx context.Context, actor Actor, sessionID string, onFrame func(page.LiveFrame) error) error {
	rec, sess, err := s.sessionFor(ctx, actor, sessionID)
	if err != nil {
		return err
	}
	if err := s.requireCapability(rec.Engine, CapLiveView, "stream a live view"); err != nil {
		return err
	}
	err = sess.Watch(ctx, onFrame)
	switch {
	case errors.Is(err, page.ErrSessionClosed):
		return nil
	case errors.Is(err, page.ErrSessionLost):
		return &Error{Code: CodeBrowserSessionLost, Detail: "the browser session was lost"}
	}
	return err
}
