package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"oncehook/internal/testproc"
)

// The topology every scenario runs in:
//
//	hub netns: bridge br0 (no address, no route out)
//	  ├── veth ── node netns n1 10.231.1.1/24  oncehook node1
//	  ├── veth ── node netns n2 10.231.1.2/24  oncehook node2
//	  ├── veth ── node netns n3 10.231.1.3/24  oncehook node3
//	  └── veth ── client netns  10.231.1.10/24 chaoshandler + the test's load
//
// No namespace has a default route, so nothing can leave the sandbox. Names
// start with testproc.NamePrefix (the harness prefix and the test process's
// PID), so testproc.Sweep, at the start of a run or from `make chaos-clean`,
// removes only namespaces left by a dead run.

const (
	subnet   = "10.231.1"
	clientIP = subnet + ".10"
)

func nodeIP(i int) string { return fmt.Sprintf("%s.%d", subnet, i+1) }

// topo is one set of namespaces.
type topo struct {
	t      testing.TB
	prefix string
	hub    string
	nodes  []string // netns names of node1..3
	client string
	dial   *nsDialer
}

// nsRun runs a helper command (ip, iptables, mount, losetup...) as a child of
// the harness: it dies with the test binary.
func nsRun(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := testproc.CombinedOutput(testproc.CommandContext(ctx, args[0], args[1:]...))
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// killNetnsPids kills processes still inside a namespace of ours, found by
// `ip netns pids`: whatever runs there was started by this test.
func killNetnsPids(name string) {
	out, err := nsRun("ip", "netns", "pids", name)
	if err != nil {
		return
	}
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

var topoSeq struct {
	sync.Mutex
	n int
}

// newTopo builds the namespaces and registers their removal.
func newTopo(t testing.TB) *topo {
	t.Helper()
	topoSeq.Lock()
	topoSeq.n++
	seq := topoSeq.n
	topoSeq.Unlock()
	p := fmt.Sprintf("%s%d-", testproc.NamePrefix(), seq)
	tp := &topo{t: t, prefix: p, hub: p + "hub", client: p + "cl"}
	for i := 0; i < 3; i++ {
		tp.nodes = append(tp.nodes, fmt.Sprintf("%sn%d", p, i+1))
	}
	// Before the first namespace exists; also run on SIGINT/SIGTERM.
	testproc.Cleanup(t, tp.destroy)
	must := func(args ...string) {
		t.Helper()
		if _, err := nsRun(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("ip", "netns", "add", tp.hub)
	must("ip", "-n", tp.hub, "link", "set", "lo", "up")
	must("ip", "-n", tp.hub, "link", "add", "name", "br0", "type", "bridge")
	must("ip", "-n", tp.hub, "link", "set", "br0", "up")
	attach := func(ns, ip, port string) {
		must("ip", "netns", "add", ns)
		must("ip", "-n", ns, "link", "set", "lo", "up")
		must("ip", "-n", tp.hub, "link", "add", "name", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		must("ip", "-n", tp.hub, "link", "set", port, "master", "br0")
		must("ip", "-n", tp.hub, "link", "set", port, "up")
		must("ip", "-n", ns, "addr", "add", ip+"/24", "dev", "eth0")
		must("ip", "-n", ns, "link", "set", "eth0", "up")
	}
	for i, ns := range tp.nodes {
		attach(ns, nodeIP(i), fmt.Sprintf("v-n%d", i+1))
	}
	attach(tp.client, clientIP, "v-cl")
	d, err := newNSDialer(tp.client, 8)
	if err != nil {
		t.Fatal(err)
	}
	tp.dial = d
	// The bridge forwards once its ports are up: wait until the client reaches
	// an address on every node (a refused connection proves the path).
	for i := range tp.nodes {
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := tp.dial.DialContext(context.Background(), "tcp", nodeIP(i)+":1")
			if c != nil {
				c.Close()
			}
			if err == nil || strings.Contains(err.Error(), "refused") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("client cannot reach %s: %v", nodeIP(i), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return tp
}

func (tp *topo) destroy() {
	if tp.dial != nil {
		tp.dial.close()
	}
	for _, ns := range append(append([]string{tp.client}, tp.nodes...), tp.hub) {
		// Our processes were killed by their own cleanups (registered later,
		// so run earlier); anything left in the namespace is ours too.
		killNetnsPids(ns)
		nsRun("ip", "netns", "del", ns)
	}
}

// iptables runs iptables inside node i's namespace.
func (tp *topo) iptables(i int, args ...string) error {
	_, err := nsRun(append([]string{"ip", "netns", "exec", tp.nodes[i], "iptables", "-w"}, args...)...)
	return err
}

// isolateRaft drops, in node i's namespace, every packet to or from the raft
// port of the given peers, both directions; intake and admin stay reachable.
func (tp *topo) isolateRaft(i int, peers []int) error {
	for _, p := range peers {
		for _, rule := range [][]string{
			{"INPUT", "-s", nodeIP(p), "-p", "tcp", "--dport", raftPort},
			{"INPUT", "-s", nodeIP(p), "-p", "tcp", "--sport", raftPort},
			{"OUTPUT", "-d", nodeIP(p), "-p", "tcp", "--dport", raftPort},
			{"OUTPUT", "-d", nodeIP(p), "-p", "tcp", "--sport", raftPort},
		} {
			if err := tp.iptables(i, append([]string{"-A"}, append(rule, "-j", "DROP")...)...); err != nil {
				return err
			}
		}
	}
	return nil
}

// blockInbound drops, in node i's namespace, the packets of connections that
// peer p opens to i's raft port (p cannot reach i), while i can still open
// connections to p: a one-way (asymmetric) partition.
func (tp *topo) blockInbound(i, p int) error {
	return tp.iptables(i, "-A", "INPUT", "-s", nodeIP(p), "-p", "tcp", "--dport", raftPort, "-j", "DROP")
}

func (tp *topo) heal(i int) error {
	return tp.iptables(i, "-F")
}

// nsDialer opens TCP connections from inside a network namespace. A socket
// belongs to the namespace of the thread that created it, so each worker is a
// goroutine locked to an OS thread that entered the namespace with setns; the
// connection it returns is used from any goroutine. The workers never unlock:
// their threads end with them.
type nsDialer struct {
	reqs   chan dialReq
	closed chan struct{} // closed by close: a dial after it fails, never panics
	wg     sync.WaitGroup
	once   sync.Once
}

type dialReq struct {
	ctx     context.Context
	network string
	addr    string
	done    chan dialRes
}

type dialRes struct {
	c   net.Conn
	err error
}

func newNSDialer(ns string, workers int) (*nsDialer, error) {
	d := &nsDialer{reqs: make(chan dialReq), closed: make(chan struct{})}
	errs := make(chan error, workers)
	for i := 0; i < workers; i++ {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			runtime.LockOSThread() // never unlocked: the thread dies with us
			f, err := os.Open(filepath.Join("/var/run/netns", ns))
			if err != nil {
				errs <- err
				return
			}
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
			if err != nil {
				errs <- fmt.Errorf("setns %s: %v", ns, err)
				return
			}
			errs <- nil
			var nd net.Dialer
			nd.Timeout = 5 * time.Second
			for {
				select {
				case r := <-d.reqs:
					c, err := nd.DialContext(r.ctx, r.network, r.addr)
					r.done <- dialRes{c, err}
				case <-d.closed:
					return
				}
			}
		}()
	}
	for i := 0; i < workers; i++ {
		if err := <-errs; err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

func (d *nsDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	r := dialReq{ctx: ctx, network: network, addr: addr, done: make(chan dialRes, 1)}
	select {
	case d.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-d.closed:
		return nil, net.ErrClosed
	}
	res := <-r.done
	return res.c, res.err
}

func (d *nsDialer) close() {
	d.once.Do(func() { close(d.closed) })
	d.wg.Wait()
}

// Environment checks: the suite needs root, ip netns, and iptables (only the
// partition scenarios). Each is probed once.
var envCheck struct {
	once      sync.Once
	netnsErr  error
	iptErr    error
	iptProbed bool
}

func requireNetns(t testing.TB) {
	t.Helper()
	envCheck.once.Do(func() {
		if os.Geteuid() != 0 {
			envCheck.netnsErr = fmt.Errorf("not root (network namespaces need CAP_SYS_ADMIN)")
			return
		}
		if _, err := exec.LookPath("ip"); err != nil {
			envCheck.netnsErr = fmt.Errorf("no ip command (iproute2): %v", err)
			return
		}
		probe := testproc.NamePrefix() + "probe"
		if _, err := nsRun("ip", "netns", "add", probe); err != nil {
			envCheck.netnsErr = fmt.Errorf("ip netns add fails here: %v", err)
			return
		}
		defer nsRun("ip", "netns", "del", probe)
		if _, err := nsRun("ip", "-n", probe, "link", "add", "name", "vprobe0", "type", "veth", "peer", "name", "vprobe1"); err != nil {
			envCheck.netnsErr = fmt.Errorf("veth pairs unavailable: %v", err)
			return
		}
		if _, err := nsRun("ip", "-n", probe, "link", "add", "name", "br0", "type", "bridge"); err != nil {
			envCheck.netnsErr = fmt.Errorf("bridges unavailable: %v", err)
			return
		}
		envCheck.iptErr = probeIptables(probe)
		envCheck.iptProbed = true
	})
	if envCheck.netnsErr != nil {
		t.Skipf("chaos: skipped: %v", envCheck.netnsErr)
	}
}

// probeIptables finds iptables, installing it with apt-get when it is missing
// (.ci/run installs it; this covers a developer machine), and checks that a
// rule can be added inside a namespace.
func probeIptables(ns string) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		if _, aerr := exec.LookPath("apt-get"); aerr != nil {
			return fmt.Errorf("iptables not installed and no apt-get")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-q", "iptables")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("iptables not installed and apt-get install failed: %v: %s", err, lastLines(string(out), 3))
		}
		if _, err := exec.LookPath("iptables"); err != nil {
			return fmt.Errorf("iptables still missing after apt-get install")
		}
	}
	if _, err := nsRun("ip", "netns", "exec", ns, "iptables", "-w", "-A", "INPUT", "-p", "tcp", "--dport", "1", "-j", "DROP"); err != nil {
		return fmt.Errorf("iptables cannot add a rule in a namespace (kernel lacks netfilter?): %v", err)
	}
	return nil
}

func requireIptables(t testing.TB) {
	t.Helper()
	requireNetns(t)
	if envCheck.iptErr != nil {
		t.Skipf("chaos: partition scenario skipped: %v", envCheck.iptErr)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
