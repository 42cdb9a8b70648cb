// Package docs holds no code: its test keeps docs/traceability.md honest.
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
// target or benchmark that no _test.go file of the repository declares, a Python test that no
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
	spans := regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(doc, -1)
	var named, paths int
	for _, m := range spans {
		s := m[1]
		switch {
		case regexp.MustCompile(`^(Test|Fuzz|Benchmark)[A-Z0-9_]\w*$`).MatchString(s):
			named++
			if !goTests[s] {
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
	if named < 100 || paths < 30 {
		t.Errorf("only %d tests and %d paths found: is the table still parsed?", named, paths)
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
	case "README.md", "AGENTS.md", "CHANGELOG.md", "Makefile":
		return true
	}
	return false
}

// declaredTests collects the Go test, fuzz and benchmark functions and the Python test methods
// declared under root.
func declaredTests(t *testing.T, root string) (goTests, pyTests map[string]bool) {
	t.Helper()
	goTests, pyTests = map[string]bool{}, map[string]bool{}
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
		var decl *regexp.Regexp
		var into map[string]bool
		switch {
		case strings.HasSuffix(path, "_test.go"):
			decl, into = goDecl, goTests
		case strings.Contains(filepath.ToSlash(path), "sdk-py/tests/") && strings.HasSuffix(path, ".py"):
			decl, into = pyDecl, pyTests
		default:
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(raw), -1) {
			into[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return goTests, pyTests
}
