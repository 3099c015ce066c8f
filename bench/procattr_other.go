//go:build !linux

package main

import "syscall"

// nodeAttr: a process group of its own; only Linux has a parent-death
// signal (procattr_linux.go).
func nodeAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
