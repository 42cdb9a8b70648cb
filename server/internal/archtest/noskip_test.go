package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A required test never skips (AGENTS.md): a test whose precondition is missing (a browser, a
// tool, root) fails and says what to install, because a skip in `make test` reads as a pass.
// Benchmarks may skip (they are not part of the suite), and so may a test that calls t.Skip
// nowhere. This scan of every _test.go file in the repository finds t.Skip, t.Skipf and
// t.SkipNow inside Test and Fuzz functions, including in their subtests and helpers' closures.
func TestNoRequiredTestSkips(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	var found []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "testdata", ".git", "target", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || fn.Recv != nil ||
				!(strings.HasPrefix(fn.Name.Name, "Test") || strings.HasPrefix(fn.Name.Name, "Fuzz")) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "Skip", "Skipf", "SkipNow":
					rel, _ := filepath.Rel(root, path)
					found = append(found, rel+":"+strconv.Itoa(fset.Position(call.Pos()).Line)+" in "+fn.Name.Name)
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Fatalf("required tests that skip (fail instead, naming what to install):\n%s", strings.Join(found, "\n"))
	}
}
