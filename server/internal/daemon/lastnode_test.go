package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// A node that uses a database URL holds its data dir as the embedded cluster's owner does: a
// second live node on the same data dir is refused, naming it; once the holder's process is gone
// (the kernel released its lock), the next node on the data dir marks it stopped at once, however
// fresh its heartbeat and whatever address either listens on, and leaves the other nodes of the
// database alone (issue #23 item 7). A previous node the database does not know changes nothing.
func TestTheDataDirsNextNodeStopsItsPreviousOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	st := store.New(pool)
	log := slog.New(slog.DiscardHandler)
	dir := filepath.Join(t.TempDir(), "node") // created by the first hold
	node := func(id, addr string) *app.Service {
		t.Helper()
		svc, err := app.NewService(st, app.Config{NodeID: id, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.RegisterNode(ctx, addr, "test"); err != nil {
			t.Fatal(err)
		}
		return svc
	}

	release, err := holdNodeDataDir(dir)
	if err != nil || release == nil {
		t.Fatalf("the first node's hold: %v", err)
	}
	// The data dir served another database before: its last node is unknown here.
	if err := os.WriteFile(filepath.Join(dir, lastNodeFile), []byte("node_of_another_database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	first := node("node_first", "http://127.0.0.1:7001")
	if err := succeedDataDirNode(ctx, first, dir, "node_first", log); err != nil {
		t.Fatal(err)
	}
	node("node_other", "http://127.0.0.1:7002") // another data dir, the same database

	// Two live nodes never share a data dir, whatever their database.
	for _, hold := range []func() error{
		func() error { _, err := holdNodeDataDir(dir); return err },
		func() error { _, err := OpenDatabase(ctx, Config{DataDir: dir}); return err }, // the embedded cluster's owner
	} {
		if err := hold(); !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("a second node on a held data dir: %v, want ErrDataDirInUse naming %s", err, dir)
		}
	}

	release() // the first node is killed: the kernel releases its lock
	release, err = holdNodeDataDir(dir)
	if err != nil {
		t.Fatalf("the data dir of a dead node: %v", err)
	}
	defer release()
	second := node("node_second", "http://127.0.0.1:7003") // restarted at a new address
	if err := succeedDataDirNode(ctx, second, dir, "node_second", log); err != nil {
		t.Fatal(err)
	}

	// Every heartbeat is fresh: only stopped_at tells the dead apart.
	var stale time.Time
	if err := pool.QueryRow(ctx, `SELECT now() - interval '1 minute'`).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	for id, live := range map[string]bool{"node_first": false, "node_other": true, "node_second": true} {
		if got, err := st.NodeLive(ctx, id, stale); err != nil || got != live {
			t.Errorf("%s live = %v, %v; want %v", id, got, err, live)
		}
	}
	if raw, err := os.ReadFile(filepath.Join(dir, lastNodeFile)); err != nil || string(raw) != "node_second\n" {
		t.Fatalf("%s names %q (%v), want node_second", lastNodeFile, raw, err)
	}
}
