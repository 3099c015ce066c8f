//go:build unix

package engine

import "syscall"

// processCPU returns the CPU time (user+system, all threads) this process has
// used, in nanoseconds: benchmarks report it per operation because wall time
// on a shared machine says little.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
