package chaos

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"oncehook/failpoint"
	"oncehook/internal/testcluster"
	"oncehook/internal/testproc"
)

var (
	flagFull      = flag.Bool("full", false, "run every scenario with the long phases (make chaos); default: the short CI profile S0 S1 S4 S5 S6")
	flagSeeds     = flag.Int("seeds", 1, "seeds per scenario")
	flagSeed0     = flag.Uint64("seed0", 1, "first seed")
	flagScenarios = flag.String("scenarios", "", "comma-separated scenario ids to run (e.g. S1,S6); default: the profile's")
	flagResults   = flag.String("results", "", "directory for the markdown report (default results/ with -full, none otherwise); porcupine HTML on failure always goes to results/")
)

var oncehookBin, handlerBin string

// hasFailpoints: the oncehook binary under test was built with -tags
// failpoints (CHAOS_ONCEHOOK_BIN may name a release build, which has none).
var hasFailpoints bool

func requireFailpoints(t testing.TB) {
	t.Helper()
	if !hasFailpoints {
		t.Skipf("chaos: failpoint scenario skipped: %s was built without -tags failpoints", oncehookBin)
	}
}

// canarySecret is the source secret of every node in these tests: it must
// never show up in a log, a metric, an admin answer or a data file.
const canaryRaw = "CANARY-oncehook-chaos-0123456789abcdef"

var canarySecret = "whsec_" + b64(canaryRaw)

func TestMain(m *testing.M) {
	flag.Parse()
	// `make test` runs the short profile (S0 S1 S4 S5 S6, one seed), H1-H20,
	// the security and the mutual-TLS checks: about 3.5 min with -race on the
	// 2-core reference machine. The scenarios skip, saying why, without root,
	// network namespaces or iptables; -short (or ONCEHOOK_CHAOS=0) skips the
	// whole package, binary builds included. `make chaos` runs every scenario.
	if testing.Short() {
		fmt.Println("systest/chaos: skipped in -short mode (builds oncehook and spawns nodes)")
		os.Exit(0)
	}
	if os.Getenv("ONCEHOOK_CHAOS") == "0" && !*flagFull {
		fmt.Println("systest/chaos: skipped (ONCEHOOK_CHAOS=0)")
		os.Exit(0)
	}
	// The run directory holds the binaries and every test's TempDir (node
	// data dirs, tmpfs and loop mounts); a SIGINT or SIGTERM kills the nodes
	// and removes namespaces, mounts and cgroups; leftovers of a dead run
	// (a -timeout panic) are swept here, at the start of the next run, or by
	// `make chaos-clean` (package testproc).
	run, err := testproc.Begin("chaos")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir := run.Dir()
	oncehookBin = filepath.Join(dir, "oncehook")
	handlerBin = filepath.Join(dir, "chaoshandler")
	builds := [][2]string{{oncehookBin, "oncehook"}, {handlerBin, "oncehook/systest/chaos/cmd/chaoshandler"}}
	// CHAOS_ONCEHOOK_BIN runs the suite against a binary built elsewhere
	// (e.g. a release build, or while the tree does not compile).
	if p := os.Getenv("CHAOS_ONCEHOOK_BIN"); p != "" {
		oncehookBin, builds = p, builds[1:]
	}
	for _, b := range builds {
		// -tags failpoints: the hooks of package failpoint and the test clock
		// (S1fp, S3fp, S8fp, S11); they are inert until a control file arms them.
		if err := testcluster.Build(b[0], b[1], "failpoints"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			run.End()
			os.Exit(1)
		}
	}
	if b, err := os.ReadFile(oncehookBin); err == nil {
		hasFailpoints = bytes.Contains(b, []byte(failpoint.EnvFile))
	}
	code := m.Run()
	run.End()
	os.Exit(code)
}
