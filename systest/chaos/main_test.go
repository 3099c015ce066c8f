package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var (
	flagFull      = flag.Bool("full", false, "run every scenario with the long phases (make chaos); default: the short CI profile S0 S1 S4 S5 S6")
	flagSeeds     = flag.Int("seeds", 1, "seeds per scenario")
	flagSeed0     = flag.Uint64("seed0", 1, "first seed")
	flagScenarios = flag.String("scenarios", "", "comma-separated scenario ids to run (e.g. S1,S6); default: the profile's")
	flagResults   = flag.String("results", "", "directory for the markdown report (default results/ with -full, none otherwise); porcupine HTML on failure always goes to results/")
)

var oncehookBin, handlerBin string

// canarySecret is the source secret of every node in these tests: it must
// never show up in a log, a metric, an admin answer or a data file.
const canaryRaw = "CANARY-oncehook-chaos-0123456789abcdef"

var canarySecret = "whsec_" + b64(canaryRaw)

func TestMain(m *testing.M) {
	flag.Parse()
	// The suite needs root, network namespaces and iptables and runs for
	// minutes; it is opt-in until its CI profile has been timed on CI:
	// `make chaos`, or ONCEHOOK_CHAOS=1 go test ./systest/chaos.
	if os.Getenv("ONCEHOOK_CHAOS") == "" && !*flagFull {
		fmt.Println("systest/chaos: skipped (set ONCEHOOK_CHAOS=1 or run make chaos)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "oncehook-chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	oncehookBin = filepath.Join(dir, "oncehook")
	handlerBin = filepath.Join(dir, "chaoshandler")
	builds := [][2]string{{oncehookBin, "oncehook"}, {handlerBin, "oncehook/systest/chaos/cmd/chaoshandler"}}
	// CHAOS_ONCEHOOK_BIN runs the suite against a binary built elsewhere
	// (e.g. a release build, or while the tree does not compile).
	if p := os.Getenv("CHAOS_ONCEHOOK_BIN"); p != "" {
		oncehookBin, builds = p, builds[1:]
	}
	for _, b := range builds {
		cmd := exec.Command("go", "build", "-o", b[0], b[1])
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build", b[1], err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
