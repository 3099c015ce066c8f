package testproc

import "syscall"

// childAttr: a process group of its own (a ^C on the terminal reaches only the
// test binary, and the group is what Kill and Stop signal), and SIGKILL from
// the kernel when the forking thread dies (see the package doc for why that
// thread is the fork thread).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
