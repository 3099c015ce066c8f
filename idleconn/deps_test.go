package idleconn

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps idleconn a leaf (docs/architecture.md,
// "Dependency rule"): the standard library only, so that the forwarder and
// the cluster's relay can share it.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.Contains(imp, ".") || strings.HasPrefix(imp, "oncehook") {
			t.Errorf("idleconn imports %s; it may import the standard library only", imp)
		}
	}
}
