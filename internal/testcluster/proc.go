package testcluster

import (
	"bytes"
	"fmt"
	"net"
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
// itself call t.Fatal (e.g. when the process it waits on has exited).
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago (all held open together, then released).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// FreeAddr is one free 127.0.0.1:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePorts(t, 1)[0])
}

// Proc is a process started by StartProc; the embedded testproc.Proc
// signals its process group.
type Proc struct {
	*testproc.Proc
	Name string
	out  *lockedBuffer
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
	p := &Proc{Name: name, out: &lockedBuffer{}}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = p.out, p.out
	var err error
	if p.Proc, err = testproc.Start(cmd); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.Output())
		}
	})
	return p
}

// Output is what the process wrote so far, stdout and stderr interleaved.
func (p *Proc) Output() string { return p.out.String() }

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
