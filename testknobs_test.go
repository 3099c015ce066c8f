package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"oncehook/engine"
)

// TestCreateTestEngine: a failpoints build's test bucket width goes into the
// engine file of a new data directory; a file that exists keeps its width;
// without the knob (a release build) nothing is created.
func TestCreateTestEngine(t *testing.T) {
	width := func(d time.Duration) func() time.Duration { return func() time.Duration { return d } }
	stored := func(dir string) time.Duration {
		t.Helper()
		e, err := engine.Open(filepath.Join(dir, "fsm.db"), engine.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		return e.BucketWidth()
	}

	dir := filepath.Join(t.TempDir(), "data")
	if err := createTestEngine(dir, width(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("no knob, yet the data dir was touched: %v", err)
	}
	if err := createTestEngine(dir, width(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := stored(dir); got != time.Second {
		t.Fatalf("new file's width %s, want 1s", got)
	}
	if err := createTestEngine(dir, width(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := stored(dir); got != time.Second {
		t.Fatalf("an existing file's width became %s, want it kept at 1s", got)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode %v, %v; want 0700", fi.Mode().Perm(), err)
	}
}
