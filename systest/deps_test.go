package systest

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule: system tests drive the binary from outside; of ours they
// may import providers (to sign like a sender) and nothing else.
func TestDependencyRule(t *testing.T) {
	for _, dir := range []string{".", "../bench"} {
		pkg, err := build.ImportDir(dir, build.ImportComment)
		if err != nil {
			t.Fatal(err)
		}
		imports := append(append([]string{}, pkg.Imports...), pkg.TestImports...)
		for _, imp := range imports {
			if strings.HasPrefix(imp, "oncehook/") && imp != "oncehook/providers" {
				t.Errorf("%s imports %s; of ours only oncehook/providers is allowed", dir, imp)
			}
		}
	}
}
