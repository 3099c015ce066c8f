//go:build unix

package connlimit

import "syscall"

// FDLimit is the process's file descriptor limit (its soft RLIMIT_NOFILE,
// which the Go runtime raises to the hard one at start); 0 if unknown.
func FDLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}
