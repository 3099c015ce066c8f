package systest

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// TestDependencyRule: system tests drive the binary from outside; of ours they
// may import providers (to sign like a sender) and the test harness
// (internal/testproc, internal/testcluster), nothing else; bench providers and
// testcluster (its error-returning layer spawns the nodes), nothing else.
func TestDependencyRule(t *testing.T) {
	for dir, allowed := range map[string][]string{
		".":        {"oncehook/providers", "oncehook/internal/testproc", "oncehook/internal/testcluster"},
		"../bench": {"oncehook/providers", "oncehook/internal/testcluster"},
	} {
		pkg, err := build.ImportDir(dir, build.ImportComment)
		if err != nil {
			t.Fatal(err)
		}
		imports := append(append([]string{}, pkg.Imports...), pkg.TestImports...)
		for _, imp := range imports {
			if strings.HasPrefix(imp, "oncehook/") && !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s; of ours only %v are allowed", dir, imp, allowed)
			}
		}
	}
}
