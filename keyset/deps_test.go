package keyset

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps the key sets off the intake, the cluster, the
// engine and fasthttp (docs/architecture.md, "Dependency rule"): of ours
// they may import config and providers only.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"oncehook/config": true, "oncehook/providers": true}
	for _, imp := range pkg.Imports {
		switch {
		case imp == "oncehook":
			t.Errorf("keyset imports package main")
		case strings.HasPrefix(imp, "oncehook/") && !allowed[imp]:
			t.Errorf("keyset imports %s; of ours only config and providers are allowed", imp)
		case strings.Contains(imp, "fasthttp"):
			t.Errorf("keyset imports %s", imp)
		}
	}
}
