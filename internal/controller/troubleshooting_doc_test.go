package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Every condition reason the controllers set (each Reason* constant of this package) is explained in
// docs/troubleshooting.md, so a reason added without its entry fails here.
func TestTroubleshootingListsEveryReason(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range pkgs["controller"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range spec.Names {
				if !strings.HasPrefix(name.Name, "Reason") || i >= len(spec.Values) {
					continue
				}
				lit, ok := spec.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				value, _ := strconv.Unquote(lit.Value)
				found++
				if !strings.Contains(string(doc), "`"+value+"`") {
					t.Errorf("%s (%q) is not in docs/troubleshooting.md", name.Name, value)
				}
			}
			return true
		})
	}
	if found < 30 {
		t.Fatalf("found only %d reasons: is the parse right?", found)
	}
}
