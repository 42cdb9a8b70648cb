package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/api"
	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/auth"
	"github.com/originweave/bap/server/internal/events"
	"github.com/originweave/bap/server/internal/pgtest"
	"github.com/originweave/bap/server/internal/redact"
	"github.com/originweave/bap/server/internal/store"
)

// benchBody is bapbench's create_task body (server/cmd/bapbench), as `make bench` sends it.
const benchBody = `{"goal":"order the cart on the shop","policy":{"allowed_origins":["https://shop.example.com"]}}`

// BenchmarkCreateTaskHTTP measures bap's own side of one create_task: the HTTP handler as the
// daemon's local profile builds it (the local authenticator, the request log through the
// redacting JSON handler, metrics, the store with its outbox publisher), called in-process with
// the body bapbench sends, against the real PostgreSQL of the package's TestMain. Its CPU and
// allocation profiles (-cpuprofile, -memprofile) are the bap serve share of `make bench`'s CPU per
// create_task; PostgreSQL's CPU is another process's and does not show in them.
//
//   - first: a fresh Idempotency-Key per request (what bapbench sends);
//   - replay: one key sent again, answered from its stored response.
func BenchmarkCreateTaskHTTP(b *testing.B) {
	db := pgtest.NewDB(b)
	ctx := context.Background()
	if err := store.New(db).RegisterNode(ctx, app.NodeInfo{ID: "node_bench", SoftwareVersion: "bench"}); err != nil {
		b.Fatal(err)
	}
	log := slog.New(redact.NewHandler(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}), nil))
	svc, err := app.NewService(store.New(db, store.Options{Outbox: events.NewOutbox()}), app.Config{NodeID: "node_bench", Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	audit := auth.NewAudit(db, log) // the local profile's request audit (daemon.go), batched in the background
	if err := audit.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(audit.Stop)
	h, err := api.New(api.Options{Service: svc, Authenticator: api.Local{}, Logger: log, Audit: audit})
	if err != nil {
		b.Fatal(err)
	}
	h = api.LoopbackHostOnly(h)
	var keys atomic.Int64
	post := func(key string) {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/bap/v1/tasks", strings.NewReader(benchBody))
		r.RemoteAddr = "127.0.0.1:40000"
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("create_task answered %d: %s", w.Code, w.Body)
		}
	}
	// Warm up, then analyse (docs/benchmarks.md, "Cold start"). 1,000 tasks, not fewer: analysed
	// at a few pages, agent_task's foreign-key checks get a sequential-scan generic plan, which every
	// pooled connection keeps until the next ANALYZE while the table grows (benchmarks.md, "bap's
	// own CPU per create_task").
	for range 1000 {
		post(fmt.Sprintf("bench-%d", keys.Add(1)))
	}
	if _, err := db.Exec(ctx, "ANALYZE"); err != nil {
		b.Fatal(err)
	}
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		cpu := processCPU(b)
		for b.Loop() {
			post(fmt.Sprintf("bench-%d", keys.Add(1)))
		}
		cpu.report(b)
	})
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		post("bench-replayed")
		cpu := processCPU(b)
		for b.Loop() {
			post("bench-replayed")
		}
		cpu.report(b)
	})
}

// cpuMark is the test process's CPU time (user and system, every thread: the handler, pgx, GC,
// the audit writer) when a benchmark started.
type cpuMark time.Duration

func processCPU(b *testing.B) cpuMark {
	b.Helper()
	return cpuMark(rusageCPU(b))
}

// report adds the process's CPU time per operation since m as the metric cpu-ns/op: the CPU bap
// spends per request, whatever the wall time PostgreSQL's answers take on a busy machine.
func (m cpuMark) report(b *testing.B) {
	b.Helper()
	b.ReportMetric(float64(rusageCPU(b)-time.Duration(m))/float64(b.N), "cpu-ns/op")
}

func rusageCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
