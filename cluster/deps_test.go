package cluster

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps cluster off providers, forward, fasthttp and
// package main (docs/architecture.md, "Dependency rule"): of ours it may
// import engine only, and two leaves: the failpoint hooks (nothing in a
// release build) and connlimit (the cluster port's caps).
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		switch {
		case strings.Contains(imp, "fasthttp"):
			t.Errorf("cluster imports %s", imp)
		case strings.HasPrefix(imp, "oncehook/") && imp != "oncehook/engine" && imp != "oncehook/failpoint" && imp != "oncehook/connlimit":
			t.Errorf("cluster imports %s; of ours only oncehook/engine (and the failpoint and connlimit leaves) is allowed", imp)
		case imp == "oncehook":
			t.Errorf("cluster imports package main")
		}
	}
}
