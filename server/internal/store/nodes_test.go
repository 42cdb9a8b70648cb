package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// A node that starts listening on an address marks stopped at once the other running nodes
// registered at it (kill -9 and a restart on the same address), however fresh their last
// heartbeat; nodes at other addresses, nodes already stopped and the caller itself are left
// alone (issue #23 item 7).
func TestStopNodesAtTheSameAddress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	s := store.New(db)
	for _, n := range []app.NodeInfo{
		{ID: "node_killed", AdvertiseURL: "http://10.0.0.1:7443", SoftwareVersion: "t"},
		{ID: "node_older", AdvertiseURL: "http://10.0.0.1:7443", SoftwareVersion: "t"},
		{ID: "node_other", AdvertiseURL: "http://10.0.0.2:7443", SoftwareVersion: "t"},
		{ID: "node_quiet", SoftwareVersion: "t"},
		{ID: "node_new", AdvertiseURL: "http://10.0.0.1:7443", SoftwareVersion: "t"},
	} {
		if err := s.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.StopNode(ctx, "node_older"); err != nil {
		t.Fatal(err)
	}
	got, err := s.StopNodesAt(ctx, "http://10.0.0.1:7443", "node_new")
	if err != nil || !slices.Equal(got, []string{"node_killed"}) {
		t.Fatalf("StopNodesAt = %v, %v; want [node_killed]", got, err)
	}
	if got, err := s.StopNodesAt(ctx, "", "node_new"); err != nil || len(got) != 0 {
		t.Fatalf("StopNodesAt without an address = %v, %v; want nothing", got, err)
	}
	// Every heartbeat is fresh: only stopped_at tells the dead apart.
	var stale time.Time
	if err := db.QueryRow(ctx, `SELECT now() - interval '1 minute'`).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	for id, live := range map[string]bool{"node_killed": false, "node_older": false, "node_other": true, "node_quiet": true, "node_new": true} {
		if got, err := s.NodeLive(ctx, id, stale); err != nil || got != live {
			t.Errorf("%s live = %v, %v; want %v", id, got, err, live)
		}
	}
}

// Stopping a node that already stopped keeps the time it stopped (the next node of a data dir
// stops its predecessor as it starts, whether that one died or stopped cleanly).
func TestStopNodeKeepsTheFirstStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	s := store.New(db)
	if err := s.RegisterNode(ctx, app.NodeInfo{ID: "node_clean", SoftwareVersion: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE runtime_node SET stopped_at = now() - interval '1 hour' WHERE node_id = 'node_clean'`); err != nil {
		t.Fatal(err)
	}
	stoppedAt := func() time.Time {
		var at time.Time
		if err := db.QueryRow(ctx, `SELECT stopped_at FROM runtime_node WHERE node_id = 'node_clean'`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	before := stoppedAt()
	if err := s.StopNode(ctx, "node_clean"); err != nil {
		t.Fatal(err)
	}
	if after := stoppedAt(); !after.Equal(before) {
		t.Errorf("stopped_at moved from %v to %v", before, after)
	}
}
