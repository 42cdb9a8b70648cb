package bap

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEveryExportedIdentifierIsDocumented holds the SDK to a doc comment on every exported
// type, function, method, constant, variable, struct field and interface method, in the
// generated files too (their comments come from the spec's descriptions, which `make generate`
// requires). A constant or variable in a documented group counts as documented, as in godoc.
func TestEveryExportedIdentifierIsDocumented(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, miss := range undocumented(fset, f) {
			t.Errorf("%s has no doc comment", miss)
		}
	}
	if checked == 0 {
		t.Fatal("no source files found")
	}
}

// TestUndocumentedFindsEachKind makes sure the check above can fail.
func TestUndocumentedFindsEachKind(t *testing.T) {
	t.Parallel()
	src := `package p

// Doc documents D.
type D struct {
	// A is documented.
	A int
	B int // B is documented by its line comment.
	C int
	lower int
}

type T int

func F() {}

func (D) M() {}

// I documents I.
type I interface {
	N()
}

const K = 1

// Grouped documents the group.
const (
	G1 = 1
	G2 = 2
)

func private() {}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, miss := range undocumented(fset, f) {
		got = append(got, miss[strings.Index(miss, " ")+1:])
	}
	want := "field D.C, type T, func F, method D.M, method I.N, const K"
	if strings.Join(got, ", ") != want {
		t.Errorf("undocumented = %s, want %s", strings.Join(got, ", "), want)
	}
}

// undocumented lists the exported identifiers of f without a doc comment, each as
// "file:line kind name".
func undocumented(fset *token.FileSet, f *ast.File) []string {
	var out []string
	miss := func(pos token.Pos, kind, name string) {
		p := fset.Position(pos)
		out = append(out, p.Filename+":"+strconv.Itoa(p.Line)+" "+kind+" "+name)
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			kind, name := "func", d.Name.Name
			if d.Recv != nil {
				recv := receiverName(d.Recv.List[0].Type)
				if !ast.IsExported(recv) {
					continue
				}
				kind, name = "method", recv+"."+name
			}
			if d.Doc == nil {
				miss(d.Pos(), kind, name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					if d.Doc == nil && s.Doc == nil {
						miss(s.Pos(), "type", s.Name.Name)
					}
					switch ty := s.Type.(type) {
					case *ast.StructType:
						for _, fl := range ty.Fields.List {
							for _, n := range fl.Names {
								if n.IsExported() && fl.Doc == nil && fl.Comment == nil {
									miss(n.Pos(), "field", s.Name.Name+"."+n.Name)
								}
							}
						}
					case *ast.InterfaceType:
						for _, m := range ty.Methods.List {
							for _, n := range m.Names {
								if n.IsExported() && m.Doc == nil && m.Comment == nil {
									miss(n.Pos(), "method", s.Name.Name+"."+n.Name)
								}
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() && d.Doc == nil && s.Doc == nil && s.Comment == nil {
							miss(n.Pos(), d.Tok.String(), n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

func receiverName(e ast.Expr) string {
	switch r := e.(type) {
	case *ast.StarExpr:
		return receiverName(r.X)
	case *ast.IndexExpr:
		return receiverName(r.X)
	case *ast.Ident:
		return r.Name
	}
	return ""
}
