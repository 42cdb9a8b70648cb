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
	page.EventRecordTruncated:     "record.truncated",
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
	if _, ok := historyType[be.ev.Type]; !ok {
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
		recorded, err := c.recordBrowserEvent(ctx, be.sessionID, be.ev, "browser")
		if err != nil || !recorded {
			return err
		}
		return tx.UpdateTask(ctx, t)
	})
}

// recordBrowserEvent writes ev of the session into c's task's history in c's transaction, with
// what it records besides (a context, a document epoch, a lost session), under cause. It reports
// false when there was nothing to record. The caller updates the task.
func (c *commandCtx) recordBrowserEvent(ctx context.Context, sessionID string, ev page.Event, cause string) (bool, error) {
	typ, ok := historyType[ev.Type]
	if !ok {
		return false, nil
	}
	tx := c.tx
	data := map[string]any{"session_id": sessionID}
	for k, v := range ev.Data {
		data[k] = v
	}
	if ev.ContextID != "" {
		data["context_id"] = ev.ContextID
	}
	if ev.EpochID != "" {
		data["epoch_id"] = ev.EpochID
	}
	if ev.URL != "" {
		data["url"] = ev.URL
	}
	switch ev.Type {
	case page.EventContextOpened:
		opener, _ := ev.Data["opener"].(string)
		if err := tx.RecordContext(ctx, c.t.Tenant, sessionID, ev.ContextID, opener); err != nil {
			return false, err
		}
	case page.EventNavigationCommitted:
		if ev.EpochID != "" {
			if err := tx.RecordEpoch(ctx, c.t.Tenant, sessionID, ev.ContextID, ev.EpochID, ev.URL); err != nil {
				return false, err
			}
		}
	case page.EventSessionLost:
		rec, err := tx.LockSession(ctx, c.t.Tenant, sessionID)
		if err != nil {
			return false, err
		}
		if rec.State != SessionOpen {
			return false, nil
		}
		if err := c.loseSession(ctx, rec, cause, data, true); err != nil {
			return false, err
		}
		return true, nil
	}
	if err := c.emit(ctx, c.t, typ, cause, data); err != nil {
		return false, err
	}
	return true, nil
}
