package testproc

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnlyTestCodeImports: the product never imports the harness (only test
// files, systest/ and the harness packages under internal/ may), and the
// harness imports nothing of ours.
func TestOnlyTestCodeImports(t *testing.T) {
	const self = "oncehook/internal/testproc"
	allowed := func(rel string) bool {
		return rel == "systest" || strings.HasPrefix(rel, "systest/") ||
			rel == "bench" || strings.HasPrefix(rel, "internal/test")
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
		for _, imp := range pkg.Imports {
			if imp == self && !allowed(filepath.ToSlash(rel)) {
				t.Errorf("%s imports %s outside its tests", rel, self)
			}
			if rel == filepath.Join("internal", "testproc") && strings.HasPrefix(imp, "oncehook/") {
				t.Errorf("testproc imports %s", imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
