package testproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperEnv makes the test binary one of the helper processes below instead
// of running the tests.
const helperEnv = "TESTPROC_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		helper(mode)
		return
	}
	os.Exit(m.Run())
}

// helper modes:
//
//	wait         print "ready", wait for SIGTERM or SIGINT, then exit 0
//	exit         exit 0 at once
//	spawn        start a "wait" child with Start, print its PID, wait
//	spawn-plain  start a "wait" child with plain os/exec (same process group,
//	             no parent-death signal), print its PID, wait
//	interrupt    Begin a run, register a cleanup that writes the file
//	             $TESTPROC_MARK, start a "wait" child with Start, print the
//	             child's PID and the run directory, wait (for the signal
//	             Begin handles)
func helper(mode string) {
	sigs := make(chan os.Signal, 1)
	if mode != "interrupt" {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	}
	child := func(plain bool) *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), helperEnv+"=wait")
		var err error
		if plain {
			err = cmd.Start()
		} else {
			_, err = Start(cmd)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		return cmd
	}
	switch mode {
	case "exit":
		os.Exit(0)
	case "wait":
		fmt.Println("ready") // the handler is installed
	case "spawn", "spawn-plain":
		fmt.Println(child(mode == "spawn-plain").Process.Pid)
	case "interrupt":
		r, err := Begin("helper")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		OnInterrupt(func() { os.WriteFile(os.Getenv("TESTPROC_MARK"), []byte("cleaned"), 0o600) })
		fmt.Println(child(false).Process.Pid, r.Dir())
		select {} // Begin's handler ends the process
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		os.Exit(3)
	}
	<-sigs
	os.Exit(0)
}

// startHelper starts the test binary in a helper mode through Start and
// returns it with the first line it prints.
func startHelper(t *testing.T, mode string, env ...string) (*Proc, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper %s printed nothing: %v", mode, err)
	}
	return p, strings.TrimSpace(line)
}

// waitFor polls cond until it holds or d has passed: testcluster.WaitFor,
// which this package cannot import (testcluster imports testproc).
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reapLater kills pid at cleanup if a failed test left it running.
func reapLater(t *testing.T, pid int) {
	t.Cleanup(func() {
		if !gone(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a PID: %q", s)
	}
	return n
}

// TestChildDiesWithTheTestBinary: a process that started a child through
// Start is SIGKILLed (as `go test -timeout` or the OOM killer would end a
// test binary: no deferred call, no cleanup); the kernel kills the child.
func TestChildDiesWithTheTestBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	parent, line := startHelper(t, "spawn")
	grandchild := atoi(t, line)
	reapLater(t, grandchild)
	if gone(grandchild) {
		t.Fatalf("the child %d is not running before its parent is killed", grandchild)
	}
	// Only the parent's PID: the child has a process group of its own.
	if err := syscall.Kill(parent.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-parent.Done()
	waitFor(t, "the orphaned child to be killed", 10*time.Second, func() bool { return gone(grandchild) })
}

// TestChildOutlivesTheThreadThatStartedIt: the parent-death signal fires when
// the forking thread exits, and a goroutine locked to its thread that returns
// ends that thread. A child started from such a goroutine must live on: the
// fork happened on the fork thread.
func TestChildOutlivesTheThreadThatStartedIt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	type res struct {
		p   *Proc
		tid int
		err error
	}
	var r res
	// The runtime never ends the main thread (a goroutine that exits locked
	// to it wedges it instead): retry until the goroutine got another thread.
	for attempt := 0; r.p == nil; attempt++ {
		if attempt == 10 {
			t.Fatal("every locked goroutine ran on the main thread")
		}
		ch := make(chan res, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			if unix.Gettid() == os.Getpid() {
				ch <- res{}
				return
			}
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), helperEnv+"=wait")
			out, err := cmd.StdoutPipe()
			if err != nil {
				ch <- res{err: err}
				return
			}
			p, err := Start(cmd)
			if err == nil {
				_, err = bufio.NewReader(out).ReadString('\n') // "ready"
			}
			ch <- res{p, unix.Gettid(), err}
		}()
		r = <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
	}
	t.Cleanup(r.p.Kill)
	waitFor(t, "the locked thread to exit", 10*time.Second, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", r.tid))
		return errors.Is(err, os.ErrNotExist)
	})
	// The kernel sends the parent-death signal before the thread leaves
	// /proc: had it been sent, the child would already be dying of SIGKILL
	// and could not exit 0 on our SIGTERM.
	if !r.p.Stop(10 * time.Second) {
		t.Fatal("the child did not stop on SIGTERM")
	}
	if err := r.p.Err(); err != nil {
		t.Fatalf("the child died with its starter's thread: %v", err)
	}
}

// TestStopReachesTheProcessGroup: what a child forked without the harness
// (same process group, no parent-death signal) goes with it on Kill and Stop.
func TestStopReachesTheProcessGroup(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(p *Proc)
	}{
		{"kill", (*Proc).Kill},
		{"stop", func(p *Proc) { p.Stop(10 * time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, line := startHelper(t, "spawn-plain")
			grandchild := atoi(t, line)
			reapLater(t, grandchild)
			tc.stop(p)
			waitFor(t, "the grandchild to be gone", 10*time.Second, func() bool { return gone(grandchild) })
		})
	}
}

// TestChildrenCarryTheRunMark: Sweep tells our leftovers by this mark.
func TestChildrenCarryTheRunMark(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	p, _ := startHelper(t, "spawn")
	if got := runMark(p.Pid()); got != os.Getpid() {
		t.Fatalf("mark %d, want %d", got, os.Getpid())
	}
}

// TestInterruptCleansUp: SIGTERM to a test binary that called Begin kills its
// children, runs the pending cleanups, removes the run directory, and the
// binary dies of SIGTERM.
func TestInterruptCleansUp(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	mark := filepath.Join(t.TempDir(), "cleaned")
	p, line := startHelper(t, "interrupt", "TESTPROC_MARK="+mark)
	f := strings.Fields(line)
	if len(f) != 2 {
		t.Fatalf("helper said %q", line)
	}
	child, dir := atoi(t, f[0]), f[1]
	reapLater(t, child)
	if !strings.HasPrefix(filepath.Base(dir), Prefix+strconv.Itoa(p.Pid())+"-helper-") {
		t.Errorf("run directory %s is not named for the run", dir)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("the helper ended with %v, want death by SIGTERM", p.Err())
	}
	waitFor(t, "the child to be gone", 10*time.Second, func() bool { return gone(child) })
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("the pending cleanup did not run: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run directory is still there: %v", err)
	}
}

// TestCleanupRunsOnce: a cleanup runs once whether the test or the signal
// path comes first, and a run cleanup leaves the signal path.
func TestCleanupRunsOnce(t *testing.T) {
	n := 0
	run := OnInterrupt(func() { n++ })
	run()
	run()
	Interrupt()
	if n != 1 {
		t.Fatalf("ran %d times", n)
	}
	m := 0
	run = OnInterrupt(func() { m++ })
	Interrupt()
	run()
	if m != 1 {
		t.Fatalf("ran %d times after Interrupt", m)
	}
}

// TestInterruptSurvivesAPanickingCleanup: one cleanup's panic does not keep
// the older ones from running on the signal path.
func TestInterruptSurvivesAPanickingCleanup(t *testing.T) {
	ran := false
	OnInterrupt(func() { ran = true })
	OnInterrupt(func() { panic("cleanup broke") })
	Interrupt()
	if !ran {
		t.Fatal("the cleanup before the panicking one did not run")
	}
}
