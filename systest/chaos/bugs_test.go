package chaos

import (
	"flag"
	"testing"
)

var flagBugs = flag.Bool("bugs", false, "fail on known oncehook bugs (reported, not fixed here) instead of logging them")

// knownBug records a reproduced oncehook bug. With -bugs the test fails, so
// the reproduction is a failing test; without it the bug is logged as KNOWN BUG
// and the suite stays green for CI until the fix lands (then the condition
// that calls knownBug stops holding and the call can go).
func knownBug(t testing.TB, what string) {
	t.Helper()
	if *flagBugs {
		t.Errorf("KNOWN BUG: %s", what)
		return
	}
	t.Logf("KNOWN BUG (run with -bugs to fail): %s", what)
}
