package systest

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule: system tests drive the binary from outside; of ours they
// may import providers (to sign like a sender) and the test harness
// (internal/testproc, internal/testcluster), nothing else; bench only
// providers.
func TestDependencyRule(t *testing.T) {
	for _, dir := range []string{".", "../bench"} {
		pkg, err := build.ImportDir(dir, build.ImportComment)
		if err != nil {
			t.Fatal(err)
		}
		imports := append(append([]string{}, pkg.Imports...), pkg.TestImports...)
		for _, imp := range imports {
			harness := imp == "oncehook/internal/testproc" || imp == "oncehook/internal/testcluster"
			ok := imp == "oncehook/providers" || (dir == "." && harness)
			if strings.HasPrefix(imp, "oncehook/") && !ok {
				t.Errorf("%s imports %s; of ours only oncehook/providers (and, for systest, the harness) is allowed", dir, imp)
			}
		}
	}
}
