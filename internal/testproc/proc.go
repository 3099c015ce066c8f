package testproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// EnvRun is the environment variable every child carries: the PID of the
// test binary that started it. Sweep kills a process carrying it only when
// that PID is gone.
const EnvRun = "ONCEHOOK_TEST_RUN"

// ErrNotRunning: the process has already exited.
var ErrNotRunning = errors.New("testproc: process not running")

// forker runs every fork on one goroutine locked to its OS thread that never
// returns, so the thread a child's parent-death signal is tied to lives as
// long as the process (see the package doc).
var forker struct {
	once sync.Once
	reqs chan func()
}

func onForkThread(fn func()) {
	forker.once.Do(func() {
		forker.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked, never returns
			for f := range forker.reqs {
				f()
			}
		}()
	})
	done := make(chan struct{})
	forker.reqs <- func() { fn(); close(done) }
	<-done
}

// Proc is one child started by Start. Its methods signal the child's whole
// process group.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result, set before done is closed
}

// live holds the process groups of the children not yet reaped, for the
// SIGINT/SIGTERM path of Begin.
var live struct {
	sync.Mutex
	pgids map[int]struct{}
}

// CommandContext is exec.CommandContext whose cancel kills the child's whole
// process group, not only the child.
func CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// Prepare sets on cmd what every child of a test gets: its own process group,
// SIGKILL when its parent dies (Linux), and the run mark in its environment.
// Start calls it.
func Prepare(cmd *exec.Cmd) {
	cmd.SysProcAttr = childAttr()
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, EnvRun+"="+strconv.Itoa(os.Getpid()))
	if cmd.WaitDelay == 0 {
		// Wait must not block forever on a grandchild that holds the output
		// pipe open after the child is gone.
		cmd.WaitDelay = 5 * time.Second
	}
}

// Start prepares cmd (Prepare), starts it on the fork thread and reaps it in
// the background. cmd must not have been started.
func Start(cmd *exec.Cmd) (*Proc, error) {
	Prepare(cmd)
	var err error
	onForkThread(func() { err = cmd.Start() })
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	pid := cmd.Process.Pid
	live.Lock()
	if live.pgids == nil {
		live.pgids = map[int]struct{}{}
	}
	live.pgids[pid] = struct{}{}
	live.Unlock()
	go func() {
		err := cmd.Wait()
		live.Lock()
		delete(live.pgids, pid)
		live.Unlock()
		p.err = err
		close(p.done)
	}()
	return p, nil
}

// Run starts cmd like Start and waits for it; it returns Wait's error.
func Run(cmd *exec.Cmd) error {
	p, err := Start(cmd)
	if err != nil {
		return err
	}
	<-p.done
	return p.err
}

// CombinedOutput is exec.Cmd.CombinedOutput for a child started by Start.
func CombinedOutput(cmd *exec.Cmd) ([]byte, error) {
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := Run(cmd)
	return b.Bytes(), err
}

// Pid is the child's PID, which is also its process group.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is Wait's result; nil until Done is closed.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Running reports whether the child has not been reaped yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the child's process group.
func (p *Proc) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return ErrNotRunning
	}
	return killGroup(p.Pid(), sig)
}

// Kill sends SIGCONT (a stopped process must run to die) and SIGKILL to the
// child's process group and waits until the child is reaped.
func (p *Proc) Kill() {
	if p.Running() {
		killGroup(p.Pid(), syscall.SIGCONT)
		killGroup(p.Pid(), syscall.SIGKILL)
	}
	<-p.done
}

// Stop sends SIGCONT and SIGTERM to the process group and waits up to d for
// the child to exit; then it kills the group. It reports whether the child
// exited within d.
func (p *Proc) Stop(d time.Duration) bool {
	if !p.Running() {
		return true
	}
	killGroup(p.Pid(), syscall.SIGCONT)
	killGroup(p.Pid(), syscall.SIGTERM)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		p.Kill()
		return false
	}
}

func killGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("testproc: refusing to signal process group %d", pgid)
	}
	return syscall.Kill(-pgid, sig)
}

// killLive kills the process group of every child not yet reaped.
func killLive() {
	live.Lock()
	defer live.Unlock()
	for pgid := range live.pgids {
		killGroup(pgid, syscall.SIGCONT)
		killGroup(pgid, syscall.SIGKILL)
	}
}
