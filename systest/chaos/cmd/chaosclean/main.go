// Command chaosclean removes what a crashed or killed test run left behind
// (`make chaos-clean`): oncehook nodes, handlers and helpers started by the
// test harness, its network namespaces (with their veths and iptables
// rules), tmpfs and loop mounts, loop and device-mapper devices, cgroups and
// run directories. It touches only what the harness marked (the
// ONCEHOOK_TEST_RUN variable of a child) or named (the oncehook-test-<pid>-
// prefix) for a run whose test process is gone, never a live run's; see
// package testproc. It is safe to run when nothing is left: it says so and
// exits 0. Most of it needs root, like the chaos suite.
package main

import (
	"fmt"
	"io"
	"os"

	"oncehook/internal/testproc"
)

func main() {
	os.Exit(run(os.Stdout, os.Stderr))
}

func run(stdout, stderr io.Writer) int {
	removed, err := testproc.Sweep()
	for _, r := range removed {
		fmt.Fprintln(stdout, "removed", r)
	}
	if err != nil {
		fmt.Fprintln(stderr, "chaosclean:", err)
		if os.Geteuid() != 0 {
			fmt.Fprintln(stderr, "chaosclean: not root: namespaces, mounts and other users' processes need root")
		}
		return 1
	}
	if len(removed) == 0 {
		fmt.Fprintln(stdout, "nothing to clean")
	}
	return 0
}
