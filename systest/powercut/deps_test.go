package powercut

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// TestDependencyRule: the power-cut tests drive the binary from outside. Of
// ours they import the harness (testproc, testcluster, powercut), providers
// (to sign like a sender), failpoint (a control variable's name) and engine
// only to open a node's backup and hash it, as systest/chaos does.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	ok := []string{"oncehook/internal/testproc", "oncehook/internal/testcluster", "oncehook/internal/powercut",
		"oncehook/providers", "oncehook/failpoint", "oncehook/engine"}
	for _, imp := range append(append([]string{}, pkg.Imports...), pkg.TestImports...) {
		if strings.HasPrefix(imp, "oncehook") && !slices.Contains(ok, imp) {
			t.Errorf("systest/powercut imports %s", imp)
		}
	}
}
