package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"oncehook/engine"
)

// createTestEngine gives a new data directory an engine file with the test
// retention bucket width of a failpoints build (failpoint/doc.go,
// ONCEHOOK_TEST_BUCKET_WIDTH), so that a system test watches buckets end in
// seconds. The width is fixed when the file is created (engine.Options), so
// the file is created here, before the cluster node opens it; a file that
// exists keeps its width. In a release build failpoint.BucketWidth is the
// constant zero and this does nothing.
func createTestEngine(dir string, width func() time.Duration) error {
	w := width()
	if w <= 0 {
		return nil
	}
	path := filepath.Join(dir, "fsm.db") // cluster.Config.Dir's engine file
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return err // there already (nil), or unreadable
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	eng, err := engine.Open(path, engine.Options{BucketWidth: w})
	if err != nil {
		return fmt.Errorf("test bucket width: %w", err)
	}
	return eng.Close()
}
