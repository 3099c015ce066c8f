package powercut

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"oncehook/internal/powercut"
	"oncehook/internal/testcluster"
	"oncehook/internal/testproc"
)

// binary is the oncehook binary under test, built with -tags failpoints (the
// boot id override); "" when FUSE is unavailable (fuseErr says why).
var (
	binary  string
	fuseErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("systest/powercut: skipped in -short mode (builds oncehook and spawns nodes)")
		os.Exit(0)
	}
	if os.Getenv("ONCEHOOK_POWERCUT") == "0" {
		fmt.Println("systest/powercut: skipped (ONCEHOOK_POWERCUT=0)")
		os.Exit(0)
	}
	// The run directory holds the binary and every test's TempDir, so the
	// FUSE mounts too: a SIGINT or SIGTERM kills the nodes and unmounts; a
	// dead run's mounts are swept by the next run (package testproc).
	run, err := testproc.Begin("powercut")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if fuseErr = powercut.Available(); fuseErr == nil {
		binary = filepath.Join(run.Dir(), "oncehook")
		if err := testcluster.Build(binary, "oncehook", "failpoints"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			run.End()
			os.Exit(1)
		}
	}
	code := m.Run()
	run.End()
	os.Exit(code)
}

func requireFUSE(t *testing.T) {
	t.Helper()
	if fuseErr != nil {
		t.Skipf("systest/powercut: %v (needs root, /dev/fuse and the fuse3 package)", fuseErr)
	}
}
