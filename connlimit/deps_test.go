package connlimit

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps connlimit a leaf (docs/architecture.md,
// "Dependency rule"): the standard library only, so that the cluster port
// and both HTTP servers can share it.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.Contains(imp, ".") || strings.HasPrefix(imp, "oncehook") {
			t.Errorf("connlimit imports %s; it may import the standard library only", imp)
		}
	}
}
