package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/daemon"
)

// BenchmarkRecordingCost is what policy.record costs a task over the whole stack (issue #20's
// Done means): the same checkout — create the task, open a session, navigate, fill two fields,
// check the terms, place the order — with record on and off, alternately, through the HTTP API.
// With record on the session's exchanges are archived as WARC and each navigate and act leaves a
// record.step (an observation before each act and after each step). It reports each variant's
// p50 and the archive bytes per recorded workflow, for the shop over plain HTTP and, with the
// https_ metrics, over HTTPS, where recording also has the proxy open the session's TLS tunnels
// (ADR 0037). `make bench` runs it with a fixed count.
func BenchmarkRecordingCost(b *testing.B) {
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer slog.SetDefault(prev)
	n := b.N
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	for _, v := range []struct {
		prefix string
		shop   func(*testing.T) *shop
	}{{"", newShop}, {"https_", newTLSShop}} {
		var recorded, plain []time.Duration
		var bytes int64
		ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
			Name: "RecordingCost",
			F:    func(t *testing.T) { recorded, plain, bytes = runRecordingCost(t, v.shop(t), n) },
		}})
		if !ok || len(recorded) == 0 {
			b.Fatal("the recording comparison did not finish (see its log above)")
		}
		r, p := p50(recorded), p50(plain)
		b.ReportMetric(r, v.prefix+"recorded_workflow_p50_ms")
		b.ReportMetric(p, v.prefix+"plain_workflow_p50_ms")
		b.ReportMetric(r/p, v.prefix+"recorded_ratio")
		b.ReportMetric(float64(bytes)/float64(len(recorded)), v.prefix+"archive_bytes/workflow")
	}
}

func runRecordingCost(t *testing.T, sh *shop, n int) (recorded, plain []time.Duration, bytes int64) {
	s := newStack(t, func(c *app.Config) { c.Recording = daemon.NewRecordings(t.TempDir(), 1<<40, 0, nil) })
	actor := app.Actor{Tenant: "local", Subject: "bench"}
	workflow := func(i int, record bool) (time.Duration, string) {
		key := func(step string) string { return fmt.Sprintf("rc-%d-%v-%s", i, record, step) }
		start := time.Now()
		taskID := s.must(t, 201, "POST", "/bap/v1/tasks", key("task"), map[string]any{
			"goal": "place an order", "policy": map[string]any{"allowed_origins": []string{sh.srv.URL}, "record": record}}).str("task", "task_id")
		sid := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", key("session"), map[string]any{}).str("session", "session_id")
		base := "/bap/v1/browser-sessions/" + sid
		s.must(t, 200, "POST", base+"/navigate", key("nav"), map[string]any{"url": sh.srv.URL + "/checkout"})
		for j, a := range []map[string]any{
			{"action": "fill", "query": map[string]any{"label": "Full name"}, "value": "Ada Lovelace"},
			{"action": "fill", "query": map[string]any{"label": "Email"}, "value": "ada@example.com"},
			{"action": "check", "query": map[string]any{"role": "checkbox", "name": "I accept the terms"}},
			{"action": "click", "query": map[string]any{"role": "button", "name": "Place order"}},
		} {
			s.must(t, 200, "POST", base+"/act", key(fmt.Sprint("act", j)), a)
		}
		d := time.Since(start)
		s.must(t, 200, "POST", "/bap/v1/tasks/"+taskID+"/cancel", key("cancel"), map[string]any{})
		return d, taskID
	}
	workflow(-1, true) // warm up both paths
	workflow(-1, false)
	for i := range n {
		d, taskID := workflow(i, true)
		recorded = append(recorded, d)
		rc, err := s.svc.TaskArchive(context.Background(), actor, taskID)
		if err != nil {
			t.Fatalf("the recorded task's archive: %v", err)
		}
		m, _ := io.Copy(io.Discard, rc)
		rc.Close()
		bytes += m
		d, _ = workflow(i, false)
		plain = append(plain, d)
	}
	return recorded, plain, bytes
}
