package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The real-component fixture suite: pages built from the published browser bundles of UI
// component libraries (testdata/components: pinned in package.json and its lock, installed into
// node_modules by scripts/install-component-fixtures.sh), one task list (tasks.json) run through
// BAP's HTTP API with the public act vocabulary only, judged by the POSTs the fixture server
// records. Tasks listed in testdata/components/baseline are known to fail today: their failures
// are logged, not reported; every other task must pass. See testdata/components/README.md.

const (
	componentsDir = "testdata/components"
	// componentStepTimeoutMS bounds each act (a query that never matches waits this long): the
	// API's default, because Ionic defines its components lazily after load, which took more
	// than 8 s on a 2-core machine under a load average of 38.
	componentStepTimeoutMS = 30000
	// componentEffectWait bounds the wait for the expected POSTs after the last step.
	componentEffectWait = 15 * time.Second
	// componentParallel tasks run at once (each in its own session of the shared browser);
	// BAP_COMPONENTS_PARALLEL overrides it.
	componentParallel = 4
)

func componentParallelism() int {
	if n, err := strconv.Atoi(os.Getenv("BAP_COMPONENTS_PARALLEL")); err == nil && n > 0 {
		return n
	}
	return componentParallel
}

type componentTask struct {
	ID      string            `json:"id"`
	Library string            `json:"library"`
	Page    string            `json:"page"`
	Steps   []map[string]any  `json:"steps"`
	Expect  []componentEffect `json:"expect"`
}

type componentEffect struct {
	Path string          `json:"path"`
	Body json.RawMessage `json:"body"`
}

// The vocabulary a task may use: spec/schemas/ActRequest.json and Query.json (no node ids, no
// uploads: a task names its targets by what a person sees).
var (
	componentActions = []string{"click", "fill", "clear", "select_option", "check", "uncheck", "press_key", "hover", "focus", "scroll_into_view"}
	componentStepKey = []string{"action", "query", "value", "values", "key"}
	componentQueryKy = []string{"role", "name", "text", "label", "placeholder", "test_id", "exact"}
)

func loadComponentTasks(t *testing.T) []componentTask {
	t.Helper()
	b, err := os.ReadFile(componentsDir + "/tasks.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var tasks []componentTask
	if err := dec.Decode(&tasks); err != nil {
		t.Fatalf("tasks.json: %v", err)
	}
	seen := map[string]bool{}
	for _, tk := range tasks {
		if tk.ID == "" || seen[tk.ID] || tk.Library == "" || !strings.HasPrefix(tk.Page, "/pages/") || len(tk.Steps) == 0 || len(tk.Expect) == 0 {
			t.Fatalf("tasks.json: task %q: needs a unique id, a library, a /pages/ page, steps and expected effects", tk.ID)
		}
		seen[tk.ID] = true
		if _, err := os.Stat(componentsDir + tk.Page); err != nil {
			t.Fatalf("tasks.json: task %s: %v", tk.ID, err)
		}
		for i, st := range tk.Steps {
			if err := checkComponentStep(st); err != nil {
				t.Fatalf("tasks.json: task %s step %d: %v", tk.ID, i, err)
			}
		}
		for _, e := range tk.Expect {
			if !strings.HasPrefix(e.Path, "/effect/") || !json.Valid(e.Body) {
				t.Fatalf("tasks.json: task %s: expected effect %s needs an /effect/ path and a JSON body", tk.ID, e.Path)
			}
		}
	}
	return tasks
}

func checkComponentStep(st map[string]any) error {
	for k := range st {
		if !slices.Contains(componentStepKey, k) {
			return fmt.Errorf("field %q is not part of the task vocabulary", k)
		}
	}
	action, _ := st["action"].(string)
	if !slices.Contains(componentActions, action) {
		return fmt.Errorf("action %q is not one of %v", st["action"], componentActions)
	}
	q, ok := st["query"].(map[string]any)
	if _, has := st["query"]; (!has && action != "press_key") || (has && (!ok || len(q) == 0)) {
		return fmt.Errorf("a step needs a query (press_key without one presses on the focused element)")
	}
	for k := range q {
		if !slices.Contains(componentQueryKy, k) {
			return fmt.Errorf("query field %q is not part of Query", k)
		}
	}
	need := map[string]string{"fill": "value", "select_option": "values", "press_key": "key"}[action]
	if _, ok := st[need]; need != "" && !ok {
		return fmt.Errorf("%s needs %q", action, need)
	}
	return nil
}

// loadComponentBaseline reads the known failures: "<task-id> <reason>" per line, # comments.
func loadComponentBaseline(t *testing.T, tasks []componentTask) map[string]string {
	t.Helper()
	f, err := os.Open(componentsDir + "/baseline")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	known := map[string]bool{}
	for _, tk := range tasks {
		known[tk.ID] = true
	}
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, reason, _ := strings.Cut(line, " ")
		if !known[id] {
			t.Fatalf("baseline: %q is not a task of tasks.json", id)
		}
		out[id] = strings.TrimSpace(reason)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// componentSite is the fixture server of one task: the pages, the installed libraries
// (read-only) and a recorder of the effects the pages POST.
type componentSite struct {
	srv *httptest.Server

	mu      sync.Mutex
	effects []componentEffect // in arrival order
	missing []string          // requests answered 404 (a library that failed to load shows here)
	changed chan struct{}     // closed and replaced on each recorded effect
}

func newComponentSite(t *testing.T) *componentSite {
	t.Helper()
	s := &componentSite{changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("GET /pages/", s.files("/pages/", componentsDir+"/pages"))
	mux.Handle("GET /lib/", s.files("/lib/", componentsDir+"/node_modules"))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /effect/", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || !json.Valid(b) {
			http.Error(w, "want a JSON body", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.effects = append(s.effects, componentEffect{Path: r.URL.Path, Body: b})
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.noteMissing(r)
		http.NotFound(w, r)
	})
	s.srv = httptest.NewServer(mux) // 127.0.0.1
	t.Cleanup(s.srv.Close)
	return s
}

var componentTypes = map[string]string{
	".js": "text/javascript; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8", ".html": "text/html; charset=utf-8",
	".json": "application/json", ".map": "application/json", ".svg": "image/svg+xml",
	".woff2": "font/woff2", ".woff": "font/woff", ".ttf": "font/ttf", ".png": "image/png",
}

// files serves dir read-only (GET and HEAD) under prefix, with the Content-Types module scripts
// and style sheets need, and no directory listings.
func (s *componentSite) files(prefix, dir string) http.Handler {
	fs := http.StripPrefix(prefix, http.FileServerFS(os.DirFS(dir)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			s.noteMissing(r)
			http.NotFound(w, r)
			return
		}
		ext := path.Ext(r.URL.Path)
		ct, ok := componentTypes[ext]
		if !ok {
			ct = mime.TypeByExtension(ext)
		}
		if ct == "" {
			ct = "application/octet-stream"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		rec := &statusRecorder{ResponseWriter: w}
		fs.ServeHTTP(rec, r)
		if rec.status == http.StatusNotFound {
			s.noteMissing(r)
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (s *componentSite) noteMissing(r *http.Request) {
	s.mu.Lock()
	s.missing = append(s.missing, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
}

// waitFor waits, at most d, until every expected path has been posted as often as expected (or
// more often); it returns the effects recorded by then.
func (s *componentSite) waitFor(want []componentEffect, d time.Duration) []componentEffect {
	need := map[string]int{}
	for _, e := range want {
		need[e.Path]++
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		got := slices.Clone(s.effects)
		changed := s.changed
		s.mu.Unlock()
		count := map[string]int{}
		for _, e := range got {
			count[e.Path]++
		}
		done := true
		for p, n := range need {
			if count[p] < n {
				done = false
			}
		}
		if done {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			return got
		}
	}
}

// sameEffects reports whether got holds each expected effect exactly once (bodies compared as
// JSON values) and nothing else.
func sameEffects(got, want []componentEffect) bool {
	if len(got) != len(want) {
		return false
	}
	used := make([]bool, len(got))
	for _, w := range want {
		var wv any
		if json.Unmarshal(w.Body, &wv) != nil {
			return false
		}
		found := false
		for i, g := range got {
			var gv any
			if used[i] || g.Path != w.Path || json.Unmarshal(g.Body, &gv) != nil || !reflect.DeepEqual(gv, wv) {
				continue
			}
			used[i], found = true, true
			break
		}
		if !found {
			return false
		}
	}
	return true
}

func effectsString(es []componentEffect) string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString(", ")
		}
		var v any
		_ = json.Unmarshal(e.Body, &v)
		compact, _ := json.Marshal(v)
		fmt.Fprintf(&b, "%s %s", e.Path, compact)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// componentResult is the outcome of one task.
type componentResult struct {
	task    componentTask
	pass    bool
	ran     bool
	step    int    // failing step (-1: navigate; len(steps): the effects)
	problem string // the failing step's problem JSON, or what was recorded instead
}

// runComponentTask runs one task through the HTTP API: a task allowed on the fixture origin, a
// session, a navigation, one act per step (each with its own key), then the recorded effects.
func runComponentTask(t *testing.T, s *stack, tk componentTask) componentResult {
	site := newComponentSite(t)
	res := componentResult{task: tk, ran: true}
	r := s.must(t, 201, "POST", "/bap/v1/tasks", tk.ID+"-task", map[string]any{
		"goal":   "component fixture task " + tk.ID,
		"policy": map[string]any{"allowed_origins": []string{site.srv.URL}},
	})
	taskID := r.str("task", "task_id")
	sessionID := s.must(t, 201, "POST", "/bap/v1/tasks/"+taskID+"/browser-sessions", tk.ID+"-session", map[string]any{}).str("session", "session_id")
	base := "/bap/v1/browser-sessions/" + sessionID
	defer s.call(t, "POST", base+"/close", tk.ID+"-close", map[string]any{})

	nav := s.call(t, "POST", base+"/navigate", tk.ID+"-navigate", map[string]any{"url": site.srv.URL + tk.Page, "wait_until": "load"})
	assertNoCDPIDs(t, nav.raw)
	if nav.status != 200 {
		res.step, res.problem = -1, fmt.Sprintf("navigate: %d %s", nav.status, nav.raw)
		return res
	}
	for i, st := range tk.Steps {
		body := map[string]any{"timeout_ms": componentStepTimeoutMS}
		for k, v := range st {
			body[k] = v
		}
		a := s.call(t, "POST", base+"/act", fmt.Sprintf("%s-step-%d", tk.ID, i), body)
		assertNoCDPIDs(t, a.raw)
		if a.status != 200 {
			res.step, res.problem = i, fmt.Sprintf("%d %s", a.status, problemJSON(a))
			return res
		}
	}
	site.judge(tk, &res)
	return res
}

// judge waits (bounded) for the task's expected effects after its last step and records in res
// whether the site saw exactly them; both runners (BAP and Playwright MCP) are judged by it.
func (s *componentSite) judge(tk componentTask, res *componentResult) {
	got := s.waitFor(tk.Expect, componentEffectWait)
	res.step = len(tk.Steps)
	if !sameEffects(got, tk.Expect) {
		s.mu.Lock()
		missing := slices.Clone(s.missing)
		s.mu.Unlock()
		res.problem = fmt.Sprintf("recorded %s; want %s", effectsString(got), effectsString(tk.Expect))
		if len(missing) > 0 {
			res.problem += fmt.Sprintf(" (404s: %s)", strings.Join(missing, ", "))
		}
		return
	}
	res.pass = true
}

// problemJSON is the problem of a refused act without its receipt (ids of no use in a summary).
func problemJSON(r reply) string {
	if r.body == nil {
		return string(bytes.TrimSpace(r.raw))
	}
	p := maps.Clone(r.body)
	delete(p, "receipt")
	b, _ := json.Marshal(p)
	return string(b)
}

func describeStep(tk componentTask, i int) string {
	switch {
	case i < 0:
		return "navigate"
	case i >= len(tk.Steps):
		return "effects"
	}
	st := tk.Steps[i]
	q, _ := json.Marshal(st["query"])
	return fmt.Sprintf("step %d %v %s", i, st["action"], q)
}

func TestComponentLibraries(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(componentsDir + "/node_modules/.bap-components.sha256"); err != nil {
		t.Fatal("the component libraries are not installed: run scripts/install-component-fixtures.sh (make test-go does)")
	}
	tasks := loadComponentTasks(t)
	baseline := loadComponentBaseline(t, tasks)
	s := newStack(t)

	results := make([]componentResult, len(tasks))
	sem := make(chan struct{}, componentParallelism())
	t.Run("tasks", func(t *testing.T) {
		for i, tk := range tasks {
			t.Run(tk.ID, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				res := runComponentTask(t, s, tk)
				results[i] = res
				reason, known := baseline[tk.ID]
				switch {
				case res.pass && known:
					t.Logf("now passing, remove it from the baseline (listed as: %s)", reason)
				case res.pass:
				case known:
					t.Logf("known failure (baseline: %s): %s: %s", reason, describeStep(tk, res.step), res.problem)
				default:
					t.Errorf("%s: %s", describeStep(tk, res.step), res.problem)
				}
			})
		}
	})

	// The summary: every task's result, then the score.
	var lines []string
	pass, perLib, libPass := 0, map[string]int{}, map[string]int{}
	var libs []string
	for _, res := range results {
		if !res.ran {
			continue
		}
		lib := res.task.Library
		if perLib[lib] == 0 {
			libs = append(libs, lib)
		}
		perLib[lib]++
		mark := "FAIL"
		if res.pass {
			pass++
			libPass[lib]++
			mark = "pass"
		}
		_, known := baseline[res.task.ID]
		switch {
		case res.pass && known:
			mark += " (now passing: remove from baseline)"
		case !res.pass && known:
			mark += " (baseline)"
		case !res.pass:
			mark += " (NEW)"
		}
		line := fmt.Sprintf("%-22s %s", res.task.ID, mark)
		if !res.pass {
			line += fmt.Sprintf("\n    %s: %s", describeStep(res.task, res.step), res.problem)
		}
		lines = append(lines, line)
	}
	sort.Strings(libs)
	var per []string
	for _, lib := range libs {
		per = append(per, fmt.Sprintf("%s %d/%d", lib, libPass[lib], perLib[lib]))
	}
	ran := 0
	for _, lib := range libs {
		ran += perLib[lib]
	}
	t.Logf("component tasks:\n%s\ncomponents: %d of %d tasks pass (per library: %s)", strings.Join(lines, "\n"), pass, ran, strings.Join(per, ", "))
}

// The fixture server serves the libraries with the types browsers require of module scripts and
// style sheets, read-only, and records effects per path in order.
func TestComponentSiteServesAndRecords(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(componentsDir + "/node_modules/.bap-components.sha256"); err != nil {
		t.Fatal("the component libraries are not installed: run scripts/install-component-fixtures.sh (make test-go does)")
	}
	site := newComponentSite(t)
	for p, want := range map[string]string{
		"/lib/@shoelace-style/shoelace/cdn/shoelace.js":                "text/javascript; charset=utf-8",
		"/lib/tslib/tslib.es6.mjs":                                     "text/javascript; charset=utf-8",
		"/lib/bootstrap/dist/css/bootstrap.min.css":                    "text/css; charset=utf-8",
		"/lib/@fluentui/web-components/dist/web-components-all.min.js": "text/javascript; charset=utf-8",
		"/pages/shoelace.html":                                         "text/html; charset=utf-8",
	} {
		resp, err := http.Get(site.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != want {
			t.Errorf("GET %s: %d %q, want 200 %q", p, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
	}
	for _, p := range []string{"/lib/", "/lib/../package.json", "/lib/bootstrap/"} {
		resp, err := http.Get(site.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("GET %s: 200, want no listing and nothing outside node_modules", p)
		}
	}
	resp, err := http.Post(site.srv.URL+"/lib/bootstrap/package.json", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Errorf("POST into /lib: %d, want a refusal (the libraries are read-only)", resp.StatusCode)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := http.Post(site.srv.URL+"/effect/a", "application/json", strings.NewReader(fmt.Sprintf(`{"n":%d}`, i)))
			if err == nil {
				r.Body.Close()
			}
		}()
	}
	wg.Wait()
	want := []componentEffect{{Path: "/effect/b", Body: json.RawMessage(`{"x": [1, 2]}`)}}
	go func() {
		r, err := http.Post(site.srv.URL+"/effect/b", "application/json", strings.NewReader(`{"x":[1,2]}`))
		if err == nil {
			r.Body.Close()
		}
	}()
	got := site.waitFor(want, 5*time.Second)
	var as, bs []componentEffect
	for _, e := range got {
		if e.Path == "/effect/a" {
			as = append(as, e)
		} else {
			bs = append(bs, e)
		}
	}
	if len(as) != 20 || !sameEffects(bs, want) {
		t.Fatalf("recorded %s", effectsString(got))
	}
}
