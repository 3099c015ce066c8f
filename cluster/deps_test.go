package cluster

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps cluster off providers, forward, fasthttp and
// package main (docs/architecture.md, "Dependency rule"): of ours it may
// import engine only, and three leaves: the failpoint hooks (nothing in a
// release build), connlimit (the cluster port's caps) and idleconn (whether
// a kept relay stream may be reused).
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		switch {
		case strings.Contains(imp, "fasthttp"):
			t.Errorf("cluster imports %s", imp)
		case strings.HasPrefix(imp, "oncehook/") && imp != "oncehook/engine" && imp != "oncehook/failpoint" && imp != "oncehook/connlimit" && imp != "oncehook/idleconn":
			t.Errorf("cluster imports %s; of ours only oncehook/engine (and the failpoint, connlimit and idleconn leaves) is allowed", imp)
		case imp == "oncehook":
			t.Errorf("cluster imports package main")
		}
	}
}
