package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"
)

// BenchmarkHeavyObserve is issue #25's heavy-page comparison in one run: the 5,015-element
// catalog (browser/testdata/big.html) observed through BAP's HTTP API (observe, default
// interactive mode) and snapshotted through Playwright MCP (browser_snapshot over stdio, the
// pinned server on the system Chromium), alternately, benchtime iterations each. Each side's
// time is what its client waits (the HTTP exchange; the tool call), its bytes what a model would
// be given (the observe response body; the snapshot's text). It also counts what each makes
// addressable: BAP's node handles and Playwright's refs, against the page's interactive
// elements. Goals (issue #25): bytes ≤ 0.5×, time ≤ 0.15×.
//
//	go test ./server/internal/e2e -run '^$' -bench BenchmarkHeavyObserve -benchtime 20x
//
// BENCH_HEAVY_OUT=<file> also writes the figures as JSON (scripts/bench.sh does). It skips itself
// when Playwright MCP is not installed (scripts/install-playwright-mcp.sh).
func BenchmarkHeavyObserve(b *testing.B) {
	env, err := findPWMCP()
	if err != nil {
		b.Skip(err)
	}
	page, err := os.ReadFile("../browser/testdata/big.html")
	if err != nil {
		b.Fatal(err)
	}
	interactive := len(interactiveTag.FindAll(page, -1))
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big.html" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	}))
	defer site.Close()
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer slog.SetDefault(prev)

	var fig heavyFigures
	n := b.N
	ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
		Name: "HeavyObserve",
		F:    func(t *testing.T) { fig = runHeavyObserve(t, env, site.URL, n) },
	}})
	if !ok || fig.Iterations == 0 {
		b.Fatal("the heavy-page comparison did not finish (see its log above)")
	}
	fig.Interactive = interactive
	fig.BytesRatio = float64(fig.BAPBytes) / float64(fig.PWBytes)
	fig.TimeRatio = fig.BAPP50 / fig.PWP50
	b.ReportMetric(float64(fig.BAPBytes), "bap_bytes")
	b.ReportMetric(float64(fig.PWBytes), "pwmcp_bytes")
	b.ReportMetric(fig.BytesRatio, "bytes_ratio")
	b.ReportMetric(fig.BAPP50, "bap_p50_ms")
	b.ReportMetric(fig.PWP50, "pwmcp_p50_ms")
	b.ReportMetric(fig.TimeRatio, "time_ratio")
	b.ReportMetric(float64(fig.BAPHandles), "bap_handles")
	b.ReportMetric(float64(fig.PWRefs), "pwmcp_refs")
	b.ReportMetric(float64(interactive), "interactive_elements")
	if out := os.Getenv("BENCH_HEAVY_OUT"); out != "" {
		fig.PWMCPVersion, fig.Chromium = env.MCPVersion, env.ChromiumVersion
		raw, _ := json.MarshalIndent(fig, "", "  ")
		if err := os.WriteFile(out, append(raw, '\n'), 0o644); err != nil {
			b.Fatalf("BENCH_HEAVY_OUT: %v", err)
		}
	}
}

// interactiveTag counts the page's interactive elements as its author wrote them: links,
// buttons, inputs, selects and text areas (big.html has no other kind).
var interactiveTag = regexp.MustCompile(`<(a|button|input|select|textarea)[\s>]`)

// heavyFigures are one run's results.
type heavyFigures struct {
	Iterations   int     `json:"iterations"`
	BAPBytes     int     `json:"bap_bytes"`
	PWBytes      int     `json:"pwmcp_bytes"`
	BytesRatio   float64 `json:"bytes_ratio"`
	BAPP50       float64 `json:"bap_p50_ms"`
	PWP50        float64 `json:"pwmcp_p50_ms"`
	TimeRatio    float64 `json:"time_ratio"`
	BAPHandles   int     `json:"bap_handles"`
	PWRefs       int     `json:"pwmcp_refs"`
	Interactive  int     `json:"interactive_elements"`
	PWMCPVersion string  `json:"pwmcp_version"`
	Chromium     string  `json:"chromium"`
}

// refAttr is a Playwright snapshot's element reference.
var refAttr = regexp.MustCompile(`\[ref=[^\]]+\]`)

func runHeavyObserve(t *testing.T, env pwmcpEnv, origin string, n int) heavyFigures {
	pageURL := origin + "/big.html"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := newStack(t)
	r := s.must(t, 201, "POST", "/bap/v1/tasks", "heavy-task", map[string]any{
		"goal": "read the catalog", "policy": map[string]any{"allowed_origins": []string{origin}}})
	r = s.must(t, 201, "POST", "/bap/v1/tasks/"+r.str("task", "task_id")+"/browser-sessions", "heavy-session", map[string]any{})
	observeURL := "/bap/v1/browser-sessions/" + r.str("session", "session_id") + "/observe"
	s.must(t, 200, "POST", "/bap/v1/browser-sessions/"+r.str("session", "session_id")+"/navigate", "heavy-nav", map[string]any{"url": pageURL})
	client, base := s.endpoint()
	observe := func() ([]byte, time.Duration) {
		t0 := time.Now()
		req, err := http.NewRequestWithContext(ctx, "POST", base+observeURL, bytes.NewReader([]byte(`{}`)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		d := time.Since(t0)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("observe: %d %v %s", resp.StatusCode, err, clip(string(raw), 300))
		}
		return raw, d
	}

	p, stop, err := startPWMCP(ctx, env, t.TempDir(), "bap-heavy-bench")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := p.call(ctx, "browser_navigate", map[string]any{"url": pageURL}); err != nil {
		t.Fatal(err)
	}
	snapshot := func() (string, time.Duration) {
		t0 := time.Now()
		text, err := p.call(ctx, "browser_snapshot", map[string]any{})
		d := time.Since(t0)
		if err != nil {
			t.Fatal(err)
		}
		yaml, ok := extractSnapshotYAML(text)
		if !ok {
			t.Fatalf("browser_snapshot: no YAML in the answer: %s", clip(text, 200))
		}
		return yaml, d
	}
	// One of each first, unmeasured: both have a warm page and a warm path.
	whole, _ := observe()
	_, _ = snapshot()

	var fig heavyFigures
	var bapTimes, pwTimes []time.Duration
	for i := range n {
		// Alternate who goes first, so that neither always follows the other's work.
		var raw []byte
		var yaml string
		var db, dp time.Duration
		if i%2 == 0 {
			raw, db = observe()
			yaml, dp = snapshot()
		} else {
			yaml, dp = snapshot()
			raw, db = observe()
		}
		bapTimes, pwTimes = append(bapTimes, db), append(pwTimes, dp)
		fig.BAPBytes, fig.PWBytes = len(raw), len(yaml)
		fig.PWRefs = len(refAttr.FindAllString(yaml, -1))
		whole = raw
	}
	var body map[string]any
	if err := json.Unmarshal(whole, &body); err != nil {
		t.Fatal(err)
	}
	handles := map[string]bool{}
	collectHandles(body["nodes"], handles)
	fig.BAPHandles = len(handles)
	fig.Iterations = n
	fig.BAPP50, fig.PWP50 = medianMS(bapTimes), medianMS(pwTimes)
	fmt.Fprintf(os.Stdout, "heavy-page observe (%d iterations): BAP %d bytes, p50 %.1f ms, %d handles; Playwright MCP %d bytes, p50 %.1f ms, %d refs\n",
		n, fig.BAPBytes, fig.BAPP50, fig.BAPHandles, fig.PWBytes, fig.PWP50, fig.PWRefs)
	return fig
}

// medianMS is the median of ds in milliseconds.
func medianMS(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}
