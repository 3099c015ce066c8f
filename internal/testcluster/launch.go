package testcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"oncehook/internal/testproc"
)

// The error-returning layer. The functions here take no testing.TB, so that
// a command (the bench tool) drives nodes with the same code as the tests;
// the testing.TB helpers (StartProc, WaitFor, FreePorts, Cluster) are built
// on them and fail the test where these return an error.

// ErrTimeout: Await gave up waiting.
var ErrTimeout = errors.New("timed out")

// pollEvery is how often Await polls.
const pollEvery = 20 * time.Millisecond

// Await polls cond every 20 ms until it holds, returns an error, ctx ends or
// timeout passes (0: no limit but ctx). On timeout the error wraps ErrTimeout
// and names what it waited for; cond's own error is returned as it is.
func Await(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) error {
	return AwaitEvery(ctx, what, timeout, pollEvery, cond)
}

// AwaitEvery is Await polling every every: for an in-process test that must
// see a state lasting only a few milliseconds.
func AwaitEvery(ctx context.Context, what string, timeout, every time.Duration, cond func() (bool, error)) error {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("%w after %s waiting for %s", ErrTimeout, timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// ReservePorts returns n distinct TCP ports that were free on 127.0.0.1 a
// moment ago (all held open together, then released). They are taken below
// the kernel's ephemeral range when it leaves room: a node restarted on its
// port would otherwise find it taken, now and then, as the source port of
// some outgoing connection (raft's, a client's) made while it was down.
func ReservePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	lo, hi := fixedPortRange()
	for tries := 0; len(ports) < n && hi > lo && tries < 100*n; tries++ {
		port := lo + rand.IntN(hi-lo)
		if slices.Contains(ports, port) {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use: try another
		}
		lns = append(lns, ln)
		ports = append(ports, port)
	}
	for len(ports) < n { // no room below the ephemeral range: any free port
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a loopback port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// fixedPortRange is [lo, hi): ports from 10000 up to the start of the
// kernel's ephemeral range (ip_local_port_range), which the kernel never
// hands out as a source port. Empty when that range cannot be read.
func fixedPortRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first <= 11000 {
		return 0, 0
	}
	return 10000, first
}

// Spec is a process for Launch (and StartSpec).
type Spec struct {
	Name string   // in messages
	Dir  string   // working directory; "" is the caller's
	Argv []string // the program and its arguments
	// Wrap is put before Argv: the program that runs it, e.g. "ip", "netns",
	// "exec", NS to run it inside a network namespace. Signals still reach
	// the program: they go to the whole process group.
	Wrap []string
	Env  []string // added to the caller's environment
	// Log is a file the output is appended to (made 0600 if missing), so
	// that a node restarted with the same Log keeps one log; "" keeps the
	// output in memory. Either way Output and Tail read it.
	Log string
}

// Launch starts s through package testproc (its own process group, killed
// with the caller, marked with the run). The caller stops it: Stop, Kill or
// StopDump; StartSpec also registers a kill with the test's cleanup.
func Launch(s Spec) (*Proc, error) {
	argv := append(append([]string(nil), s.Wrap...), s.Argv...)
	if len(argv) == 0 {
		return nil, fmt.Errorf("start %s: no command", s.Name)
	}
	p := &Proc{Name: s.Name, log: s.Log}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.Dir
	if len(s.Env) > 0 {
		cmd.Env = append(os.Environ(), s.Env...)
	}
	var f *os.File
	if s.Log != "" {
		var err error
		if f, err = os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return nil, fmt.Errorf("start %s: %w", s.Name, err)
		}
		cmd.Stdout, cmd.Stderr = f, f
	} else {
		p.out = &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = p.out, p.out
	}
	var err error
	p.Proc, err = testproc.Start(cmd)
	if f != nil {
		f.Close() // the child has its own copy
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	return p, nil
}

// Tail is the last n lines of the output or, when the process panicked (or
// the Go runtime threw), n lines from the panic on: the part that says why.
func (p *Proc) Tail(n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(p.Output()))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	panicked := false
	for sc.Scan() {
		l := sc.Text()
		if !panicked && (strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ")) {
			panicked, lines = true, lines[:0]
		}
		if panicked && len(lines) >= n {
			continue
		}
		lines = append(lines, l)
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// StopDump stops the process and reports whether SIGTERM was enough: SIGTERM,
// then after d SIGQUIT (a Go program writes every goroutine's stack to its
// output: the record of what held the shutdown up), then after grace SIGKILL.
// It returns once the process has exited.
func (p *Proc) StopDump(d, grace time.Duration) bool {
	if !p.Running() {
		return true
	}
	p.Signal(syscall.SIGCONT) // a stopped process must run to stop
	p.Signal(syscall.SIGTERM)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.Done():
		return true
	case <-t.C:
	}
	p.Signal(syscall.SIGQUIT)
	g := time.NewTimer(grace)
	defer g.Stop()
	select {
	case <-p.Done():
	case <-g.C:
		p.Kill()
	}
	return false
}

// AwaitReady polls probe (e.g. Ready on the node's /readyz) until it holds;
// it returns at once, with the tail of the output, if p exits meanwhile, and
// wraps ErrTimeout after timeout. name is the node's, for the messages.
func AwaitReady(ctx context.Context, name string, p *Proc, timeout time.Duration, probe func() bool) error {
	return Await(ctx, name+" ready", timeout, func() (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("%s exited while starting: %v\n%s", name, p.Err(), p.Tail(20))
		}
		return probe(), nil
	})
}
