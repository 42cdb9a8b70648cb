package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkComponentScores runs every real-component fixture task (testdata/components/
// tasks.json) once through BAP (runComponentTask: the HTTP API, the public act vocabulary) and
// once through Playwright MCP (runPWMCPTask: stdio MCP, the same vocabulary played through
// browser_snapshot refs), in the same run, one fresh fixture site per task, and prints the
// passes per library side by side with every failing task and its reason. It is a benchmark
// (a comparison, not a gate): `make test` never runs it; scripts/bench.sh does:
//
//	go test ./server/internal/e2e -run '^$' -bench BenchmarkComponentScores -benchtime 1x -count 1
//
// BENCH_COMPONENTS_OUT=<file> also writes the per-task results as JSON;
// BENCH_COMPONENTS_TASKS=<regexp> runs only the tasks whose id matches. The two systems run one
// after the other (BAP first), each scoreParallelism() tasks at a time. It skips itself when the fixtures or Playwright MCP are not installed
// (scripts/install-component-fixtures.sh, scripts/install-playwright-mcp.sh).
func BenchmarkComponentScores(b *testing.B) {
	if _, err := os.Stat(componentsDir + "/node_modules/.bap-components.sha256"); err != nil {
		b.Skip("the component libraries are not installed: run scripts/install-component-fixtures.sh")
	}
	env, err := findPWMCP()
	if err != nil {
		b.Skip(err)
	}
	// BAP's request log (one line per request at INFO) would bury the table.
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer slog.SetDefault(prev)
	// The fixture helpers (newStack, newComponentSite, runComponentTask) take a *testing.T: run
	// the comparison as a test of its own inside the benchmark. The matcher accepts it whatever
	// -test.run says (it is '^$' in a benchmark run).
	var rep *scoreReport
	ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
		Name: "ComponentScores",
		F:    func(t *testing.T) { rep = runComponentScores(t, env) },
	}})
	if rep == nil {
		b.Fatal("the component score run did not finish (see its log above)")
	}
	rep.print(os.Stdout)
	bp, pp := rep.passes()
	b.ReportMetric(float64(len(rep.tasks)), "tasks")
	b.ReportMetric(float64(bp), "bap_pass")
	b.ReportMetric(float64(pp), "pwmcp_pass")
	b.ReportMetric(rep.bapSeconds, "bap_s")
	b.ReportMetric(rep.pwSeconds, "pwmcp_s")
	if out := os.Getenv("BENCH_COMPONENTS_OUT"); out != "" {
		if err := rep.writeJSON(out); err != nil {
			b.Fatalf("BENCH_COMPONENTS_OUT: %v", err)
		}
	}
	if !ok {
		b.Error("some task stopped its harness (a failed HTTP call or a leaked CDP id: see the log above); its result counts as a failure")
	}
}

// scoreReport is the outcome of one comparison run.
type scoreReport struct {
	env                   pwmcpEnv
	tasks                 []componentTask
	baseline              map[string]string
	bap, pw               []scoreResult
	bapSeconds, pwSeconds float64
	parallel              int
	started               time.Time
}

func runComponentScores(t *testing.T, env pwmcpEnv) *scoreReport {
	all := loadComponentTasks(t)
	tasks := all
	if pat := os.Getenv("BENCH_COMPONENTS_TASKS"); pat != "" {
		re, err := regexp.Compile(pat)
		if err != nil {
			t.Fatalf("BENCH_COMPONENTS_TASKS: %v", err)
		}
		tasks = nil
		for _, tk := range all {
			if re.MatchString(tk.ID) {
				tasks = append(tasks, tk)
			}
		}
	}
	rep := &scoreReport{env: env, tasks: tasks, baseline: loadComponentBaseline(t, all), parallel: scoreParallelism(), started: time.Now().UTC()}
	s := newStack(t)
	rep.bap, rep.bapSeconds = runScorePhase(t, "bap", tasks, rep.parallel, func(t *testing.T, tk componentTask) scoreResult {
		start := time.Now()
		r := runComponentTask(t, s, tk)
		return scoreResult{componentResult: r, seconds: time.Since(start).Seconds()}
	})
	rep.pw, rep.pwSeconds = runScorePhase(t, "playwright-mcp", tasks, rep.parallel, func(t *testing.T, tk componentTask) scoreResult {
		return runPWMCPTask(t, env, tk)
	})
	return rep
}

// scoreParallelism is how many tasks run at once: componentParallelism() within -test.parallel
// (which bounds parallel subtests; it defaults to GOMAXPROCS).
func scoreParallelism() int {
	n := componentParallelism()
	if f := flag.Lookup("test.parallel"); f != nil {
		if p, err := strconv.Atoi(f.Value.String()); err == nil && p > 0 && p < n {
			n = p
		}
	}
	return n
}

// runScorePhase runs every task through one system, parallel tasks at a time; a task whose
// harness stopped (t.Fatal) keeps a failed result.
func runScorePhase(t *testing.T, name string, tasks []componentTask, parallel int, run func(*testing.T, componentTask) scoreResult) ([]scoreResult, float64) {
	results := make([]scoreResult, len(tasks))
	for i, tk := range tasks {
		results[i] = scoreResult{componentResult: componentResult{task: tk, step: -1, problem: "the harness stopped (see the log)"}}
	}
	sem := make(chan struct{}, parallel)
	start := time.Now()
	t.Run(name, func(t *testing.T) {
		for i, tk := range tasks {
			t.Run(tk.ID, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				results[i] = run(t, tk)
			})
		}
	})
	return results, time.Since(start).Seconds()
}

func (r *scoreReport) passes() (bap, pw int) {
	for i := range r.tasks {
		if r.bap[i].pass {
			bap++
		}
		if r.pw[i].pass {
			pw++
		}
	}
	return bap, pw
}

func (r *scoreReport) libraries() []string {
	seen := map[string]bool{}
	var libs []string
	for _, tk := range r.tasks {
		if !seen[tk.Library] {
			seen[tk.Library] = true
			libs = append(libs, tk.Library)
		}
	}
	sort.Strings(libs)
	return libs
}

func (r *scoreReport) print(w io.Writer) {
	fmt.Fprintf(w, "\ncomponent tasks, BAP beside Playwright MCP %s (playwright-core %s, %s, %s), same run, %d tasks at a time\n",
		r.env.MCPVersion, r.env.CoreVersion, r.env.NodeVersion, r.env.ChromiumVersion, r.parallel)
	fmt.Fprintf(w, "  %-10s %6s %6s %15s\n", "library", "tasks", "BAP", "Playwright MCP")
	for _, lib := range r.libraries() {
		n, bp, pp := 0, 0, 0
		for i, tk := range r.tasks {
			if tk.Library != lib {
				continue
			}
			n++
			if r.bap[i].pass {
				bp++
			}
			if r.pw[i].pass {
				pp++
			}
		}
		fmt.Fprintf(w, "  %-10s %6d %6d %15d\n", lib, n, bp, pp)
	}
	bp, pp := r.passes()
	fmt.Fprintf(w, "  %-10s %6d %6d %15d\n", "total", len(r.tasks), bp, pp)
	fmt.Fprintf(w, "  wall time: BAP %.0f s, Playwright MCP %.0f s\n", r.bapSeconds, r.pwSeconds)
	for _, side := range []struct {
		name string
		res  []scoreResult
	}{{"BAP", r.bap}, {"Playwright MCP", r.pw}} {
		var lines []string
		for i, tk := range r.tasks {
			res := side.res[i]
			if res.pass {
				continue
			}
			mark := ""
			if reason, known := r.baseline[tk.ID]; known && side.name == "BAP" {
				mark = " (baseline: " + reason + ")"
			}
			lines = append(lines, fmt.Sprintf("    %-22s %s: %s%s", tk.ID, describeStep(tk, res.step), clip(res.problem, 600), mark))
		}
		fmt.Fprintf(w, "  %s failures (%d):\n", side.name, len(lines))
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
	var notes []string
	for i, tk := range r.tasks {
		if len(r.pw[i].notes) > 0 {
			verdict := "fail"
			if r.pw[i].pass {
				verdict = "pass"
			}
			notes = append(notes, fmt.Sprintf("    %-22s %s; %s", tk.ID, verdict, clip(strings.Join(r.pw[i].notes, "; "), 400)))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "  Playwright MCP driver fallbacks (%d tasks):\n", len(notes))
		for _, l := range notes {
			fmt.Fprintln(w, l)
		}
	}
	fmt.Fprintln(w)
}

type scoreJSON struct {
	Pass    bool     `json:"pass"`
	Step    string   `json:"step,omitempty"` // the failing step
	Problem string   `json:"problem,omitempty"`
	Seconds float64  `json:"seconds"`
	Notes   []string `json:"notes,omitempty"`
}

func scoreJSONOf(tk componentTask, r scoreResult) scoreJSON {
	j := scoreJSON{Pass: r.pass, Seconds: float64(int(r.seconds*100)) / 100, Notes: r.notes}
	if !r.pass {
		j.Step, j.Problem = describeStep(tk, r.step), r.problem
	}
	return j
}

func (r *scoreReport) writeJSON(path string) error {
	type taskJSON struct {
		ID            string    `json:"id"`
		Library       string    `json:"library"`
		BAP           scoreJSON `json:"bap"`
		PlaywrightMCP scoreJSON `json:"playwright_mcp"`
		Baseline      string    `json:"bap_baseline,omitempty"`
	}
	type libJSON struct {
		Tasks         int `json:"tasks"`
		BAP           int `json:"bap_pass"`
		PlaywrightMCP int `json:"playwright_mcp_pass"`
	}
	bp, pp := r.passes()
	out := struct {
		Started       string             `json:"started"`
		Parallel      int                `json:"parallel"`
		PlaywrightMCP map[string]string  `json:"playwright_mcp"`
		Tasks         int                `json:"tasks"`
		BAPPass       int                `json:"bap_pass"`
		PWPass        int                `json:"playwright_mcp_pass"`
		BAPSeconds    float64            `json:"bap_seconds"`
		PWSeconds     float64            `json:"playwright_mcp_seconds"`
		PerLibrary    map[string]libJSON `json:"per_library"`
		Results       []taskJSON         `json:"results"`
	}{
		Started: r.started.Format(time.RFC3339), Parallel: r.parallel,
		PlaywrightMCP: map[string]string{"version": r.env.MCPVersion, "playwright_core": r.env.CoreVersion,
			"node": r.env.NodeVersion, "chromium": r.env.ChromiumVersion},
		Tasks: len(r.tasks), BAPPass: bp, PWPass: pp,
		BAPSeconds: float64(int(r.bapSeconds*10)) / 10, PWSeconds: float64(int(r.pwSeconds*10)) / 10,
		PerLibrary: map[string]libJSON{},
	}
	for i, tk := range r.tasks {
		l := out.PerLibrary[tk.Library]
		l.Tasks++
		if r.bap[i].pass {
			l.BAP++
		}
		if r.pw[i].pass {
			l.PlaywrightMCP++
		}
		out.PerLibrary[tk.Library] = l
		out.Results = append(out.Results, taskJSON{ID: tk.ID, Library: tk.Library, BAP: scoreJSONOf(tk, r.bap[i]),
			PlaywrightMCP: scoreJSONOf(tk, r.pw[i]), Baseline: r.baseline[tk.ID]})
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
