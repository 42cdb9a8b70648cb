package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/store"
)

// benchClients is the number of concurrent callers of the parallel benchmarks, as in `make bench`.
const benchClients = 16

// benchPoolSize is the connection pool of the benchmarks: the daemon's default DBMaxConns.
const benchPoolSize = 32

// setupTB is setup for benchmarks: a service over a fresh database, with a pool sized like the
// daemon's and the real clock (the commands' timestamps then differ as they do in production).
func setupTB(tb testing.TB) *bundle {
	tb.Helper()
	url := pgtest.NewDBURL(tb)
	b := withPool(tb, url, benchPoolSize)
	if err := store.New(b.db).RegisterNode(context.Background(), app.NodeInfo{ID: "node_bench", SoftwareVersion: "bench"}); err != nil {
		tb.Fatal(err)
	}
	return b
}

// withPool is a bundle on the database at url with a pool of size connections.
func withPool(tb testing.TB, url string, size int32) *bundle {
	tb.Helper()
	pool, err := store.Open(tb.Context(), url, size)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close) // before the database is dropped
	svc, err := app.NewService(store.New(pool), app.Config{NodeID: "node_bench", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	b := &bundle{svc: svc, db: pool, actor: app.Actor{Tenant: "local", Subject: "operator:local"}, now: &atomic.Pointer[time.Time]{}}
	b.now.Store(&now)
	return b
}

// BenchmarkCreateTask measures create_task through the service against the real PostgreSQL of the
// package's TestMain, without HTTP: one transaction per call (claim the key, insert the task, its
// history, command, receipt and outbox rows in one batch, store the response, commit).
//
//   - serial: one caller, so ns/op is the latency of one command;
//   - parallel=16: benchClients concurrent callers on the daemon's default pool (throughput);
//   - parallel=16/pool=N: the same callers sharing a pool of only N connections.
//
// The test cluster runs with fsync off, so commits here cost no disk flush; `make bench` measures
// the durable configuration over HTTP.
func BenchmarkCreateTask(b *testing.B) {
	bn := setupTB(b)
	in := app.CreateTaskInput{
		Goal:   "order the cart on the shop",
		Policy: app.PolicySpec{AllowedOrigins: []string{"https://shop.example.com"}},
	}
	body := []byte(`{"goal":"order the cart on the shop","policy":{"allowed_origins":["https://shop.example.com"]}}`)
	fp, err := bn.svc.Fingerprints().Fingerprint("create_task", nil, body)
	if err != nil {
		b.Fatal(err)
	}
	var keys atomic.Int64 // shared by all sub-benchmarks: keys stay unique in the one database
	create := func(ctx context.Context, svc *app.Service) error {
		call := app.Call{Actor: bn.actor, Operation: "create_task", IdempotencyKey: fmt.Sprintf("bench-%d", keys.Add(1)), Fingerprint: fp}
		_, err := svc.CreateTask(ctx, call, in, &recorder[*app.TaskResult]{})
		return err
	}
	// Warm up, then analyse, as a running server's autovacuum soon would: on never-analysed tables
	// PostgreSQL caches plans made for an empty table (docs/benchmarks.md, "Cold start"). 1,000
	// tasks, not fewer: analysed at a few pages, agent_task's foreign-key checks get a
	// sequential-scan generic plan that the pool keeps while the table grows (benchmarks.md, "bap's
	// own CPU per create_task").
	for range 1000 {
		if err := create(b.Context(), bn.svc); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := bn.db.Exec(b.Context(), "ANALYZE"); err != nil {
		b.Fatal(err)
	}

	parallel := func(svc *app.Service) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((benchClients + procs - 1) / procs)
			ctx := b.Context()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := create(ctx, svc); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
		}
	}

	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		ctx := b.Context()
		for b.Loop() {
			if err := create(ctx, bn.svc); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
	})
	b.Run(fmt.Sprintf("parallel=%d", benchClients), parallel(bn.svc))
	url := bn.db.Config().ConnString()
	for _, size := range []int32{2, 4, 8} {
		b.Run(fmt.Sprintf("parallel=%d/pool=%d", benchClients, size), parallel(withPool(b, url, size).svc))
	}
}
