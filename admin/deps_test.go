package admin

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps the admin API off the intake, the forwarder,
// providers, raft and fasthttp (docs/architecture.md, "Dependency rule"): of
// ours it may import engine, config and cluster (for its Status type and
// error sentinels) only.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"oncehook/engine": true, "oncehook/config": true, "oncehook/cluster": true}
	for _, imp := range pkg.Imports {
		switch {
		case imp == "oncehook":
			t.Errorf("admin imports package main")
		case strings.HasPrefix(imp, "oncehook/") && !allowed[imp]:
			t.Errorf("admin imports %s; of ours only engine, config and cluster are allowed", imp)
		case strings.Contains(imp, "fasthttp"), strings.Contains(imp, "hashicorp/raft"), strings.Contains(imp, "bbolt"):
			t.Errorf("admin imports %s", imp)
		}
	}
}
