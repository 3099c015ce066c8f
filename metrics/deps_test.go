package metrics

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps the metrics off the servers, the forwarder, the
// key sets and fasthttp (docs/architecture.md, "Dependency rule"): of ours
// it may import engine and cluster, for their types, only.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if bad := forbidden(pkg.Imports); len(bad) > 0 {
		t.Errorf("metrics imports %v; of ours only engine and cluster are allowed, and not fasthttp", bad)
	}
}

// forbidden returns the imports the rule above refuses.
func forbidden(imports []string) (bad []string) {
	allowed := map[string]bool{"oncehook/engine": true, "oncehook/cluster": true}
	for _, imp := range imports {
		if imp == "oncehook" || strings.HasPrefix(imp, "oncehook/") && !allowed[imp] || strings.Contains(imp, "fasthttp") {
			bad = append(bad, imp)
		}
	}
	return bad
}

// TestForbidden: the rule refuses what docs/architecture.md names.
func TestForbidden(t *testing.T) {
	for _, tc := range []struct {
		imp  string
		want bool
	}{
		{"oncehook/engine", false},
		{"oncehook/cluster", false},
		{"github.com/prometheus/client_golang/prometheus", false},
		{"oncehook", true},
		{"oncehook/intake", true},
		{"oncehook/admin", true},
		{"oncehook/forward", true},
		{"oncehook/keyset", true},
		{"github.com/valyala/fasthttp", true},
	} {
		if got := len(forbidden([]string{tc.imp})) == 1; got != tc.want {
			t.Errorf("%s: forbidden %v, want %v", tc.imp, got, tc.want)
		}
	}
}
