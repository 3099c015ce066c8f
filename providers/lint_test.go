package providers

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var suspiciousName = regexp.MustCompile(`(?i)sig|sum|mac|digest|token|secret|expected|want`)

// TestConstantTimeOnly fails when the package (tests aside) compares anything
// that looks like a signature, MAC, digest, token or secret with == or !=, or
// calls bytes.Equal at all. Signatures are compared with
// subtle.ConstantTimeCompare or hmac.Equal only. The check is by name: keep
// secret-ish values in variables whose names say what they are.
func TestConstantTimeOnly(t *testing.T) {
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
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		lintCompares(f, func(pos token.Pos, msg string) {
			t.Errorf("%s: %s", fset.Position(pos), msg)
		})
	}
	if checked < 10 {
		t.Fatalf("checked only %d files", checked)
	}
}

// lintCompares reports bytes.Equal, slices.Equal and reflect.DeepEqual calls, and == or !=
// where a side's names look like a signature and neither side is a presence or
// length check.
func lintCompares(f *ast.File, report func(token.Pos, string)) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok {
					switch x.Name + "." + sel.Sel.Name {
					case "bytes.Equal", "slices.Equal", "reflect.DeepEqual", "strings.EqualFold":
						report(n.Pos(), x.Name+"."+sel.Sel.Name+": use hmac.Equal or subtle.ConstantTimeCompare")
					}
				}
			}
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			if harmless(n.X) || harmless(n.Y) {
				return true
			}
			if suspiciousName.MatchString(exprText(n.X)) || suspiciousName.MatchString(exprText(n.Y)) {
				report(n.Pos(), exprText(n.X)+" "+n.Op.String()+" "+exprText(n.Y)+": compare signatures in constant time")
			}
		}
		return true
	})
}

// harmless reports whether one side of a comparison makes it a check of
// presence or length, not of content: nil, a number, "", len(...) or cap(...).
func harmless(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "nil" || e.Name == "true" || e.Name == "false"
	case *ast.BasicLit:
		return e.Kind == token.INT || e.Value == `""`
	case *ast.CallExpr:
		if id, ok := e.Fun.(*ast.Ident); ok && (id.Name == "len" || id.Name == "cap") {
			return true
		}
	case *ast.UnaryExpr:
		return harmless(e.X)
	}
	return false
}

func exprText(e ast.Expr) string {
	var b strings.Builder
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			b.WriteString(n.Name)
			b.WriteByte(' ')
		case *ast.BasicLit:
			b.WriteString(n.Value)
			b.WriteByte(' ')
		}
		return true
	})
	return strings.TrimSpace(b.String())
}

// The checker catches what it is meant to, and lets presence checks pass.
func TestConstantTimeCheckerCatches(t *testing.T) {
	src := `package x
func f(sig, sum []byte, token string, a, b []byte) bool {
	_ = bytes.Equal(a, b)
	_ = slices.Equal(sig, sum)
	_ = string(sig) == string(sum)
	_ = token != "x"
	return len(sig) == 0 && sum != nil && a == nil && token == ""
}`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	lintCompares(f, func(_ token.Pos, msg string) { found = append(found, msg) })
	if len(found) != 4 {
		t.Errorf("checker found %d problems, want 4: %q", len(found), found)
	}
}

// TestDependencyRule keeps providers free of our other packages, fasthttp and
// net/http (docs/architecture.md, "Dependency rule").
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		switch {
		case imp == "oncehook" || strings.HasPrefix(imp, "oncehook/"),
			strings.HasPrefix(imp, "github.com/valyala/fasthttp"),
			imp == "net/http" || strings.HasPrefix(imp, "net/http/"),
			strings.HasPrefix(imp, "github.com/hashicorp/"),
			strings.HasPrefix(imp, "go.etcd.io/"):
			t.Errorf("providers imports %s", imp)
		}
	}
}
