package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/originweave/bap/server/internal/egress"
	"github.com/originweave/bap/server/internal/ids"
	"github.com/originweave/bap/server/internal/observation"
	"github.com/originweave/bap/server/internal/policy"
	"github.com/originweave/bap/server/internal/proctree"
	"github.com/originweave/bap/server/internal/warcrecord"
)

// The benchmarks compare this package with raw chromedp doing the same steps
// on the same pages, in one run:
//
//	go test ./server/internal/browser/ -run '^$' -bench . -benchtime 20x
//
// Raw chromedp runs in a Chromium of its own (started on first use, same
// flags), so that neither side shares the other's tabs.

var (
	rawOnce   sync.Once
	rawCtx    context.Context
	rawCancel context.CancelFunc
	rawErr    error
)

// rawBrowser returns a chromedp browser context.
func rawBrowser(b *testing.B) context.Context {
	rawOnce.Do(func() {
		opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath("chromium"), chromedp.UserDataDir(b.TempDir())}
		for _, f := range baseFlags {
			name, val, ok := strings.Cut(strings.TrimPrefix(f, "--"), "=")
			if name == "remote-debugging-pipe" {
				continue
			}
			if ok {
				opts = append(opts, chromedp.Flag(name, val))
			} else {
				opts = append(opts, chromedp.Flag(name, true))
			}
		}
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(alloc)
		rawErr = chromedp.Do(ctx) // start the browser
		rawCtx = ctx
		rawCancel = func() { cancel(); cancelAlloc() }
		cleanups = append(cleanups, rawCancel)
	})
	if rawErr != nil {
		b.Fatal(rawErr)
	}
	return rawCtx
}

// steps records per-step durations.
type steps struct {
	mu sync.Mutex
	d  map[string][]time.Duration
}

func (s *steps) time(name string, fn func() error) error {
	t0 := time.Now()
	err := fn()
	s.mu.Lock()
	if s.d == nil {
		s.d = map[string][]time.Duration{}
	}
	s.d[name] = append(s.d[name], time.Since(t0))
	s.mu.Unlock()
	return err
}

func p50(ds []time.Duration) time.Duration {
	c := append([]time.Duration(nil), ds...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[len(c)/2]
}

func (s *steps) report(b *testing.B) {
	for name, ds := range s.d {
		b.ReportMetric(float64(p50(ds).Microseconds())/1000, name+"_p50_ms")
	}
}

// bapWorkflow runs navigate → observe → fill → click (submits, waits for the
// next page) → extract → screenshot through this package.
func bapWorkflow(ctx context.Context, s *Session, st *steps) error {
	var snap *Snapshot
	return firstErr(
		st.time("navigate", func() error {
			_, err := s.Navigate(ctx, NavigateRequest{URL: fx.A + "/bench.html"})
			return err
		}),
		st.time("observe", func() (err error) {
			snap, err = s.Observe(ctx, ObserveRequest{})
			return err
		}),
		st.time("fill", func() error {
			if snap == nil {
				return fmt.Errorf("no observation to fill from") // firstErr's arguments all run
			}
			n, ok := find(snap.Nodes, func(n Node) bool { return n.Name == "Search" && n.Role == "textbox" })
			if !ok {
				return fmt.Errorf("no search box")
			}
			_, err := s.Act(ctx, ActRequest{Action: ActionFill, NodeID: n.NodeID, Value: "teapot"})
			return err
		}),
		st.time("click", func() error {
			if snap == nil {
				return fmt.Errorf("no observation to click from")
			}
			n, _ := find(snap.Nodes, func(n Node) bool { return n.Name == "Search" && n.Role == "button" })
			res, err := s.Act(ctx, ActRequest{Action: ActionClick, NodeID: n.NodeID})
			if err == nil && !res.Navigated {
				err = fmt.Errorf("the click did not navigate")
			}
			return err
		}),
		st.time("extract", func() error {
			_, err := s.Extract(ctx, ExtractRequest{Kind: ExtractText})
			return err
		}),
		st.time("screenshot", func() error {
			_, err := s.Screenshot(ctx, ScreenshotRequest{})
			return err
		}),
	)
}

// rawWorkflow does the same with chromedp: the accessibility tree stands for
// observe, a CSS selector for the handle.
func rawWorkflow(ctx context.Context, st *steps) error {
	return rawWorkflowTitled(ctx, st, false)
}

// rawWorkflowTitled is rawWorkflow; with titled its navigate step also reads the new document's
// title, as BAP's navigate answers it (URL, title and status), where chromedp.Navigate answers
// nothing: the like-for-like figure beside the goal's (docs/benchmarks.md).
func rawWorkflowTitled(ctx context.Context, st *steps, titled bool) error {
	return firstErr(
		st.time("navigate", func() error {
			if !titled {
				return chromedp.Do(ctx, chromedp.Navigate(fx.A+"/bench.html"))
			}
			if err := chromedp.Do(ctx, chromedp.Navigate(fx.A+"/bench.html")); err != nil {
				return err
			}
			_, err := chromedp.Run(ctx, chromedp.Title())
			return err
		}),
		st.time("observe", func() error {
			_, err := chromedp.Call(ctx, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
			return err
		}),
		st.time("fill", func() error { return chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("q"), "teapot")) }),
		st.time("click", func() error {
			return chromedp.Do(ctx, chromedp.Click(chromedp.ID("go")), chromedp.WaitVisible(chromedp.ID("msg")))
		}),
		st.time("extract", func() error {
			_, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
			return err
		}),
		st.time("screenshot", func() error {
			_, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
			return err
		}),
	)
}

// floorWorkflow is the same workflow as the fewest protocol round trips any CDP client needs,
// waiting on the browser's events and never polling: the floor a BAP step is measured against
// (issue #25 item 3). navigate is Page.navigate and its load event; observe one evaluation that
// lists the page's controls (the least an observation costs: one trip into the page); fill focuses
// the box and inserts the text; click reads the button's box, presses and releases the mouse there
// and waits for the next document's load event; extract reads the body's text; screenshot is
// BAP's own capture (PNG, fast compression). loads receives the tab's load events.
func floorWorkflow(ctx context.Context, loads <-chan struct{}, st *steps) error {
	drain := func() {
		for {
			select {
			case <-loads:
			default:
				return
			}
		}
	}
	loaded := func() error {
		select {
		case <-loads:
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("no load event")
		}
	}
	eval := func(expr string, out any) error {
		res, err := chromedp.Call(ctx, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ReturnByValue: ptr(true)})
		switch {
		case err != nil:
			return err
		case res.ExceptionDetails != nil:
			return fmt.Errorf("%s: %s", expr, res.ExceptionDetails.Text)
		case out != nil && res.Result != nil:
			return json.Unmarshal(res.Result.Value, out)
		}
		return nil
	}
	return firstErr(
		st.time("navigate", func() error {
			drain()
			res, err := chromedp.Call(ctx, page.Navigate, page.NavigateParams{URL: fx.A + "/bench.html"})
			if err != nil {
				return err
			}
			if res.ErrorText != "" {
				return fmt.Errorf("navigate: %s", res.ErrorText)
			}
			return loaded()
		}),
		st.time("observe", func() error {
			var n int
			return eval(`document.querySelectorAll('a,button,input,select,textarea').length`, &n)
		}),
		st.time("fill", func() error {
			if err := eval(`document.getElementById('q').focus()`, nil); err != nil {
				return err
			}
			_, err := chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: "teapot"})
			return err
		}),
		st.time("click", func() error {
			var box struct{ X, Y float64 }
			if err := eval(`(() => { const r = document.getElementById('go').getBoundingClientRect();
				return {X: r.x + r.width / 2, Y: r.y + r.height / 2}; })()`, &box); err != nil {
				return err
			}
			drain()
			for _, typ := range []input.DispatchMouseEventType{input.DispatchMouseEventTypeMousePressed, input.DispatchMouseEventTypeMouseReleased} {
				if _, err := chromedp.Call(ctx, input.DispatchMouseEvent, input.DispatchMouseEventParams{
					Type: typ, X: box.X, Y: box.Y, Button: input.MouseButtonLeft, ClickCount: 1}); err != nil {
					return err
				}
			}
			return loaded()
		}),
		st.time("extract", func() error {
			var text string
			return eval(`document.body.innerText`, &text)
		}),
		st.time("screenshot", func() error {
			_, err := chromedp.Call(ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng, OptimizeForSpeed: ptr(true)})
			return err
		}),
	)
}

// floorContext returns a raw chromedp browser context for floorWorkflow and the channel of its
// tab's load events.
func floorContext(b *testing.B) (context.Context, <-chan struct{}) {
	ctx, cancel := chromedp.NewContext(rawBrowser(b), chromedp.WithNewBrowserContext())
	b.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // the tab exists before anyone listens to it
		b.Fatal(err)
	}
	loads := make(chan struct{}, 8)
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventLoadEventFired); ok {
			select {
			case loads <- struct{}{}:
			default:
			}
		}
	}); err != nil {
		b.Fatal(err)
	}
	return ctx, loads
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// rawContexts returns two raw chromedp browser contexts: one as it is, one whose traffic goes
// through an egress proxy of its own (as a BAP session's does). Both end with the benchmark.
func rawContexts(b *testing.B) (raw, proxied context.Context) {
	raw, cancel := chromedp.NewContext(rawBrowser(b), chromedp.WithNewBrowserContext())
	b.Cleanup(cancel)
	pol := testPolicy(b)
	px, err := egress.Listen(egress.Config{Policy: func() *policy.Policy { return pol }})
	if err != nil {
		b.Fatal(err)
	}
	proxied, pcancel := chromedp.NewContext(rawBrowser(b), chromedp.WithNewBrowserContext(func(p *target.CreateBrowserContextParams) {
		p.ProxyServer, p.ProxyBypassList = px.URL(), proxyBypassList
	}))
	b.Cleanup(func() { pcancel(); _ = px.Close() })
	return raw, proxied
}

func benchSession(b *testing.B) *Session {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := testBrowser.OpenSession(ctx, ids.New(ids.BrowserSession), testPolicy(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// BenchmarkWorkflow runs the workflow through this package (with and
// without the WebSocket CSP of Config.NoDocumentCSP), through raw chromedp
// (plain, behind an egress proxy, and reading the title after navigate) and
// as the raw-CDP floor (floorWorkflow), one after the other in each
// iteration, so that all see the same machine load; it reports each step's
// p50 per variant.
func BenchmarkWorkflow(b *testing.B) {
	ctx := context.Background()
	s := benchSession(b)
	plain := benchSession(b)
	plain.mu.Lock()
	plain.csp = ""
	plain.mu.Unlock()
	// The same raw chromedp workflow with and without the egress proxy in its path: what the
	// proxy costs.
	rctx, pctx := rawContexts(b)
	tctx, tcancel := chromedp.NewContext(rawBrowser(b), chromedp.WithNewBrowserContext())
	b.Cleanup(tcancel)
	fctx, floads := floorContext(b)
	// The same BAP workflow with policy.record on: every exchange archived as WARC (issue #20
	// item 2), into a writer that only counts the bytes, under a cap it never reaches.
	recorded := benchSession(b)
	archive := &countingWriter{}
	rec, err := warcrecord.New(warcrecord.Config{Out: archive, SpoolDir: b.TempDir(), Budget: warcrecord.NewBudget(1<<40, 0)})
	if err != nil {
		b.Fatal(err)
	}
	if err := recorded.Record(rec); err != nil {
		b.Fatal(err)
	}
	recordedRuns := 0
	variants := []struct {
		name string
		run  func(*steps) error
	}{
		{"bap", func(st *steps) error { return bapWorkflow(ctx, s, st) }},
		{"bap_nodoccsp", func(st *steps) error { return bapWorkflow(ctx, plain, st) }},
		{"chromedp", func(st *steps) error { return rawWorkflow(rctx, st) }},
		{"chromedp_proxied", func(st *steps) error { return rawWorkflow(pctx, st) }},
		{"chromedp_titled", func(st *steps) error { return rawWorkflowTitled(tctx, st, true) }},
		{"cdp_floor", func(st *steps) error { return floorWorkflow(fctx, floads, st) }},
		{"bap_recorded", func(st *steps) error { recordedRuns++; return bapWorkflow(ctx, recorded, st) }},
	}
	sts := make([]*steps, len(variants))
	for i, v := range variants {
		if err := v.run(&steps{}); err != nil { // warm up
			b.Fatal(v.name, err)
		}
		sts[i] = &steps{}
	}
	b.ResetTimer()
	for b.Loop() {
		for i, v := range variants {
			st := sts[i]
			if err := st.time("workflow", func() error { return v.run(st) }); err != nil {
				b.Fatal(v.name, err)
			}
		}
	}
	for i, v := range variants {
		for name, ds := range sts[i].d {
			b.ReportMetric(float64(p50(ds).Microseconds())/1000, v.name+"_"+name+"_p50_ms")
		}
	}
	b.ReportMetric(float64(archive.n.Load())/float64(recordedRuns), "bap_recorded_archive_bytes/workflow")
}

// countingWriter counts what is written to it and keeps nothing.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// BenchmarkObserveBig observes the 5,000-element page; bytes is the size of
// the snapshot's JSON, as a client receives it.
func BenchmarkObserveBig(b *testing.B) {
	for _, mode := range []string{ModeInteractive, ModeFull} {
		b.Run(mode, func(b *testing.B) {
			s := benchSession(b)
			ctx := context.Background()
			if _, err := s.Navigate(ctx, NavigateRequest{URL: fx.A + "/big.html"}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Observe(ctx, ObserveRequest{Mode: mode}); err != nil {
				b.Fatal(err)
			}
			var size int
			var nodes int
			st := &steps{}
			b.ResetTimer()
			for b.Loop() {
				var snap *Snapshot
				if err := st.time("observe", func() (err error) {
					snap, err = s.Observe(ctx, ObserveRequest{Mode: mode})
					return err
				}); err != nil {
					b.Fatal(err)
				}
				j, _ := json.Marshal(snap)
				size = len(j)
				nodes = countNodes(snap.Nodes)
			}
			st.report(b)
			b.ReportMetric(float64(size), "json_bytes")
			b.ReportMetric(float64(nodes), "nodes")
			benchBudgets(b, s, mode, size)
		})
	}
	b.Run("chromedp_axtree", func(b *testing.B) {
		ctx, cancel := chromedp.NewContext(rawBrowser(b), chromedp.WithNewBrowserContext())
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Navigate(fx.A+"/big.html")); err != nil {
			b.Fatal(err)
		}
		var size int
		st := &steps{}
		b.ResetTimer()
		for b.Loop() {
			var res *accessibility.GetFullAXTreeResult
			if err := st.time("observe", func() error {
				r, err := chromedp.Call(ctx, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
				res = &r
				return err
			}); err != nil {
				b.Fatal(err)
			}
			j, _ := json.Marshal(res)
			size = len(j)
		}
		st.report(b)
		b.ReportMetric(float64(size), "json_bytes")
	})
}

// benchCapBytes is the max_bytes the budget figures use (16 KiB, about 4,000 tokens).
const benchCapBytes = 16 << 10

// benchBudgets reports, outside the timed loop, the observation budgets on the heavy page: the
// token estimate of the whole observe, the size of the delta after one click (since the
// observation before it), and the size and number of the parts under max_bytes.
func benchBudgets(b *testing.B, s *Session, mode string, full int) {
	ctx := context.Background()
	k := observation.NewKeeper()
	base, err := k.Observe(ctx, s, ObserveRequest{Mode: mode})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(base.ApproxTokens), "approx_tokens")
	btn, ok := find(base.Nodes, func(n Node) bool { return n.Role == "button" && n.Name == "Add to cart" })
	if !ok {
		b.Fatal("no Add to cart button on big.html")
	}
	if _, err := s.Act(ctx, ActRequest{Action: ActionClick, NodeID: btn.NodeID}); err != nil {
		b.Fatal(err)
	}
	delta, err := k.Observe(ctx, s, ObserveRequest{Mode: mode, Since: base.ObservationID})
	if err != nil {
		b.Fatal(err)
	}
	dj, _ := json.Marshal(delta)
	b.ReportMetric(float64(len(dj)), "delta_bytes")
	b.ReportMetric(100*float64(len(dj))/float64(full), "delta_pct")
	req := ObserveRequest{Mode: mode, MaxBytes: benchCapBytes}
	largest, parts := 0, 0
	for {
		part, err := k.Observe(ctx, s, req)
		if err != nil {
			b.Fatal(err)
		}
		j, _ := json.Marshal(part)
		largest = max(largest, len(j))
		parts++
		if part.Continuation == nil {
			break
		}
		req = ObserveRequest{Cursor: part.Continuation.Cursor}
	}
	b.ReportMetric(float64(largest), "capped_max_bytes")
	b.ReportMetric(float64(parts), "capped_parts")
}

func countNodes(ns []Node) int {
	n := len(ns)
	for _, c := range ns {
		n += countNodes(c.Children)
	}
	return n
}

// BenchmarkOpenSession: a session from a warm browser versus a fresh
// chromedp browser context and tab.
func BenchmarkOpenSession(b *testing.B) {
	b.Run("bap_warm", func(b *testing.B) {
		st := &steps{}
		for b.Loop() {
			var s *Session
			if err := st.time("open", func() (err error) {
				s, err = testBrowser.OpenSession(context.Background(), ids.New(ids.BrowserSession), testPolicy(b), nil)
				return err
			}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_ = s.Close(context.Background())
			// Let the pool refill, as between real session requests.
			waitWarm(b)
			b.StartTimer()
		}
		st.report(b)
	})
	b.Run("chromedp_fresh", func(b *testing.B) {
		parent := rawBrowser(b)
		st := &steps{}
		for b.Loop() {
			var cancel context.CancelFunc
			if err := st.time("open", func() error {
				var ctx context.Context
				ctx, cancel = chromedp.NewContext(parent, chromedp.WithNewBrowserContext())
				return chromedp.Do(ctx)
			}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cancel()
			b.StartTimer()
		}
		st.report(b)
	})
}

func waitWarm(b *testing.B) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		testBrowser.mu.Lock()
		n := 0
		if testBrowser.proc != nil {
			n = len(testBrowser.proc.warm)
		}
		testBrowser.mu.Unlock()
		if n >= testBrowser.cfg.WarmContexts {
			return
		}
		time.Sleep(5 * time.Millisecond) // benchmark pacing only, outside the timed region
	}
}

// BenchmarkConcurrent runs the workflow in n sessions at once; workflows/s
// is the throughput.
func BenchmarkConcurrent(b *testing.B) {
	for _, n := range []int{4, 16} {
		b.Run(fmt.Sprintf("bap_%d", n), func(b *testing.B) {
			sessions := make([]*Session, n)
			for i := range sessions {
				sessions[i] = benchSession(b)
			}
			runConcurrent(b, n, func(i int) error { return bapWorkflow(context.Background(), sessions[i], &steps{}) })
		})
		b.Run(fmt.Sprintf("chromedp_%d", n), func(b *testing.B) {
			ctxs := make([]context.Context, n)
			for i := range ctxs {
				ctx, cancel := chromedp.NewContext(rawBrowser(b), chromedp.WithNewBrowserContext())
				defer cancel()
				if err := chromedp.Do(ctx); err != nil {
					b.Fatal(err)
				}
				ctxs[i] = ctx
			}
			runConcurrent(b, n, func(i int) error { return rawWorkflow(ctxs[i], &steps{}) })
		})
	}
}

// BenchmarkSessionMemory measures what one more session costs each browser in memory (issue #25
// item 4: memory per extra session no more than raw chromedp's): the PSS of the browser's whole
// process tree before and after opening four more sessions, each having run the workflow,
// BAP's sessions in the package's browser and raw chromedp's contexts (a browser context and a
// tab each) in its own browser. BAP's browser refills its warm contexts as sessions take them;
// the measure waits for the refill, so those count against BAP.
func BenchmarkSessionMemory(b *testing.B) {
	const extra = 4
	rawPID := chromedp.FromContext(rawBrowser(b)).Browser.Process().Pid
	testBrowser.mu.Lock()
	bapPID := testBrowser.proc.p.cmd.Process.Pid
	testBrowser.mu.Unlock()
	ctx := context.Background()
	mib := func(d int64) float64 { return float64(d) / extra / (1 << 20) }
	var bapPer, rawPer []float64
	for b.Loop() {
		waitWarm(b)
		before := proctree.PSS(bapPID)
		var opened []*Session
		for range extra {
			s := benchSession(b)
			if err := bapWorkflow(ctx, s, &steps{}); err != nil {
				b.Fatal(err)
			}
			opened = append(opened, s)
		}
		waitWarm(b)
		bapPer = append(bapPer, mib(proctree.PSS(bapPID)-before))
		for _, s := range opened {
			_ = s.Close(ctx)
		}

		before = proctree.PSS(rawPID)
		var cancels []context.CancelFunc
		for range extra {
			rctx, cancel := chromedp.NewContext(rawBrowser(b), chromedp.WithNewBrowserContext())
			cancels = append(cancels, cancel)
			if err := rawWorkflow(rctx, &steps{}); err != nil {
				b.Fatal(err)
			}
		}
		rawPer = append(rawPer, mib(proctree.PSS(rawPID)-before))
		for _, cancel := range cancels {
			cancel()
		}
	}
	median := func(v []float64) float64 {
		c := append([]float64(nil), v...)
		sort.Float64s(c)
		return c[len(c)/2]
	}
	b.ReportMetric(median(bapPer), "bap_MiB/session")
	b.ReportMetric(median(rawPer), "chromedp_MiB/session")
}

func runConcurrent(b *testing.B, n int, fn func(i int) error) {
	var mu sync.Mutex
	var errs []error
	t0 := time.Now()
	total := 0
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		total += n
	}
	b.ReportMetric(float64(total)/time.Since(t0).Seconds(), "workflows/s")
	b.ReportMetric(float64(len(errs)), "errors")
	if len(errs) > 0 {
		b.Logf("first error: %v", errs[0])
	}
}

// navTimingJS reads the document's navigation timing, the browser's own clock: req is the wait
// between the start of the fetch and the request being sent (where interception pauses it), total
// the time from the navigation's start to the end of its load event.
const navTimingJS = `(() => { const e = performance.getEntriesByType('navigation')[0];
  return {req: e.requestStart - e.fetchStart, total: e.loadEventEnd}; })()`

// BenchmarkNavigateInterception is a diagnostic: where navigate's time goes beside raw
// chromedp's, by turning interception down step by step in sessions of its own (never do this
// outside a benchmark: the unpaused variants give up the interception layer). Variants, in a
// shuffled order per iteration: bap (as shipped), bap_fetch_nomatch (Fetch enabled with a
// pattern that matches nothing), bap_documents_unpaused (every request paused but documents),
// bap_nofetch (no interception at all), chromedp, chromedp_proxied. It reports the p50 of
// navigate and of the navigation timing's req and total per variant.
func BenchmarkNavigateInterception(b *testing.B) {
	ctx := context.Background()
	type variant struct {
		name     string
		navigate func() error
		timing   func() (map[string]float64, error)
		st       steps
	}
	refetch := func(s *Session, ps []*fetch.RequestPattern) {
		s.mu.Lock()
		tb := s.tabs[s.defaultCtx]
		s.mu.Unlock()
		var err error
		if ps == nil {
			_, err = call(ctx, tb.page.sess, fetch.Disable, cdp.Empty{})
		} else {
			_, err = call(ctx, tb.page.sess, fetch.Enable, fetch.EnableParams{Patterns: ps})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	bapVariant := func(name string, patterns []*fetch.RequestPattern, off bool) *variant {
		s := benchSession(b)
		if _, err := s.Navigate(ctx, NavigateRequest{URL: fx.A + "/bench.html"}); err != nil {
			b.Fatal(err)
		}
		if patterns != nil || off {
			refetch(s, patterns)
		}
		return &variant{name: name, navigate: benchNavigate(ctx, s),
			timing: func() (map[string]float64, error) { return mainTiming(ctx, s, navTimingJS) }}
	}
	allButDocuments := []*fetch.RequestPattern{}
	for _, rt := range []network.ResourceType{"Stylesheet", "Image", "Media", "Font", "Script", "XHR", "Fetch", "EventSource", "Ping", "CSPViolationReport", "Other"} {
		allButDocuments = append(allButDocuments, &fetch.RequestPattern{URLPattern: "*", ResourceType: rt, RequestStage: fetch.RequestStageRequest})
	}
	allButDocuments = append(allButDocuments, &fetch.RequestPattern{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageResponse})
	rawVariant := func(name string, rctx context.Context) *variant {
		return &variant{name: name,
			navigate: func() error { return chromedp.Do(rctx, chromedp.Navigate(fx.A+"/bench.html")) },
			timing: func() (map[string]float64, error) {
				return chromedp.Run(rctx, chromedp.Evaluate[map[string]float64](navTimingJS))
			}}
	}
	rctx, pctx := rawContexts(b)
	vs := []*variant{
		bapVariant("bap", nil, false),
		bapVariant("bap_fetch_nomatch", []*fetch.RequestPattern{{URLPattern: "nomatch:*", RequestStage: fetch.RequestStageRequest}}, false),
		bapVariant("bap_documents_unpaused", allButDocuments, false),
		bapVariant("bap_nofetch", nil, true),
		rawVariant("chromedp", rctx),
		rawVariant("chromedp_proxied", pctx),
	}
	for _, v := range vs { // warm up
		if err := v.navigate(); err != nil {
			b.Fatal(v.name, err)
		}
	}
	timings := make(map[string]map[string][]time.Duration)
	b.ResetTimer()
	for b.Loop() {
		order := append([]*variant(nil), vs...)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, v := range order {
			if err := v.st.time("navigate", v.navigate); err != nil {
				b.Fatal(v.name, err)
			}
			b.StopTimer()
			m, err := v.timing()
			if err != nil {
				b.Fatal(v.name, err)
			}
			if timings[v.name] == nil {
				timings[v.name] = map[string][]time.Duration{}
			}
			for k, ms := range m {
				timings[v.name][k] = append(timings[v.name][k], time.Duration(ms*float64(time.Millisecond)))
			}
			b.StartTimer()
		}
	}
	for _, v := range vs {
		b.ReportMetric(float64(p50(v.st.d["navigate"]).Microseconds())/1000, v.name+"_navigate_p50_ms")
		for k, ds := range timings[v.name] {
			b.ReportMetric(float64(p50(ds).Microseconds())/1000, v.name+"_timing_"+k+"_p50_ms")
		}
	}
}

// splitJS reads where the document's own navigation lies on the wall clock: its time origin (the
// navigation's start, epoch ms) and the end of its load event (ms after that).
const splitJS = `(() => { const e = performance.getEntriesByType('navigation')[0];
  return {origin: performance.timeOrigin, loadEnd: e.loadEventEnd}; })()`

// BenchmarkNavigateSplit is a diagnostic: where navigate's time outside the document's own
// navigation goes, BAP (the test browser's session, and a session of a browser of its own with
// nothing else in it) beside raw chromedp, in a shuffled order, each navigate after a whole
// workflow as in BenchmarkWorkflow. It reports per variant the p50 of navigate, of before_start
// (navigate called → the document's time origin), of after_load (its load event's end →
// navigate answered) and of load_transit (the renderer's timestamp of the load event → its
// message read here, both on the monotonic clock), and renderers_born: how many renderer
// processes appeared during the navigates, all iterations together.
func BenchmarkNavigateSplit(b *testing.B) {
	ctx := context.Background()
	type variant struct {
		name     string
		pid      int // the browser's
		s        *Session
		workflow func(*steps) error
		navigate func() error
		timing   func() (map[string]float64, error)
		d        map[string][]time.Duration
		born     int
	}
	bapVariant := func(name string, br *Browser, s *Session) *variant {
		br.mu.Lock()
		pid := br.proc.p.cmd.Process.Pid
		br.mu.Unlock()
		return &variant{name: name, pid: pid, s: s,
			workflow: func(st *steps) error { return bapWorkflow(ctx, s, st) },
			navigate: benchNavigate(ctx, s),
			timing:   func() (map[string]float64, error) { return mainTiming(ctx, s, splitJS) }}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	own, err := Start(sctx, Config{WarmContexts: 1, MaxSessions: 2, transport: tap.transport})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = own.Close() })
	ownSess, err := own.OpenSession(sctx, ids.New(ids.BrowserSession), testPolicy(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ownSess.Close(context.Background()) })
	rctx, _ := rawContexts(b)
	if err := chromedp.Do(rctx); err != nil {
		b.Fatal(err)
	}
	var rawTransit atomic.Int64
	_ = chromedp.Listen(rctx, func(ev any) {
		if e, ok := ev.(*page.EventLoadEventFired); ok {
			rawTransit.Store(int64(monotonicNow() - time.Duration(float64(e.Timestamp)*float64(time.Second))))
		}
	})
	raw := &variant{name: "chromedp", pid: chromedp.FromContext(rctx).Browser.Process().Pid,
		workflow: func(st *steps) error { return rawWorkflow(rctx, st) },
		navigate: func() error { return chromedp.Do(rctx, chromedp.Navigate(fx.A+"/bench.html")) },
		timing: func() (map[string]float64, error) {
			return chromedp.Run(rctx, chromedp.Evaluate[map[string]float64](splitJS))
		}}
	vs := []*variant{bapVariant("bap", testBrowser, benchSession(b)), bapVariant("bap_own_browser", own, ownSess), raw}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for b.Loop() {
		order := append([]*variant(nil), vs...)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, v := range order {
			if v.d == nil {
				v.d = map[string][]time.Duration{}
			}
			if err := v.workflow(&steps{}); err != nil {
				b.Fatal(v.name, err)
			}
			if v.s != nil {
				v.s.mu.Lock()
				sess := v.s.tabs[v.s.defaultCtx].page.sess
				v.s.mu.Unlock()
				if err := sess.sync(ctx); err != nil {
					b.Fatal(err)
				}
				tap.start(sess.id)
			}
			before := renderersOf(b, v.pid)
			t0 := time.Now()
			err := v.navigate()
			t1 := time.Now()
			after := renderersOf(b, v.pid)
			var msgs []wireMsg
			if v.s != nil {
				msgs = tap.stop()
			}
			if err != nil {
				b.Fatal(v.name, err)
			}
			for p := range after {
				if !before[p] {
					v.born++
				}
			}
			m, err := v.timing()
			if err != nil {
				b.Fatal(v.name, err)
			}
			origin := time.UnixMicro(int64(m["origin"] * 1000))
			v.d["navigate"] = append(v.d["navigate"], t1.Sub(t0))
			v.d["before_start"] = append(v.d["before_start"], origin.Sub(t0))
			v.d["after_load"] = append(v.d["after_load"], t1.Sub(origin.Add(ms(m["loadEnd"]))))
			transit := time.Duration(rawTransit.Load())
			for _, w := range msgs {
				if w.method == "Page.loadEventFired" {
					transit = w.readAt - w.stamp
				}
			}
			v.d["load_transit"] = append(v.d["load_transit"], transit)
		}
	}
	for _, v := range vs {
		for k, ds := range v.d {
			b.ReportMetric(float64(p50(ds).Microseconds())/1000, v.name+"_"+k+"_p50_ms")
		}
		b.ReportMetric(float64(v.born), v.name+"_renderers_born")
	}
}

// benchNavigate navigates the session to the benchmark page.
func benchNavigate(ctx context.Context, s *Session) func() error {
	return func() error {
		_, err := s.Navigate(ctx, NavigateRequest{URL: fx.A + "/bench.html"})
		return err
	}
}

// mainTiming evaluates a navigation-timing expression in the agent's world of the session's main
// frame (the page's performance entries are the same in every world).
func mainTiming(ctx context.Context, s *Session, expr string) (map[string]float64, error) {
	s.mu.Lock()
	tb := s.tabs[s.defaultCtx]
	s.mu.Unlock()
	var m map[string]float64
	err := s.inFrame(ctx, tb, tb.main, func(w *world) error {
		res, err := call(ctx, w.host.sess, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ContextID: w.id, ReturnByValue: ptr(true)})
		if err != nil || res.Result == nil {
			return fmt.Errorf("navigation timing: %w", err)
		}
		return json.Unmarshal(res.Result.Value, &m)
	})
	return m, err
}

// renderersOf returns the renderer processes (--type=renderer) of the browser started as pid.
func renderersOf(tb testing.TB, pid int) map[int]bool {
	out := map[int]bool{}
	for _, pi := range browserProcs(tb, pid) {
		if hasArg(pi.cmdline, "--type=renderer") {
			out[pi.pid] = true
		}
	}
	return out
}

// monotonicNow reads the system's monotonic clock (CLOCK_MONOTONIC), the clock of the
// protocol's MonotonicTime timestamps.
func monotonicNow() time.Duration {
	var ts syscall.Timespec
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0) // 1: CLOCK_MONOTONIC
	return time.Duration(ts.Nano())
}

// tableJS is how a raw chromedp user reads the 50-row table: one evaluation returning its header
// and its rows' cell texts.
const tableJS = `(() => { const t = document.getElementById('history');
  const cells = (r) => [...r.cells].map((c) => c.innerText.trim());
  return {columns: cells(t.tHead.rows[0]), rows: [...t.tBodies[0].rows].map(cells)}; })()`

// BenchmarkExtractTable extracts the 50-row table of table50.html through this package (extract
// kind table on the table's handle, from one observe before the loop) and through raw chromedp
// (tableJS), alternately in each iteration; it reports each side's p50 (issue #25: ≤ 1.25× raw, or
// within 10 ms of it). Both sides must read the same 50 rows of 4 cells.
func BenchmarkExtractTable(b *testing.B) {
	ctx := context.Background()
	s := benchSession(b)
	if _, err := s.Navigate(ctx, NavigateRequest{URL: fx.A + "/table50.html"}); err != nil {
		b.Fatal(err)
	}
	snap, err := s.Observe(ctx, ObserveRequest{Mode: ModeFull})
	if err != nil {
		b.Fatal(err)
	}
	table, ok := find(snap.Nodes, func(n Node) bool { return n.Role == "table" })
	if !ok {
		b.Fatal("no table in the observation")
	}
	tableID := table.NodeID
	rctx, _ := rawContexts(b)
	if err := chromedp.Do(rctx, chromedp.Navigate(fx.A+"/table50.html")); err != nil {
		b.Fatal(err)
	}
	bapRead := func() (*Table, error) {
		res, err := s.Extract(ctx, ExtractRequest{Kind: ExtractTable, NodeID: tableID})
		if err != nil {
			return nil, err
		}
		t, ok := res.Data.(*Table)
		if !ok {
			return nil, fmt.Errorf("extract answered %T", res.Data)
		}
		return t, nil
	}
	rawRead := func() (*Table, error) {
		t, err := chromedp.Run(rctx, chromedp.Evaluate[Table](tableJS))
		return &t, err
	}
	for name, read := range map[string]func() (*Table, error){"bap": bapRead, "chromedp": rawRead} {
		t, err := read()
		if err != nil {
			b.Fatal(name, err)
		}
		if len(t.Columns) != 4 || len(t.Rows) != 50 || len(t.Rows[49]) != 4 || t.Rows[0][0] != "2001" {
			b.Fatalf("%s read %d columns, %d rows: %v", name, len(t.Columns), len(t.Rows), t.Rows[:min(len(t.Rows), 2)])
		}
	}
	st := &steps{}
	b.ResetTimer()
	for b.Loop() {
		if err := st.time("bap_extract_table", func() error { _, err := bapRead(); return err }); err != nil {
			b.Fatal(err)
		}
		if err := st.time("chromedp_extract_table", func() error { _, err := rawRead(); return err }); err != nil {
			b.Fatal(err)
		}
	}
	st.report(b)
}
