package firefox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/waitfor"
)

// TestDriverRestartsAfterCrash: as on Chromium (TestBrowserRestartsAfterCrash), a Firefox that
// dies marks its sessions lost (a session.lost event; a lost session answers ErrSessionLost and
// stays listed until closed), and the next session opens in a fresh browser, also one opened
// while the browser is still restarting. It uses a browser of
// its own: killing the package's shared one would disturb the other tests.
func TestDriverRestartsAfterCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	logs := &lockedLog{}
	d, err := Start(ctx, Config{MaxSessions: 2, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	srv := servePage(t, `<!doctype html><title>Shop</title><h1>Shop</h1>`)
	pol, err := policy.ParsePolicy([]string{srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	s, err := d.OpenSession(ctx, ids.New(ids.BrowserSession), pol, ev.add)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil {
		t.Fatal(err)
	}
	// MaxSessions is enforced.
	s2, err := d.OpenSession(ctx, ids.New(ids.BrowserSession), pol, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.OpenSession(ctx, ids.New(ids.BrowserSession), pol, nil); !errors.Is(err, page.ErrTooManySessions) {
		t.Fatalf("third session: %v", err)
	}
	_ = s2.Close(ctx)

	live := watch(ctx, s)
	live.next(t, ctx)
	d.mu.Lock()
	old, oldEngine := d.b, d.e
	d.mu.Unlock()
	if err := syscall.Kill(-old.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// A session opened the moment the connection is known closed, before the driver's watch may
	// have seen it, waits for the restart and opens in the new browser: never the dead one's
	// "connection closed" answered as unavailable.
	select {
	case <-oldEngine.c.Done():
	case <-ctx.Done():
		t.Fatal("the killed browser's connection stayed open")
	}
	s3, err := d.OpenSession(ctx, ids.New(ids.BrowserSession), pol, nil)
	if err != nil {
		t.Fatalf("a session opened while the browser restarts: %v", err)
	}
	waitfor.True(t, 30*time.Second, "session.lost", func() bool {
		for _, e := range ev.all() {
			if e.Type == page.EventSessionLost {
				return true
			}
		}
		return false
	})
	if _, err := s.Observe(ctx, page.ObserveRequest{}); !errors.Is(err, page.ErrSessionLost) {
		t.Fatalf("observe after the browser died: %v", err)
	}
	if err := <-live.done; !errors.Is(err, page.ErrSessionLost) {
		t.Fatalf("the live view of a lost session ended with %v, want ErrSessionLost", err)
	}
	if got, ok := d.Session(s.id); !ok || got != s {
		t.Fatal("a lost session must stay listed until closed")
	}
	_ = s.Close(ctx)
	d.mu.Lock()
	now := d.b
	d.mu.Unlock()
	if now == old {
		t.Fatal("the session opened in the dead browser")
	}
	if nav, err := s3.Navigate(ctx, page.NavigateRequest{URL: srv.URL + "/"}); err != nil || nav.Title != "Shop" {
		t.Fatalf("navigate after restart: %+v %v", nav, err)
	}
	if product, _ := d.Version(); product == "" {
		t.Fatal("no version after the restart")
	}
	// The operator's log says which end went first, and how the process ended when it did.
	gone := ""
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "firefox went away") {
			gone = line
		}
	}
	if !strings.Contains(gone, fmt.Sprintf("pid=%d", old.cmd.Process.Pid)) ||
		!strings.Contains(gone, `cause="process exited"`) && !strings.Contains(gone, `cause="connection closed"`) ||
		strings.Contains(gone, `cause="process exited"`) && !strings.Contains(gone, `status="signal: killed"`) {
		t.Fatalf("the log line of the crash: %q", gone)
	}
}

// lockedLog is a log destination that tests read while the driver writes.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
