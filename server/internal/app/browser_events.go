package app

import (
	"context"
	"errors"

	"github.com/originweave/bap/server/internal/page"
)

// browserEvent is something a browser session reported, waiting to enter its task's history.
type browserEvent struct {
	tenant, taskID, sessionID string
	ev                        page.Event
}

// historyType maps the browser's event types to the task history's.
var historyType = map[string]string{
	page.EventNavigationCommitted: "navigation.committed",
	page.EventRequestBlocked:      "request.blocked",
	page.EventContextOpened:       "browsing_context.opened",
	page.EventContextClosed:       "browsing_context.closed",
	page.EventDialogHandled:       "dialog.handled",
	page.EventDownloadCompleted:   "download.completed",
	page.EventSessionLost:         "browser_session.lost",
}

// browserEventSink returns the callback a session reports its events to. It never blocks the
// browser for long: events queue for RunBrowserEvents, which writes them in order.
func (s *Service) browserEventSink(tenant, taskID, sessionID string) func(page.Event) {
	return func(ev page.Event) {
		s.browserEvents <- browserEvent{tenant: tenant, taskID: taskID, sessionID: sessionID, ev: ev}
	}
}

// RunBrowserEvents records the events browser sessions report into their tasks' histories,
// one transaction per event, until ctx ends.
func (s *Service) RunBrowserEvents(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case be := <-s.browserEvents:
			if err := s.recordBrowserEvent(ctx, be); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Error("recording browser event", "type", be.ev.Type, "session_id", be.sessionID, "err", err)
			}
		}
	}
}

func (s *Service) recordBrowserEvent(ctx context.Context, be browserEvent) error {
	typ, ok := historyType[be.ev.Type]
	if !ok {
		return nil
	}
	return s.store.InTx(ctx, func(tx Tx) error {
		t, err := tx.LockTask(ctx, be.tenant, be.taskID)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		c := &commandCtx{s: s, tx: tx, cmd: &Command{Actor: systemActor, Tenant: be.tenant, Operation: "browser"}, t: t, now: s.cfg.Now()}
		data := map[string]any{"session_id": be.sessionID}
		for k, v := range be.ev.Data {
			data[k] = v
		}
		if be.ev.ContextID != "" {
			data["context_id"] = be.ev.ContextID
		}
		if be.ev.EpochID != "" {
			data["epoch_id"] = be.ev.EpochID
		}
		if be.ev.URL != "" {
			data["url"] = be.ev.URL
		}
		switch be.ev.Type {
		case page.EventContextOpened:
			opener, _ := be.ev.Data["opener"].(string)
			if err := tx.RecordContext(ctx, be.tenant, be.sessionID, be.ev.ContextID, opener); err != nil {
				return err
			}
		case page.EventNavigationCommitted:
			if be.ev.EpochID != "" {
				if err := tx.RecordEpoch(ctx, be.tenant, be.sessionID, be.ev.ContextID, be.ev.EpochID, be.ev.URL); err != nil {
					return err
				}
			}
		case page.EventSessionLost:
			rec, err := tx.LockSession(ctx, be.tenant, be.sessionID)
			if err != nil {
				return err
			}
			if rec.State != SessionOpen {
				return nil
			}
			end := c.now
			rec.State, rec.EndedAt = SessionLost, &end
			if err := tx.UpdateSession(ctx, rec); err != nil {
				return err
			}
		}
		if err := c.emit(ctx, t, typ, "browser", data); err != nil {
			return err
		}
		if be.ev.Type == page.EventSessionLost {
			if err := c.afterSessionLost(ctx, t, "browser"); err != nil {
				return err
			}
		}
		return tx.UpdateTask(ctx, t)
	})
}
