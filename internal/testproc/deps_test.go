package testproc

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOnlyTestCodeImports: the product never imports the harness (testproc,
// testcluster, powercut); only test files, systest/, the bench command and
// the harness packages under internal/ may (harnessImporter). testproc and
// powercut import nothing of ours; testcluster only testproc and providers.
func TestOnlyTestCodeImports(t *testing.T) {
	harness := map[string]bool{"oncehook/internal/testproc": true, "oncehook/internal/testcluster": true,
		"oncehook/internal/powercut": true}
	mayImport := map[string][]string{
		"internal/testproc":    nil,
		"internal/powercut":    nil,
		"internal/testcluster": {"oncehook/internal/testproc", "oncehook/providers"},
	}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if n := d.Name(); path != "../.." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "web" || n == "results") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here
		}
		rel, _ := filepath.Rel("../..", path)
		rel = filepath.ToSlash(rel)
		for _, imp := range pkg.Imports {
			if harness[imp] && !harnessImporter(rel) {
				t.Errorf("%s imports %s outside its tests", rel, imp)
			}
			if ok, isHarness := mayImport[rel]; isHarness && strings.HasPrefix(imp, "oncehook/") && !slices.Contains(ok, imp) {
				t.Errorf("%s imports %s", rel, imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// harnessImporter reports whether the non-test code of the package at rel
// (slash-separated, relative to the module root) may import the harness:
// the system tests, the bench command (it spawns nodes with testcluster's
// error-returning layer) and the harness itself.
func harnessImporter(rel string) bool {
	return rel == "systest" || strings.HasPrefix(rel, "systest/") ||
		rel == "bench" || strings.HasPrefix(rel, "internal/test") || rel == "internal/powercut"
}

func TestHarnessImporter(t *testing.T) {
	for rel, want := range map[string]bool{
		"systest": true, "systest/chaos": true, "systest/chaos/cmd/chaosclean": true,
		"bench": true, "internal/testcluster": true, "internal/testproc": true,
		".": false, "cluster": false, "engine": false, "forward": false, "admin": false,
		"benchmarks": false, "internal/other": false,
	} {
		if got := harnessImporter(rel); got != want {
			t.Errorf("%s: %v, want %v", rel, got, want)
		}
	}
}
