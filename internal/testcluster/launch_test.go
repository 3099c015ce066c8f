package testcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAwait: Await returns once the condition holds, returns the
// condition's own error, names what it waited for on timeout (wrapping
// ErrTimeout), and stops when its context ends.
func TestAwait(t *testing.T) {
	boom := errors.New("boom")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		timeout time.Duration
		cond    func(n int) (bool, error)
		want    string // "" no error
		is      error
	}{
		{"holds on the third poll", context.Background(), time.Minute, func(n int) (bool, error) { return n == 3, nil }, "", nil},
		{"the condition's error", context.Background(), time.Minute, func(int) (bool, error) { return false, boom }, "boom", boom},
		{"timeout", context.Background(), 50 * time.Millisecond, func(int) (bool, error) { return false, nil },
			"timed out after 50ms waiting for the thing", ErrTimeout},
		{"context ended", cancelled, 0, func(int) (bool, error) { return false, nil },
			"waiting for the thing: context canceled", context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := Await(tc.ctx, "the thing", tc.timeout, func() (bool, error) { n++; return tc.cond(n) })
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tc.want || !errors.Is(err, tc.is) {
				t.Fatalf("got %v, want %q (is %v)", err, tc.want, tc.is)
			}
		})
	}
}

// TestLaunchSpec: Wrap goes before Argv, Env reaches the process, a Log file
// collects the output of every process started with it, and Output and Tail
// read it back; without Log the output is kept in memory.
func TestLaunchSpec(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "node.log")
	run := func(s Spec) *Proc {
		t.Helper()
		p, err := Launch(s)
		if err != nil {
			t.Fatal(err)
		}
		<-p.Done()
		return p
	}
	// Wrap runs the command under env(1), which sets a variable of its own.
	run(Spec{Name: "first", Wrap: []string{"env", "WRAPPED=yes"}, Env: []string{"EXTRA=1"}, Log: log,
		Argv: []string{"sh", "-c", `echo "first $WRAPPED $EXTRA"`}})
	p := run(Spec{Name: "second", Dir: dir, Log: log, Argv: []string{"sh", "-c", `echo "second $(pwd)"`}})
	if got, want := p.Output(), "first yes 1\nsecond "+dir+"\n"; got != want {
		t.Fatalf("log %q, want %q", got, want)
	}
	if fi, err := os.Stat(log); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("log file: %v %v", fi, err)
	}
	if got := p.Tail(1); got != "second "+dir {
		t.Fatalf("tail %q", got)
	}
	m := run(Spec{Name: "mem", Argv: []string{"sh", "-c", "echo in memory; exit 3"}})
	if m.Output() != "in memory\n" || m.ExitCode() != 3 {
		t.Fatalf("in memory: %q, exit %d", m.Output(), m.ExitCode())
	}
	if _, err := Launch(Spec{Name: "nothing"}); err == nil {
		t.Fatal("launched no command")
	}
}

// TestTail: the last n lines, or n lines from a panic on.
func TestTail(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"a\nb\nc\nd\n", "c\nd"},
		{"a\n", "a"},
		{"a\npanic: boom\n\ngoroutine 1\nmain.go:3\nexit\n", "panic: boom\n"},
		{"x\nfatal error: concurrent map writes\ny\nz\n", "fatal error: concurrent map writes\ny"},
	} {
		p := &Proc{out: &lockedBuffer{}}
		p.out.Write([]byte(tc.out))
		if got := p.Tail(2); got != tc.want {
			t.Errorf("Tail(2) of %q = %q, want %q", tc.out, got, tc.want)
		}
	}
}

// TestStopDump: a process that ends on SIGTERM stops cleanly; one that
// ignores it gets SIGQUIT (and writes what a Go program would dump there).
func TestStopDump(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		clean  bool
		out    string // the last line
	}{
		{"ends on SIGTERM", `trap 'echo term; exit 0' TERM; echo up; while :; do sleep 0.05; done`, true, "term"},
		{"ignores SIGTERM", `trap '' TERM; trap 'echo quit; exit 2' QUIT; echo up; while :; do sleep 0.05; done`, false, "quit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := StartSpec(t, Spec{Name: tc.name, Argv: []string{"sh", "-c", tc.script}})
			WaitFor(t, "the traps set", 10*time.Second, func() bool { return strings.HasPrefix(p.Output(), "up\n") })
			if clean := p.StopDump(200*time.Millisecond, 10*time.Second); clean != tc.clean {
				t.Fatalf("clean stop %v, want %v; output %q", clean, tc.clean, p.Output())
			}
			// The shell's own sleep is in the group too; its death may be
			// reported before the trap's line.
			if p.Running() || p.Tail(1) != tc.out {
				t.Fatalf("running %v, output %q, want it to end with %q", p.Running(), p.Output(), tc.out)
			}
		})
	}
}

// TestAgreedLeader: the leader is the node that says it leads and that a
// majority names; a lone claim, a split view or silence is no leader.
func TestAgreedLeader(t *testing.T) {
	st := func(id, state, leader string) *Status { return &Status{NodeID: id, State: state, LeaderID: leader} }
	for _, tc := range []struct {
		name string
		sts  []*Status
		want int
	}{
		{"all agree", []*Status{st("n1", "follower", "n2"), st("n2", "leader", "n2"), st("n3", "follower", "n2")}, 1},
		{"one silent", []*Status{nil, st("n2", "follower", "n3"), st("n3", "leader", "n3")}, 2},
		{"a stale leader alone", []*Status{st("n1", "leader", "n1"), st("n2", "follower", "n3"), st("n3", "leader", "n3")}, 2},
		{"nobody follows", []*Status{st("n1", "leader", "n1"), st("n2", "candidate", ""), st("n3", "candidate", "")}, -1},
		{"all silent", []*Status{nil, nil, nil}, -1},
		{"single node", []*Status{st("solo", "leader", "solo")}, 0},
	} {
		if got := AgreedLeader(tc.sts); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestClusterExtra: ClusterExtra lands inside [cluster], before [admin].
func TestClusterExtra(t *testing.T) {
	cfg := NodeConfig{ID: "n1", RaftListen: "127.0.0.1:1", ClusterExtra: "tls_cert = \"c.pem\"\n", AdminListen: "127.0.0.1:2"}.TOML()
	c, a, x := strings.Index(cfg, "[cluster]"), strings.Index(cfg, "[admin]"), strings.Index(cfg, "tls_cert = \"c.pem\"\n")
	if c < 0 || x < c || x > a {
		t.Fatalf("ClusterExtra outside [cluster]:\n%s", cfg)
	}
	if strings.Contains(NodeConfig{ID: "n1", ClusterExtra: "tls_cert = 1"}.TOML(), "tls_cert") {
		t.Fatal("ClusterExtra without [cluster]")
	}
}

// TestReservePortsBelowEphemeral: reserved ports are distinct, free and, when
// the kernel's ephemeral range leaves room, below it (no outgoing connection
// can take them as its source port while a node is down).
func TestReservePortsBelowEphemeral(t *testing.T) {
	ports, err := ReservePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := fixedPortRange()
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d reserved twice", p)
		}
		seen[p] = true
		if hi > lo && (p < lo || p >= hi) {
			t.Errorf("port %d outside [%d, %d)", p, lo, hi)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Errorf("port %d not free after ReservePorts: %v", p, err)
			continue
		}
		ln.Close()
	}
}
