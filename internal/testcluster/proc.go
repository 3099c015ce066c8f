package testcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"oncehook/internal/testproc"
)

// Build builds package pkg (e.g. "oncehook") into the file out, with the
// given build tags. Call it once per test binary, from TestMain.
func Build(out, pkg string, tags ...string) error {
	args := []string{"build"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "-o", out, pkg)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := testproc.Run(cmd); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	return nil
}

// WaitFor polls cond every 20 ms until it holds; after timeout it fails t
// naming what it waited for. cond runs on the test's goroutine, so it may
// itself call t.Fatal (e.g. when the process it waits on has exited). It is
// Await for a test.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	WaitForEvery(t, what, timeout, pollEvery, cond)
}

// WaitForEvery is WaitFor polling every every (AwaitEvery for a test).
func WaitForEvery(t testing.TB, what string, timeout, every time.Duration, cond func() bool) {
	t.Helper()
	if err := AwaitEvery(context.Background(), what, timeout, every, func() (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%v", err)
	}
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago (all held open together, then released): ReservePorts for a test.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := ReservePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// FreeAddr is one free 127.0.0.1:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePorts(t, 1)[0])
}

// Proc is a process started by StartProc, StartSpec or Launch; the embedded
// testproc.Proc signals its process group.
type Proc struct {
	*testproc.Proc
	Name string
	out  *lockedBuffer // the output, unless it goes to log
	log  string        // Spec.Log
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// StartProc starts argv in dir with its output captured; the test's cleanup
// kills it and, when the test failed, logs that output.
func StartProc(t testing.TB, name, dir string, argv ...string) *Proc {
	t.Helper()
	return StartSpec(t, Spec{Name: name, Dir: dir, Argv: argv})
}

// StartSpec is Launch for a test: a failure to start fails t, and the test's
// cleanup kills the process and, when the test failed, logs its output (the
// name of its log file when it has one).
func StartSpec(t testing.TB, s Spec) *Proc {
	t.Helper()
	p, err := Launch(s)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		p.Kill()
		if !t.Failed() {
			return
		}
		if p.log != "" {
			t.Logf("--- output of %s: %s ---", p.Name, p.log)
		} else {
			t.Logf("--- output of %s ---\n%s", p.Name, p.Output())
		}
	})
	return p
}

// Output is what the process wrote so far, stdout and stderr interleaved (with
// a Spec.Log, the whole file: earlier processes' output too).
func (p *Proc) Output() string {
	if p.out != nil {
		return p.out.String()
	}
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(b)
}

// ExitCode is the process's exit code once it has exited, or -1.
func (p *Proc) ExitCode() int {
	if p.Running() {
		return -1
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Run runs argv in dir to completion and returns its combined output and exit
// code; a failure to start fails t.
func Run(t testing.TB, dir string, argv ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	out, err := testproc.CombinedOutput(cmd)
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", argv, err)
	}
	return string(out), 0
}
