package adminclient

import (
	"go/build"
	"strings"
	"testing"
)

// TestDependencyRule keeps the admin API's client a client
// (docs/architecture.md, "Dependency rule"): of ours it may import admin and
// cluster, for the API's wire types, only; never the intake, the forwarder,
// the engine, raft, bbolt or fasthttp.
func TestDependencyRule(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if bad := forbidden(pkg.Imports); len(bad) > 0 {
		t.Errorf("adminclient imports %v; of ours only admin and cluster are allowed, and not raft, bbolt or fasthttp", bad)
	}
}

// forbidden returns the imports the rule above refuses.
func forbidden(imports []string) (bad []string) {
	allowed := map[string]bool{"oncehook/admin": true, "oncehook/cluster": true}
	for _, imp := range imports {
		switch {
		case imp == "oncehook", strings.HasPrefix(imp, "oncehook/") && !allowed[imp],
			strings.Contains(imp, "fasthttp"), strings.Contains(imp, "hashicorp/raft"), strings.Contains(imp, "bbolt"):
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
		{"oncehook/admin", false},
		{"oncehook/cluster", false},
		{"net/http", false},
		{"oncehook", true},
		{"oncehook/intake", true},
		{"oncehook/engine", true},
		{"oncehook/forward", true},
		{"github.com/hashicorp/raft", true},
		{"go.etcd.io/bbolt", true},
		{"github.com/valyala/fasthttp", true},
	} {
		if got := len(forbidden([]string{tc.imp})) == 1; got != tc.want {
			t.Errorf("%s: forbidden %v, want %v", tc.imp, got, tc.want)
		}
	}
}
