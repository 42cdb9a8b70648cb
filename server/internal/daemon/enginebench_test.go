package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/chromedp"

	"github.com/originweave/bap/server/internal/app"
	"github.com/originweave/bap/server/internal/browser"
	"github.com/originweave/bap/server/internal/firefox"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/page"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/proctree"
)

// The engine benchmarks (issue #19 item 5) run the same workflow and the same heavy-page observe
// through the engine port (app.Browser over the registry's two entries, as `bap serve --engines
// chromium,firefox` wires it) on Chromium/CDP and on Firefox/BiDi, beside raw chromedp, one after
// the other in each iteration so that all three see the same machine load:
//
//	go test ./server/internal/daemon/ -run '^$' -bench Engine -benchtime 20x
//
// They report each variant's p50 and Firefox/BiDi as a ratio against Chromium/CDP; with
// BENCH_ENGINES_OUT set they also write those figures there as JSON (scripts/bench.sh prints
// them; the goal is a BiDi workflow within 1.5× of CDP's). BenchmarkEngineSessionMemory opens
// sessions rather than timing them: run it with -benchtime 1x.

// benchEngines is the port over both engines and the raw chromedp context of the benchmarks,
// started once per test binary.
type benchEngines struct {
	port *Engines
	// raw opens contexts in the raw chromedp browser (chromedp's contexts are its handles).
	raw    func() (context.Context, context.CancelFunc)
	site   *httptest.Server
	roots  map[string]int // engine (and "chromedp") → its browser's process
	closer []func()
}

var (
	benchOnce sync.Once
	benchEng  *benchEngines
	benchErr  error
	// benchFigures collects what the engine benchmarks measured, for BENCH_ENGINES_OUT.
	benchFigures   = map[string]float64{}
	benchFiguresMu sync.Mutex
)

// newChild is the one process started since before (the browser a Start launched).
func newChild(before map[int]bool) int {
	for pid := range proctree.Children(os.Getpid()) {
		if !before[pid] {
			return pid
		}
	}
	return 0
}

func startBenchEngines() (*benchEngines, error) {
	be := &benchEngines{roots: map[string]int{}}
	be.site = httptest.NewServer(http.FileServer(http.Dir("../browser/testdata")))
	be.closer = append(be.closer, be.site.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	before := proctree.Children(os.Getpid())
	br, err := browser.Start(ctx, browser.Config{Binary: os.Getenv("BAP_CHROMIUM")})
	if err != nil {
		return be, fmt.Errorf("starting Chromium: %w", err)
	}
	be.closer = append(be.closer, func() { _ = br.Close() })
	be.roots["chromium"] = newChild(before)
	before = proctree.Children(os.Getpid())
	ff, err := firefox.Start(ctx, firefox.Config{Binary: os.Getenv("BAP_FIREFOX")})
	if err != nil {
		return be, fmt.Errorf("starting Firefox: %w", err)
	}
	be.closer = append(be.closer, func() { _ = ff.Close() })
	be.roots["firefox"] = newChild(before)
	be.port = NewEngines(
		RunningEngine{Adapter: ChromiumAdapter(), Browser: BrowserPort{Browser: br}},
		RunningEngine{Adapter: FirefoxAdapter(), Browser: FirefoxPort{Driver: ff}})

	bin := os.Getenv("BAP_CHROMIUM")
	if bin == "" {
		bin = "chromium"
	}
	before = proctree.Children(os.Getpid())
	dir, err := os.MkdirTemp("", "bap-bench-chromedp-")
	if err != nil {
		return be, err
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(bin), chromedp.UserDataDir(dir),
		chromedp.Flag("window-size", "1280,800"))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // as the adapter runs its Chromium as root
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	raw, cancelRaw := chromedp.NewContext(alloc)
	be.closer = append(be.closer, func() { cancelRaw(); cancelAlloc(); _ = os.RemoveAll(dir) })
	if err := chromedp.Do(raw); err != nil {
		return be, fmt.Errorf("starting raw chromedp: %w", err)
	}
	be.roots["chromedp"] = newChild(before)
	be.raw = func() (context.Context, context.CancelFunc) { return chromedp.NewContext(raw) }
	return be, nil
}

func engines(b *testing.B) *benchEngines {
	b.Helper()
	benchOnce.Do(func() { benchEng, benchErr = startBenchEngines() })
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchEng
}

// closeBenchEngines stops the engine benchmarks' browsers and writes their figures; the
// package's TestMain (serverkey_test.go) calls it.
func closeBenchEngines() {
	if benchEng != nil {
		for i := len(benchEng.closer) - 1; i >= 0; i-- {
			benchEng.closer[i]()
		}
	}
	writeBenchFigures()
}

// writeBenchFigures writes what the engine benchmarks measured to BENCH_ENGINES_OUT, if set and
// they ran.
func writeBenchFigures() {
	out := os.Getenv("BENCH_ENGINES_OUT")
	benchFiguresMu.Lock()
	defer benchFiguresMu.Unlock()
	if out == "" || len(benchFigures) == 0 {
		return
	}
	// Merged into what an earlier run of this binary wrote there (scripts/bench.sh runs the
	// memory benchmark apart, once).
	all := map[string]float64{}
	if prev, err := os.ReadFile(out); err == nil {
		_ = json.Unmarshal(prev, &all)
	}
	for k, v := range benchFigures {
		all[k] = v
	}
	b, _ := json.MarshalIndent(all, "", "  ")
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "engine benchmarks:", err)
	}
}

func figure(name string, v float64) {
	benchFiguresMu.Lock()
	benchFigures[name] = v
	benchFiguresMu.Unlock()
}

func (be *benchEngines) open(b *testing.B, engine string) app.BrowserSession {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pol, err := policy.ParsePolicy([]string{be.site.URL}, nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := be.port.OpenSession(ctx, engine, ids.New(ids.BrowserSession), pol, nil)
	if err != nil {
		b.Fatalf("opening a %s session: %v", engine, err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// stepTimes records per-step durations of one variant.
type stepTimes map[string][]time.Duration

func (st stepTimes) time(name string, fn func() error) error {
	t0 := time.Now()
	err := fn()
	st[name] = append(st[name], time.Since(t0))
	return err
}

func median(ds []time.Duration) time.Duration {
	c := append([]time.Duration(nil), ds...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[len(c)/2]
}

func findNode(ns []page.Node, role, name string) (page.Node, bool) {
	for _, n := range ns {
		if n.Role == role && n.Name == name {
			return n, true
		}
		if c, ok := findNode(n.Children, role, name); ok {
			return c, true
		}
	}
	return page.Node{}, false
}

// portWorkflow is navigate → observe → fill → click (submits, waits for the next page) →
// extract → screenshot through the engine port, as the use-cases drive either engine.
func portWorkflow(ctx context.Context, s app.BrowserSession, base string, st stepTimes) error {
	var snap *page.Snapshot
	steps := []struct {
		name string
		fn   func() error
	}{
		{"navigate", func() error {
			_, err := s.Navigate(ctx, page.NavigateRequest{URL: base + "/bench.html"})
			return err
		}},
		{"observe", func() (err error) {
			snap, err = s.Observe(ctx, page.ObserveRequest{})
			return err
		}},
		{"fill", func() error {
			n, ok := findNode(snap.Nodes, "textbox", "Search")
			if !ok {
				return errors.New("no search box")
			}
			_, err := s.Act(ctx, page.ActRequest{Action: page.ActionFill, NodeID: n.NodeID, Value: "teapot"})
			return err
		}},
		{"click", func() error {
			n, ok := findNode(snap.Nodes, "button", "Search")
			if !ok {
				return errors.New("no search button")
			}
			res, err := s.Act(ctx, page.ActRequest{Action: page.ActionClick, NodeID: n.NodeID})
			if err == nil && !res.Navigated {
				err = errors.New("the click did not navigate")
			}
			return err
		}},
		{"extract", func() error {
			_, err := s.Extract(ctx, page.ExtractRequest{Kind: page.ExtractText})
			return err
		}},
		{"screenshot", func() error {
			_, err := s.Screenshot(ctx, page.ScreenshotRequest{})
			return err
		}},
	}
	for _, step := range steps {
		if err := st.time(step.name, step.fn); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return nil
}

// rawWorkflow does the same with chromedp: the accessibility tree stands for observe, a CSS
// selector for the handle.
func rawWorkflow(ctx context.Context, base string, st stepTimes) error {
	steps := []struct {
		name string
		fn   func() error
	}{
		{"navigate", func() error { return chromedp.Do(ctx, chromedp.Navigate(base+"/bench.html")) }},
		{"observe", func() error {
			_, err := chromedp.Call(ctx, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
			return err
		}},
		{"fill", func() error { return chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("q"), "teapot")) }},
		{"click", func() error {
			return chromedp.Do(ctx, chromedp.Click(chromedp.ID("go")), chromedp.WaitVisible(chromedp.ID("msg")))
		}},
		{"extract", func() error {
			_, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
			return err
		}},
		{"screenshot", func() error {
			_, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
			return err
		}},
	}
	for _, step := range steps {
		if err := st.time(step.name, step.fn); err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return nil
}

// report reports each variant's step p50s and Firefox/BiDi's ratio to Chromium/CDP for each
// step, under prefix.
func report(b *testing.B, prefix string, names []string, sts []stepTimes) {
	p := map[string]map[string]float64{}
	for i, name := range names {
		p[name] = map[string]float64{}
		for step, ds := range sts[i] {
			ms := float64(median(ds).Microseconds()) / 1000
			p[name][step] = ms
			b.ReportMetric(ms, name+"_"+step+"_p50_ms")
			figure(prefix+"."+name+"."+step+"_p50_ms", ms)
		}
	}
	for step, cdp := range p["chromium"] {
		if bidi, ok := p["firefox"][step]; ok && cdp > 0 {
			r := bidi / cdp
			b.ReportMetric(r, "firefox/chromium_"+step)
			figure(prefix+".firefox_over_chromium."+step, r)
		}
	}
}

// BenchmarkEngineWorkflow runs the warm workflow on a session of each engine through the port and
// through raw chromedp, interleaved.
func BenchmarkEngineWorkflow(b *testing.B) {
	be := engines(b)
	ctx := context.Background()
	rctx, cancel := be.raw()
	defer cancel()
	names := []string{"chromium", "firefox", "chromedp"}
	sessions := map[string]app.BrowserSession{"chromium": be.open(b, "chromium"), "firefox": be.open(b, "firefox")}
	run := func(name string, st stepTimes) error {
		if name == "chromedp" {
			return rawWorkflow(rctx, be.site.URL, st)
		}
		return portWorkflow(ctx, sessions[name], be.site.URL, st)
	}
	sts := make([]stepTimes, len(names))
	for i, name := range names {
		if err := run(name, stepTimes{}); err != nil { // warm up
			b.Fatal(name, ": ", err)
		}
		sts[i] = stepTimes{}
	}
	b.ResetTimer()
	for b.Loop() {
		for i, name := range names {
			st := sts[i]
			if err := st.time("workflow", func() error { return run(name, st) }); err != nil {
				b.Fatal(name, ": ", err)
			}
		}
	}
	b.StopTimer()
	report(b, "workflow", names, sts)
}

// BenchmarkEngineObserveBig observes the 5,000-element page on each engine through the port (mode
// interactive, then full) and takes raw chromedp's accessibility tree of it, interleaved.
func BenchmarkEngineObserveBig(b *testing.B) {
	be := engines(b)
	ctx := context.Background()
	rctx, cancel := be.raw()
	defer cancel()
	if err := chromedp.Do(rctx, chromedp.Navigate(be.site.URL+"/big.html")); err != nil {
		b.Fatal(err)
	}
	names := []string{"chromium", "firefox", "chromedp"}
	sessions := map[string]app.BrowserSession{}
	sizes := map[string]int{}
	for _, engine := range names[:2] {
		s := be.open(b, engine)
		if _, err := s.Navigate(ctx, page.NavigateRequest{URL: be.site.URL + "/big.html"}); err != nil {
			b.Fatal(err)
		}
		sessions[engine] = s
	}
	observe := func(name string, st stepTimes) error {
		if name == "chromedp" {
			return st.time("observe", func() error {
				_, err := chromedp.Call(rctx, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
				return err
			})
		}
		for _, mode := range []string{page.ModeInteractive, page.ModeFull} {
			var snap *page.Snapshot
			if err := st.time("observe_"+mode, func() (err error) {
				snap, err = sessions[name].Observe(ctx, page.ObserveRequest{Mode: mode})
				return err
			}); err != nil {
				return err
			}
			j, _ := json.Marshal(snap)
			sizes[name+"_"+mode] = len(j)
		}
		return nil
	}
	sts := make([]stepTimes, len(names))
	for i, name := range names {
		if err := observe(name, stepTimes{}); err != nil { // warm up
			b.Fatal(name, ": ", err)
		}
		sts[i] = stepTimes{}
	}
	b.ResetTimer()
	for b.Loop() {
		for i, name := range names {
			if err := observe(name, sts[i]); err != nil {
				b.Fatal(name, ": ", err)
			}
		}
	}
	b.StopTimer()
	report(b, "observe_big", names, sts)
	for k, n := range sizes {
		b.ReportMetric(float64(n), k+"_json_bytes")
		figure("observe_big."+k+"_json_bytes", float64(n))
	}
}

// BenchmarkEngineSessionMemory opens extraSessions more sessions on each engine, each on the
// benchmark page, and reports the growth of the browser's proportional set size per session.
func BenchmarkEngineSessionMemory(b *testing.B) {
	const extraSessions = 4
	be := engines(b)
	ctx := context.Background()
	for b.Loop() {
		for _, engine := range []string{"chromium", "firefox"} {
			first := be.open(b, engine) // the browser's first session, not counted
			if _, err := first.Navigate(ctx, page.NavigateRequest{URL: be.site.URL + "/bench.html"}); err != nil {
				b.Fatal(err)
			}
			before := proctree.PSS(be.roots[engine])
			opened := make([]app.BrowserSession, 0, extraSessions)
			for range extraSessions {
				s := be.open(b, engine)
				if _, err := s.Navigate(ctx, page.NavigateRequest{URL: be.site.URL + "/bench.html"}); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Observe(ctx, page.ObserveRequest{}); err != nil {
					b.Fatal(err)
				}
				opened = append(opened, s)
			}
			per := float64(proctree.PSS(be.roots[engine])-before) / extraSessions / (1 << 20)
			b.ReportMetric(per, engine+"_MiB/session")
			figure("memory."+engine+"_mib_per_session", per)
			for _, s := range opened {
				_ = s.Close(ctx)
			}
			_ = first.Close(ctx)
		}
	}
}
