package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path of this repository's one Go module.
const module = "github.com/originweave/bap"

// nonStd, in a rule's forbid list, stands for every package outside the standard library.
const nonStd = "<any package outside the standard library>"

func mod(rel string) string { return module + "/" + rel }

func internal(names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = mod("server/internal/" + n)
	}
	return out
}

func concat(lists ...[]string) []string { return slices.Concat(lists...) }

// The layers of docs/architecture.md. Names that do not exist yet (planned by DESIGN.md) are listed
// so that the packages are held to their layer's rules from their first commit.
var (
	core       = internal("task", "policy", "ids", "idempotency", "page", "admission", "serverkey", "problem", "historychain", "evidencebundle")
	useCases   = internal("app")
	drivers    = internal("worker")
	adapters   = internal("store", "events", "browser", "egress", "warcrecord", "tlsmint", "auth", "artifact", "orchestrator", "tracing")
	transports = internal("api", "mcp", "mcpserver", "stream")                         // only api exists today
	generated  = internal("apigen", "mcpcatalog", "streamgen")                         // only apigen exists today
	leaves     = concat(internal("version"), []string{mod("migrations"), mod("spec")}) // constants and embedded files
	roots      = []string{mod("server/internal/daemon"), mod("server/cmd/bap")}
	tools      = []string{mod("server/cmd/bapbench"), mod("server/cmd/bapstreambench")}
	selfPkg    = internal("archtest")
	pgx        = "github.com/jackc/pgx"
	chromedp   = []string{"github.com/chromedp"}
)

// rule constrains what the packages it names may import.
type rule struct {
	name     string
	packages []string // import paths; "p/..." matches p and every package below it
	// forbid lists import path prefixes (matched on whole path elements), or nonStd. nonStd is
	// checked against direct imports only (what a permitted library needs is its own business);
	// every other entry is checked against direct and transitive imports.
	forbid []string
	except []string // prefixes exempt from forbid
	tests  bool     // also check the direct imports of the packages' _test.go files
	why    string
}

// reverseRule says which packages alone may import a set of packages (direct imports of non-test
// code; test files are free).
type reverseRule struct {
	name     string
	imported []string // prefixes of the guarded packages
	by       []string // the only importers; empty: test code only
	why      string
}

var rules = []rule{
	{
		name: "core", packages: core, forbid: []string{nonStd, "net/http"}, except: internal("historychain"), tests: true,
		why: "task, policy, ids and idempotency are pure rules, serverkey the server key's derivations (ADR 0015), historychain the keyed hash chain over history (ADR 0033), evidencebundle the bundles that carry it (ADR 0036, on historychain, the one core package another may import), and problem the one table of problem codes generated from the spec: standard library only (and no net/http), so every layer can use them and they are tested with tables",
	},
	{
		name: "use-cases", packages: useCases, forbid: []string{nonStd, "net/http"}, except: core,
		why: "app declares the ports it needs and imports only the core: no pgx, no net/http, no wire types — and not the workers that drive it (package worker)",
	},
	{
		name: "worker", packages: drivers, forbid: concat([]string{module, pgx, "net/http"}, chromedp),
		except: concat(useCases, core),
		why:    "the workers (plan runs, the goal-driven loop, its roles and masking, the pool) drive the use-cases only through app's exported API, as a transport does: app and the core; never the store, the browser, a transport, the daemon or pgx",
	},
	{
		name: "engine-neutral use-cases", packages: useCases, forbid: concat(internal("browser", "daemon"), chromedp), tests: true,
		why: "the use-cases reach a browser only through their port (app.Browser): no engine adapter, no chromedp or cdproto type, directly or through anything they import, in their tests too; the composition root picks the engine from its registry (daemon/engines.go, ADR 0025)",
	},
	{
		name: "store", packages: internal("store"), forbid: []string{nonStd, "net/http"},
		except: concat(useCases, core, []string{mod("migrations"), pgx}),
		why:    "store is the PostgreSQL adapter: app, the core, the embedded migrations and pgx, nothing else",
	},
	{
		name: "adapters", packages: adapters, forbid: concat(transports, generated, roots, drivers),
		why: "adapters implement the app's ports; they never call a transport or see generated wire types",
	},
	{
		name: "transports", packages: transports, forbid: concat([]string{module, pgx}, chromedp),
		except: concat(useCases, core, generated, internal("version")),
		why:    "transports translate wire requests to use-cases: app, the core, generated types and version; never the store or pgx",
	},
	{
		name: "console", packages: internal("console"), forbid: concat([]string{module, pgx}, chromedp),
		except: concat(useCases, core, generated, internal("api", "version")),
		why:    "the operator console (ADR 0020) is a transport beside the HTTP API: its embedded app, its sign-in in front of api's authenticators, and the operator's task list through app; never the store, the browser or pgx",
	},
	{
		name: "generated", packages: generated, forbid: []string{mod("server")},
		why: "generated code is derived from spec/ and depends on no hand-written server package",
	},
	{
		name: "sdk-go", packages: []string{mod("sdk-go/...")}, forbid: []string{mod("server")}, tests: true,
		why: "the Go SDK is a client: it speaks BAP over HTTP and never imports the server",
	},
	{
		name: "pgcluster", packages: internal("pgcluster"), forbid: []string{module}, except: internal("osuser"),
		why: "pgcluster runs PostgreSQL with pgx, osuser and the standard library; it knows nothing of BAP",
	},
	{
		name: "pgtest", packages: internal("pgtest"), forbid: []string{module}, except: internal("pgcluster", "osuser"),
		why: "the test harness builds on pgcluster and pgx only",
	},
	{
		name: "leaves", packages: leaves, forbid: []string{nonStd},
		why: "version, migrations and spec hold constants and embedded files; anyone may import them",
	},
	{
		name: "tools", packages: tools, forbid: []string{mod("server")}, tests: true,
		why: "bapbench measures the server from outside, over HTTP, like any client",
	},
	{
		name: "browser", packages: internal("browser"), forbid: concat(useCases, internal("store", "events", "auth")),
		why: "the CDP adapter speaks page's vocabulary and knows nothing of the use-cases: the composition root adapts it to app.Browser (daemon/browserport.go), so the use-cases never learn which engine runs and the adapter's types never cross the port",
	},
	{
		name: "pagekit", packages: internal("pagekit"), forbid: concat(internal("task", "policy", "ids", "idempotency", "admission", "serverkey", "problem", "bidi", "firefox"), useCases, adapters, transports, generated, roots, chromedp, []string{pgx}), tests: true,
		why: "pagekit is what both browser adapters share and no engine defines (the page agent, its records turned into nodes, handle minting, URL redaction): it imports page and the standard library only, so neither adapter leans on the other (issue 19)",
	},
	{
		name: "observation", packages: internal("observation"), forbid: []string{nonStd}, except: internal("page", "pagekit"), tests: true,
		why: "observation is the engine-neutral half of observe (ADR 0028): budgets, cursors and deltas over the snapshots any adapter takes, in page's vocabulary (with pagekit's observation ids) and the standard library only, so that every engine behind the composition root answers max_bytes, cursor and since alike",
	},
	{
		name: "schemaextract", packages: internal("schemaextract"), forbid: []string{nonStd}, except: concat(internal("page", "pagekit"), []string{"github.com/santhosh-tekuri/jsonschema"}), tests: true,
		why: "schemaextract is the engine-neutral half of extract kind schema (compile, convert, validate) over the matches an adapter finds, so that both engines answer it alike: page's vocabulary, pagekit and a JSON Schema validator only",
	},
	{
		name: "bidi", packages: internal("bidi"), forbid: concat([]string{module, pgx}, chromedp), tests: true,
		why: "bidi is a WebDriver BiDi protocol client (a transport plus types generated from the spec's CDDL, ADR 0022): it speaks the protocol and nothing of BAP, so it imports no package of this module",
	},
	{
		name: "firefox", packages: internal("firefox"), forbid: concat(useCases, internal("store", "events", "auth", "browser"), transports, generated, roots, chromedp),
		why: "firefox starts Firefox ESR and drives it over bidi for the second browser adapter (issue 19); like the CDP adapter it knows nothing of the use-cases, the store or the transports, and it does not lean on the CDP adapter",
	},
	{
		name: "warcrecord", packages: internal("warcrecord"), forbid: []string{module, pgx},
		why: "warcrecord writes the WARC archive of policy.record (ADR 0034) with the standard library and gowarc: it implements egress.Recorder without importing egress, so the proxy stays a boundary that knows nothing of archives, and the composition root joins the two",
	},
	{
		name: "tlsmint", packages: internal("tlsmint"), forbid: []string{module, pgx},
		why: "tlsmint is the in-memory authority whose certificates an egress proxy presents in the tunnels it opens (ADR 0037): the standard library's crypto only, so what holds the key is small enough to read whole",
	},
	{
		name: "auth", packages: internal("auth"), forbid: concat(internal("store", "browser", "events"), chromedp),
		why: "auth owns its OAuth tables (with pgx) and speaks to app only through app's types; it never reaches task state through the store, nor the browser",
	},
	{
		name: "orchestrator", packages: internal("orchestrator"), forbid: concat([]string{module, pgx}, chromedp),
		except: concat(useCases, core, internal("redact", "version")),
		why:    "the orchestrator adapter implements app.Orchestrator over HTTP: app, the core, redact, version and a JSON Schema validator; never the store, the browser, a transport or pgx",
	},
	{
		name: "tracing", packages: internal("tracing"), forbid: concat([]string{module, pgx}, chromedp),
		except: concat(useCases, core),
		why:    "tracing implements app.Tracer with the OpenTelemetry SDK and its OTLP exporter: app, the core and OpenTelemetry; never the store, the browser, a transport or pgx — the components record through the app's port, so none of them (and not the CDP layer's hot path) depends on OpenTelemetry",
	},
	{
		name: "orchestratortest", packages: []string{mod("server/internal/orchestrator/orchestratortest/...")},
		forbid: []string{nonStd}, except: internal("orchestrator/orchestratortest"),
		why: "the fake model orchestrator (and its standalone cmd/fakeorch) is a standard-library test double that knows nothing of BAP",
	},
	{
		name: "helpers", packages: internal("ratelimit", "redact", "osuser", "tmptree"), forbid: []string{nonStd},
		why: "ratelimit (token buckets), redact (the log redaction layer), osuser (the unprivileged account of child processes) and tmptree (temporary trees removed once their process is dead) are standard-library helpers every layer may use",
	},
	{
		name: "spectest", packages: internal("spectest"), forbid: []string{module},
		why: "the tests' response check reads the OpenAPI bundle it is handed and a JSON Schema validator; it knows no server package, so any suite can use it",
	},
	{
		name: "waitfor", packages: internal("waitfor"), forbid: []string{nonStd},
		why: "the tests' wait-for-a-condition helper is standard library only, so any suite can use it",
	},
	{
		name: "proctree", packages: internal("proctree"), forbid: []string{nonStd},
		why: "the benchmarks' process-tree measurements (/proc) are standard library only, so any suite can use them",
	},
	{
		name: "end-to-end tests", packages: internal("e2e"), forbid: []string{nonStd},
		why: "e2e holds tests only (its test files wire the whole stack); its non-test code is a doc comment",
	},
	{
		name: "archtest", packages: selfPkg, forbid: []string{nonStd},
		why: "the architecture test uses the standard library and the go command only",
	},
}

var reverseRules = []reverseRule{
	{
		name: "generated code", imported: generated, by: transports,
		why: "generated wire types stay at the edge: only transports import them",
	},
	{
		name: "the test harness", imported: internal("pgtest"),
		why: "pgtest starts databases for tests; only _test.go files import it",
	},
	{
		name: "the fake orchestrator", imported: internal("orchestrator/orchestratortest"),
		why: "orchestratortest is a test double: only _test.go files (and its own cmd/fakeorch) import it",
	},
	{
		name: "the orchestrator adapter", imported: internal("orchestrator"), by: roots,
		why: "app reaches models through its Orchestrator port; only the composition root builds the adapter",
	},
	{
		name: "the workers", imported: drivers, by: roots,
		why: "the workers are a driver of the use-cases, like a transport: only the composition root builds them (and tests run them)",
	},
	{
		name: "the tracing adapter", imported: internal("tracing"), by: roots,
		why: "app, the store, the transports and the orchestrator record spans through app.Tracer; only the composition root builds the OpenTelemetry tracer",
	},
	{
		name: "OpenTelemetry", imported: []string{"go.opentelemetry.io"}, by: internal("tracing"),
		why: "one package speaks OpenTelemetry: off, no component pays for it; on, every attribute passes its list",
	},
	{
		name: "the response check", imported: internal("spectest"),
		why: "spectest validates answers in tests; only _test.go files import it",
	},
	{
		name: "the wait helper", imported: internal("waitfor"),
		why: "waitfor waits in tests; only _test.go files import it",
	},
	{
		name: "the process-tree measurements", imported: internal("proctree"),
		why: "proctree measures browsers in tests and benchmarks; only _test.go files import it",
	},
	{
		name: "the end-to-end tests", imported: internal("e2e"),
		why: "e2e holds tests only",
	},
	{
		name: "the architecture test", imported: selfPkg,
		why: "archtest holds a test only",
	},
	{
		name: "pgx", imported: []string{pgx}, by: concat(internal("store", "auth", "pgcluster", "pgtest"), roots),
		why: "PostgreSQL is reached through the store (auth keeps its own OAuth tables); pgcluster and pgtest manage servers; the composition root opens the pool",
	},
	{
		name: "chromedp", imported: chromedp, by: internal("browser"),
		why: "browser is the only package that speaks CDP; only opaque ids leave it",
	},
	{
		name: "bidi", imported: internal("bidi"), by: internal("firefox"),
		why: "only the Firefox adapter speaks WebDriver BiDi; raw BiDi ids stay inside it",
	},
	{
		name: "the WARC recorder", imported: internal("warcrecord"), by: roots,
		why: "only the composition root builds a session's recorder (app asks for it through its Recording port) and hands it to the engine, whose proxy sees it as an egress.Recorder",
	},
	{
		name: "gowarc", imported: []string{"github.com/nlnwa/gowarc"}, by: internal("warcrecord"),
		why: "one package writes WARC; replay and bundles read archives through it",
	},
	{
		name: "the proxies' certificate authority", imported: internal("tlsmint"), by: internal("browser", "firefox"),
		why: "only a browser adapter makes the authority its browser trusts (by key, at launch) and hands it to that browser's proxies; the key never leaves the process",
	},
	{
		name: "egress", imported: internal("egress"), by: internal("browser", "firefox"),
		why: "the egress proxy is the browser's boundary: only the browser adapters start one, one per browser context (CDP) or user context (BiDi)",
	},
}

// listed is the part of `go list -json` output the rules need.
type listed struct {
	ImportPath   string
	Standard     bool
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// graph is the import graph of the module and everything it depends on.
type graph map[string]*listed

// load runs `go list -deps` over the whole module. It tolerates packages that fail to load (another
// test reports those) but not a go command that cannot run.
func load(t *testing.T) graph {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-e", "-deps",
		"-json=ImportPath,Standard,Imports,Deps,TestImports,XTestImports,Error", module+"/...")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list failed: %v\n%s", err, stderr.String())
	}
	g := graph{}
	dec := json.NewDecoder(&stdout)
	for {
		var p listed
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		if p.Error != nil && ours(p.ImportPath) {
			t.Logf("note: %s does not load (%s); its imports are checked as far as go list lists them", short(p.ImportPath), p.Error.Err)
		}
		g[p.ImportPath] = &p
	}
	return g
}

func ours(path string) bool { return strings.HasPrefix(path, module+"/") }

// short trims the module path from our packages in messages.
func short(path string) string {
	if ours(path) {
		return strings.TrimPrefix(path, module+"/")
	}
	return path
}

// under reports whether path is prefix or lies below it, on whole path elements.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// matches reports whether path is named by pattern ("p/..." matches p and below; otherwise exact).
func matches(path, pattern string) bool {
	if p, ok := strings.CutSuffix(pattern, "/..."); ok {
		return under(path, p)
	}
	return path == pattern
}

func matchesAny(path string, patterns []string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return matches(path, p) })
}

func underAny(path string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return p != nonStd && under(path, p) })
}

func (g graph) standard(path string) bool {
	if p, ok := g[path]; ok {
		return p.Standard
	}
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".") // not loaded (an import error): guess as the go command does
}

// forbids reports whether r forbids path; direct tells whether path is a direct import.
func (r rule) forbids(g graph, path string, direct bool) bool {
	if underAny(path, r.except) {
		return false
	}
	if direct && slices.Contains(r.forbid, nonStd) && !g.standard(path) {
		return true
	}
	return underAny(path, r.forbid)
}

// chain returns the shortest import chain from one package to another (both included), or nil.
func (g graph) chain(from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var path []string
			for p := to; p != ""; p = prev[p] {
				path = append(path, p)
			}
			slices.Reverse(path)
			return path
		}
		if p, ok := g[cur]; ok {
			for _, next := range p.Imports {
				if _, seen := prev[next]; !seen {
					prev[next] = cur
					queue = append(queue, next)
				}
			}
		}
	}
	return nil
}

func formatChain(c []string) string {
	if len(c) == 0 {
		return "through packages go list did not load"
	}
	s := make([]string, len(c))
	for i, p := range c {
		s[i] = short(p)
	}
	return strings.Join(s, " → ")
}

// check returns one message per violation of rules and reverse in g, sorted.
func check(g graph, rules []rule, reverse []reverseRule) []string {
	var out []string
	for path, p := range g {
		if !ours(path) {
			continue
		}
		classified := matchesAny(path, roots)
		for _, r := range rules {
			if !matchesAny(path, r.packages) {
				continue
			}
			classified = true
			for _, imp := range p.Imports {
				if r.forbids(g, imp, true) {
					out = append(out, fmt.Sprintf("%s imports %s, which rule %q forbids: %s",
						short(path), short(imp), r.name, r.why))
				}
			}
			for _, dep := range p.Deps {
				if slices.Contains(p.Imports, dep) || !r.forbids(g, dep, false) {
					continue
				}
				// Report where a forbidden package enters, not every package behind it: skip dep
				// when the package that pulls it in is itself forbidden (and so reported).
				c := g.chain(path, dep)
				if len(c) >= 3 && r.forbids(g, c[len(c)-2], len(c) == 3) {
					continue
				}
				out = append(out, fmt.Sprintf("%s depends on %s (%s), which rule %q forbids: %s",
					short(path), short(dep), formatChain(c), r.name, r.why))
			}
			if !r.tests {
				continue
			}
			for _, imp := range concat(p.TestImports, p.XTestImports) {
				if imp != path && r.forbids(g, imp, true) {
					out = append(out, fmt.Sprintf("%s: a _test.go file imports %s, which rule %q forbids in tests too: %s",
						short(path), short(imp), r.name, r.why))
				}
			}
		}
		if !classified && under(path, mod("server")) {
			out = append(out, fmt.Sprintf("%s belongs to no layer: give it a rule in server/internal/archtest/arch_test.go "+
				"and a row in the package map of docs/architecture.md", short(path)))
		}
		for _, rr := range reverse {
			if matchesAny(path, rr.by) {
				continue
			}
			for _, imp := range p.Imports {
				if underAny(imp, rr.imported) && !underAny(path, rr.imported) {
					who := "only test code"
					if len(rr.by) > 0 {
						names := make([]string, len(rr.by))
						for i, b := range rr.by {
							names[i] = short(b)
						}
						who = "only " + strings.Join(names, ", ")
					}
					out = append(out, fmt.Sprintf("%s imports %s, but %s may import %s: %s",
						short(path), short(imp), who, rr.name, rr.why))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestLayers checks the module's import graph against the rules of docs/architecture.md.
func TestLayers(t *testing.T) {
	t.Parallel()
	g := load(t)
	// Guard against a vacuous pass: the packages the rules are about must have been loaded.
	for _, p := range concat(core, useCases, internal("store", "api", "apigen"), roots) {
		if _, ok := g[p]; !ok {
			t.Fatalf("go list did not list %s; the rules cannot be checked", short(p))
		}
	}
	for _, msg := range check(g, rules, reverseRules) {
		t.Error(msg)
	}
}

// TestCheckReportsViolations runs the checker on a made-up graph, so that a checker bug cannot make
// TestLayers pass vacuously.
func TestCheckReportsViolations(t *testing.T) {
	t.Parallel()
	pkg := func(path string, std bool, imports ...string) *listed {
		return &listed{ImportPath: path, Standard: std, Imports: imports}
	}
	pgxPkg := pgx + "/v5"
	g := graph{
		"fmt":                              pkg("fmt", true),
		"net/http":                         pkg("net/http", true),
		pgxPkg:                             pkg(pgxPkg, false, "fmt"),
		mod("server/internal/task"):        pkg(mod("server/internal/task"), false, "fmt", pgxPkg),
		mod("server/internal/app"):         pkg(mod("server/internal/app"), false, mod("server/internal/task"), "net/http", pgxPkg),
		mod("server/internal/store"):       pkg(mod("server/internal/store"), false, mod("server/internal/app"), pgxPkg),
		mod("server/internal/api"):         pkg(mod("server/internal/api"), false, mod("server/internal/app")),
		mod("server/internal/mcp"):         pkg(mod("server/internal/mcp"), false, mod("server/internal/store")),
		mod("server/internal/apigen"):      pkg(mod("server/internal/apigen"), false, "fmt"),
		mod("server/internal/daemon"):      pkg(mod("server/internal/daemon"), false, mod("server/internal/apigen")),
		mod("server/internal/newthing"):    pkg(mod("server/internal/newthing"), false, "fmt"),
		mod("sdk-go"):                      pkg(mod("sdk-go"), false, mod("server/internal/task")),
		mod("server/internal/pgtest"):      pkg(mod("server/internal/pgtest"), false, pgxPkg),
		mod("server/internal/policy"):      pkg(mod("server/internal/policy"), false, mod("server/internal/pgtest")),
		mod("server/internal/ids"):         pkg(mod("server/internal/ids"), false),
		mod("server/internal/idempotency"): pkg(mod("server/internal/idempotency"), false),
		mod("server/internal/version"):     pkg(mod("server/internal/version"), false),
		mod("server/internal/archtest"):    pkg(mod("server/internal/archtest"), false),
		mod("server/internal/pgcluster"):   pkg(mod("server/internal/pgcluster"), false, pgxPkg),
		mod("server/internal/worker"):      pkg(mod("server/internal/worker"), false, mod("server/internal/task"), mod("server/internal/store")),
		mod("server/internal/mcpserver"):   pkg(mod("server/internal/mcpserver"), false, mod("server/internal/worker")),
	}
	g[mod("server/internal/ids")].XTestImports = []string{mod("server/internal/ids"), mod("server/internal/store")}
	// Deps: the transitive closure, as go list -deps reports it.
	for path := range g {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(p string) {
			for _, imp := range g[p].Imports {
				if !seen[imp] {
					seen[imp] = true
					walk(imp)
				}
			}
		}
		walk(path)
		for d := range seen {
			g[path].Deps = append(g[path].Deps, d)
		}
		slices.Sort(g[path].Deps)
	}

	got := strings.Join(check(g, rules, reverseRules), "\n")
	for _, want := range []string{
		`server/internal/task imports github.com/jackc/pgx/v5, which rule "core" forbids`,
		`server/internal/app imports net/http, which rule "use-cases" forbids`,
		`server/internal/app imports github.com/jackc/pgx/v5, which rule "use-cases" forbids`,
		`server/internal/api depends on github.com/jackc/pgx/v5 (server/internal/api → server/internal/app → github.com/jackc/pgx/v5), which rule "transports" forbids`,
		`server/internal/mcp imports server/internal/store, which rule "transports" forbids`,
		`sdk-go imports server/internal/task, which rule "sdk-go" forbids`,
		`server/internal/newthing belongs to no layer`,
		`server/internal/daemon imports server/internal/apigen, but only server/internal/api, server/internal/mcp, server/internal/mcpserver, server/internal/stream may import generated code`,
		`server/internal/policy imports server/internal/pgtest, but only test code may import the test harness`,
		`server/internal/ids: a _test.go file imports server/internal/store, which rule "core" forbids in tests too`,
		`server/internal/worker imports server/internal/store, which rule "worker" forbids`,
		`server/internal/mcpserver imports server/internal/worker, but only server/internal/daemon, server/cmd/bap may import the workers`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("check did not report\n\t%s\ngot:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{
		"server/internal/ids: a _test.go file imports server/internal/ids", // a package's own xtest import
		"server/internal/store imports",                                    // store may import app and pgx
		"server/internal/pgcluster imports",                                // pgcluster may import pgx
	} {
		if strings.Contains(got, unwanted) {
			t.Errorf("check reported an allowed import (%q):\n%s", unwanted, got)
		}
	}
}
