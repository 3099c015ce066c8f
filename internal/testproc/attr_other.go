//go:build unix && !linux

package testproc

import "syscall"

// childAttr: a process group of its own. Only Linux has a parent-death
// signal: elsewhere a child outlives a test binary that is killed outright,
// and Sweep (Linux only) does not collect it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
