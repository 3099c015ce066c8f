package forward

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps forward off cluster, providers and fasthttp
// (docs/architecture.md, "Dependency rule"): of ours it may import engine
// only, and two leaves: the failpoint hooks (nothing in a release build)
// and idleconn (whether a kept connection to a handler may be reused).
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		switch {
		case strings.Contains(imp, "fasthttp"):
			t.Errorf("forward imports %s", imp)
		case strings.HasPrefix(imp, "oncehook/") && imp != "oncehook/engine" && imp != "oncehook/failpoint" && imp != "oncehook/idleconn":
			t.Errorf("forward imports %s; of ours only oncehook/engine (and the failpoint and idleconn leaves) is allowed", imp)
		}
	}
}
