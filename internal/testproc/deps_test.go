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
// testcluster, powercut); only test files, systest/ and the harness packages
// under internal/ may. testproc and powercut import nothing of ours;
// testcluster only testproc and providers.
func TestOnlyTestCodeImports(t *testing.T) {
	harness := map[string]bool{"oncehook/internal/testproc": true, "oncehook/internal/testcluster": true,
		"oncehook/internal/powercut": true}
	mayImport := map[string][]string{
		"internal/testproc":    nil,
		"internal/powercut":    nil,
		"internal/testcluster": {"oncehook/internal/testproc", "oncehook/providers"},
	}
	allowed := func(rel string) bool {
		return rel == "systest" || strings.HasPrefix(rel, "systest/") ||
			rel == "bench" || strings.HasPrefix(rel, "internal/test") || rel == "internal/powercut"
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
			if harness[imp] && !allowed(rel) {
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
