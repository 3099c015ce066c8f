package testcluster

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"oncehook/config"
	"oncehook/providers"
)

// The fork thread of package testproc lives as long as the process, by
// design (see its doc).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("oncehook/internal/testproc.onForkThread.func1.1"))
}

// TestNodeConfigLoads: what NodeConfig writes is a config oncehook accepts,
// with the values given, for a cluster node and a single node.
func TestNodeConfigLoads(t *testing.T) {
	dir := t.TempDir()
	secret, err := providers.GenerateSecret("standard")
	if err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"cluster.token": "token-0123456789abcdef0123456789abcdef", "admin.token": "token-0123456789abcdef0123456789abcdef", "orders.secret": secret} {
		if err := WriteSecret(filepath.Join(dir, f), v+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	src := SourceConfig{Name: "orders", Provider: "standard", SecretFile: "orders.secret",
		Forward: "http://127.0.0.1:9/orders", Lease: "3s", ForwardTimeout: "2s",
		BackoffMin: "50ms", BackoffMax: "500ms", MaxAttempts: 100}
	for _, tc := range []struct {
		name  string
		cfg   NodeConfig
		peers int
	}{
		{"cluster node", NodeConfig{ID: "node2", DataDir: filepath.Join(dir, "d2"), Listen: "127.0.0.1:18080",
			RaftListen: "127.0.0.1:17070", Advertise: "127.0.0.1:17070",
			Peers:            []string{"node1=127.0.0.1:17060", "node2=127.0.0.1:17070", "node3=127.0.0.1:17080"},
			ClusterTokenFile: "cluster.token", AdminListen: "127.0.0.1:17071", AdminTokenFile: "admin.token",
			Sources: []SourceConfig{src}}, 3},
		{"single node", NodeConfig{ID: "solo", DataDir: filepath.Join(dir, "d1"), Listen: "127.0.0.1:18081",
			AdminListen: "127.0.0.1:17072", AdminTokenFile: "admin.token", LogLevel: "debug",
			Sources: []SourceConfig{{Name: "orders", Provider: "standard", SecretFile: "orders.secret", Forward: "http://127.0.0.1:9/orders"}}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.cfg.ID+".toml")
			if err := tc.cfg.Write(path); err != nil {
				t.Fatal(err)
			}
			c, err := config.Load(path)
			if err != nil {
				t.Fatalf("%v\n%s", err, tc.cfg.TOML())
			}
			if c.Node.ID != tc.cfg.ID || c.Node.Listen != tc.cfg.Listen || c.Admin.Listen != tc.cfg.AdminListen {
				t.Errorf("node %+v admin %q", c.Node, c.Admin.Listen)
			}
			if got := 0; c.Cluster != nil {
				got = len(c.Cluster.Peers)
				if got != tc.peers {
					t.Errorf("%d peers, want %d", got, tc.peers)
				}
			} else if tc.peers != 0 {
				t.Errorf("no [cluster]")
			}
			if len(c.Sources) != 1 || c.Sources[0].Name != "orders" || c.Sources[0].Forward != "http://127.0.0.1:9/orders" {
				t.Fatalf("sources %v", c.Sources)
			}
			if tc.cfg.Sources[0].MaxAttempts > 0 && (c.Sources[0].MaxAttempts != 100 || time.Duration(c.Sources[0].Lease) != 3*time.Second) {
				t.Errorf("source tuning lost: max_attempts %d lease %v", c.Sources[0].MaxAttempts, c.Sources[0].Lease)
			}
		})
	}
}

// fatalTB records Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// TestWaitFor: WaitFor returns once the condition holds, and fails naming
// what it waited for when it never does.
func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, "the third poll", time.Minute, func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times", n)
	}

	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitFor(f, "the impossible", 50*time.Millisecond, func() bool { return false })
	}()
	<-done
	if want := "timed out after 50ms waiting for the impossible"; f.msg != want {
		t.Fatalf("got %q, want %q", f.msg, want)
	}
}

func TestFreePortsDistinct(t *testing.T) {
	seen := map[int]bool{}
	for _, p := range FreePorts(t, 20) {
		if seen[p] {
			t.Fatalf("port %d twice", p)
		}
		seen[p] = true
	}
}
