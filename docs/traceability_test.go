// Package docs holds no code: its tests keep docs/traceability.md and docs/threat-model.md honest.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestTraceabilityNamesOnlyWhatExists fails when docs/traceability.md names a Go test, fuzz
// target or benchmark that no _test.go file of the repository declares, one that a package in
// parentheses after it ("`TestX`, `TestY` (store)") does not declare, a Python test that no
// sdk-py test defines, a repository path that does not exist, or a document it links to that is
// missing.
func TestTraceabilityNamesOnlyWhatExists(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("traceability.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	goTests, pyTests := declaredTests(t, "..")
	inPackage := 0
	for _, m := range misplacedTests(doc, goTests, func(dir string) bool {
		fi, err := os.Stat(filepath.Join("..", dir))
		return err == nil && fi.IsDir()
	}) {
		if m.dir == "" {
			inPackage++
			continue
		}
		t.Errorf("traceability.md names %s in (%s), which %s does not declare", m.test, m.pkg, m.dir)
	}
	spans := regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(doc, -1)
	var named, paths int
	for _, m := range spans {
		s := m[1]
		switch {
		case regexp.MustCompile(`^(Test|Fuzz|Benchmark)[A-Z0-9_]\w*$`).MatchString(s):
			named++
			if len(goTests[s]) == 0 {
				t.Errorf("traceability.md names %s, which no _test.go declares", s)
			}
		case regexp.MustCompile(`^test_\w+$`).MatchString(s):
			named++
			if !pyTests[s] {
				t.Errorf("traceability.md names %s, which no sdk-py test defines", s)
			}
		case isRepoPath(s):
			paths++
			if _, err := os.Stat(filepath.Join("..", strings.Fields(s)[0])); err != nil {
				t.Errorf("traceability.md names %s, which does not exist", s)
			}
		}
	}
	for _, m := range regexp.MustCompile(`\]\(([^)#]+\.md)\)`).FindAllStringSubmatch(doc, -1) {
		if _, err := os.Stat(m[1]); err != nil {
			t.Errorf("traceability.md links to %s, which does not exist", m[1])
		}
	}
	if named < 100 || paths < 30 || inPackage < 100 {
		t.Errorf("only %d tests, %d paths and %d tests with their package found: is the table still parsed?", named, paths, inPackage)
	}
}

// TestThreatModelNamesOnlyTestsThatExist fails when docs/threat-model.md names, as the test that
// proves a control, a Go test or fuzz target that no _test.go file of the repository declares: a
// renamed or removed test must not leave a control looking proven.
func TestThreatModelNamesOnlyTestsThatExist(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("threat-model.md")
	if err != nil {
		t.Fatal(err)
	}
	goTests, _ := declaredTests(t, "..")
	named := 0
	// Matched directly, not as pairs of backticks: a literal backtick in a span would shift the pairs.
	for _, m := range regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Z0-9_]\\w*)`").FindAllStringSubmatch(string(raw), -1) {
		named++
		if len(goTests[m[1]]) == 0 {
			t.Errorf("threat-model.md names %s, which no _test.go declares", m[1])
		}
	}
	if named < 50 {
		t.Errorf("only %d tests found: is the document still parsed?", named)
	}
}

// isRepoPath reports whether a code span is meant as a path of this repository: it starts
// with one of the top-level directories or names a top-level file.
func isRepoPath(s string) bool {
	if strings.ContainsAny(s, " *{}") {
		return false
	}
	for _, top := range []string{"server/", "sdk-go/", "sdk-ts/", "sdk-py/", "sdk-rs/", "spec/", "migrations/",
		"codegen/", "conformance/", "scripts/", "docs/", "tools/"} {
		if strings.HasPrefix(s, top) {
			return true
		}
	}
	switch s {
	case "README.md", "AGENTS.md", "CLAUDE.md", "CHANGELOG.md", "Makefile":
		return true
	}
	return false
}

// placement is a Go test the matrix names with a package in parentheses: dir is the package's
// directory when it does not declare the test, "" when it does.
type placement struct{ test, pkg, dir string }

var (
	goTestName = regexp.MustCompile("^`((?:Test|Fuzz|Benchmark)[A-Z0-9_]\\w*)`")
	// packageParen is a parenthesis that opens with a package path: "(store)", "(cmd/bap: …)",
	// "(e2e, …)", "(sdk-go; …)".
	packageParen = regexp.MustCompile(`^\(([a-z][a-z0-9_-]*(?:/[a-z0-9_-]+)*)[),:;]`)
)

// misplacedTests reads every table cell of doc: the Go tests named since the last package in
// parentheses belong to the next one, whose directory (server/internal/P, server/P, codegen/P or P, the
// first that isDir) must declare them. A parenthesis that names no directory is prose and is
// passed over; a cell's end forgets the tests no package followed.
func misplacedTests(doc string, declared map[string]map[string]bool, isDir func(string) bool) []placement {
	var out []placement
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, cell := range strings.Split(line, "|") {
			var pending []string
			for i := 0; i < len(cell); i++ {
				rest := cell[i:]
				if m := goTestName.FindStringSubmatch(rest); m != nil {
					pending = append(pending, m[1])
					i += len(m[0]) - 1
					continue
				}
				m := packageParen.FindStringSubmatch(rest)
				if m == nil {
					continue
				}
				dir := ""
				for _, d := range []string{"server/internal/" + m[1], "server/" + m[1], "codegen/" + m[1], m[1]} {
					if isDir(d) {
						dir = d
						break
					}
				}
				if dir == "" {
					continue
				}
				for _, name := range pending {
					p := placement{test: name, pkg: m[1]}
					if !declared[name][dir] {
						p.dir = dir
					}
					out = append(out, p)
				}
				pending = nil
			}
		}
	}
	return out
}

// declaredTests collects the Go test, fuzz and benchmark functions, each with the directories
// (relative to root, slash-separated) that declare it, and the Python test methods declared under
// root.
func declaredTests(t *testing.T, root string) (goTests map[string]map[string]bool, pyTests map[string]bool) {
	t.Helper()
	goTests, pyTests = map[string]map[string]bool{}, map[string]bool{}
	goDecl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)\w*)\(`)
	pyDecl := regexp.MustCompile(`(?m)^\s*def (test_\w+)\(`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "target", ".git", "dist":
				return filepath.SkipDir
			}
			return nil
		}
		isGo := strings.HasSuffix(path, "_test.go")
		if !isGo && (!strings.Contains(filepath.ToSlash(path), "sdk-py/tests/") || !strings.HasSuffix(path, ".py")) {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !isGo {
			for _, m := range pyDecl.FindAllStringSubmatch(string(raw), -1) {
				pyTests[m[1]] = true
			}
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, m := range goDecl.FindAllStringSubmatch(string(raw), -1) {
			if goTests[m[1]] == nil {
				goTests[m[1]] = map[string]bool{}
			}
			goTests[m[1]][filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return goTests, pyTests
}

// The package check reads the matrix's conventions: tests before a package in parentheses are
// that package's, prose in parentheses is passed over, a cell's end forgets what no package
// followed; and it fails a test named with a package that does not declare it.
func TestMisplacedTestsAreFound(t *testing.T) {
	t.Parallel()
	declared := map[string]map[string]bool{
		"TestA": {"server/internal/app": true}, "TestB": {"server/internal/app": true},
		"TestC": {"server/cmd/bap": true}, "TestD": {"codegen/cddl": true}, "TestE": {"server/internal/e2e": true},
	}
	dirs := map[string]bool{"server/internal/app": true, "server/internal/e2e": true, "server/cmd/bap": true, "codegen/cddl": true}
	doc := "| row | `TestA` (every one, `x`), `TestB` (app), `TestC` (cmd/bap: why), `TestD` (cddl) | `TestE` (e2e; more) `TestA` |\n" +
		"| wrong | `TestA` (e2e), `TestC` (app) |\nnot a table: `TestE` (app)\n"
	var got []string
	for _, p := range misplacedTests(doc, declared, func(d string) bool { return dirs[d] }) {
		got = append(got, p.test+"@"+p.pkg+">"+p.dir)
	}
	want := []string{"TestA@app>", "TestB@app>", "TestC@cmd/bap>", "TestD@cddl>", "TestE@e2e>",
		"TestA@e2e>server/internal/e2e", "TestC@app>server/internal/app"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("misplacedTests:\n got %q\nwant %q", got, want)
	}
}
