package main

import "syscall"

// nodeAttr: a process group of its own, and SIGKILL from the kernel when
// bench dies, so a bench killed outright (SIGKILL, OOM) leaves no node
// behind. The kernel ties that signal to the forking thread, not the
// process; bench never locks a goroutine to a thread, and the Go runtime ends
// a thread only when a goroutine locked to it returns, so the forking thread
// lives as long as bench. (The tests' harness, internal/testproc, forks from
// one dedicated thread because the chaos suite does lock and end threads.)
func nodeAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
