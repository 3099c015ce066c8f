package intake

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps the intake off the cluster, the forwarder, raft,
// bbolt and the admin API (docs/architecture.md, "Dependency rule"): of ours
// it may import engine, providers and config only.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"oncehook/engine": true, "oncehook/providers": true, "oncehook/config": true, "oncehook/connlimit": true}
	for _, imp := range pkg.Imports {
		switch {
		case imp == "oncehook":
			t.Errorf("intake imports package main")
		case strings.HasPrefix(imp, "oncehook/") && !allowed[imp]:
			t.Errorf("intake imports %s; of ours only engine, providers, config and connlimit are allowed", imp)
		case strings.Contains(imp, "hashicorp/raft"), strings.Contains(imp, "bbolt"), imp == "net/http":
			t.Errorf("intake imports %s", imp)
		}
	}
}
