package testcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"oncehook/providers"
)

// Timeouts of the lifecycle, generous for a loaded 2-core machine.
const (
	ReadyTimeout  = 30 * time.Second // exec to /readyz 200
	LeaderTimeout = 30 * time.Second // until one node says it leads
	StopTimeout   = 30 * time.Second // SIGTERM to exit
)

// Options of Start. The zero value of each field but Bin is usable.
type Options struct {
	Bin     string // the oncehook binary (Build); required
	Nodes   int    // 0 is 3
	Handler string // base URL the "orders" source forwards to (Handler + "/orders")
	// SourceExtra is raw TOML appended to the "orders" source (e.g. an order
	// guard); "" adds nothing.
	SourceExtra string
}

// Node is one process of a Cluster, on loopback ports.
type Node struct {
	ID     string
	Dir    string // data dir
	Cfg    string // config file
	Intake string // host:port
	Admin  string // host:port
	Raft   string // host:port
	Proc   *Proc  // the current process; replaced by StartNode
	Starts int
}

// Cluster is N oncehook nodes on loopback with one "orders" source (provider
// standard) forwarding to Options.Handler, short leases and backoff.
type Cluster struct {
	t      testing.TB
	bin    string
	Root   string // the directory of the configs, tokens and data dirs
	Nodes  []*Node
	Token  string // admin bearer token
	Secret string // the orders source's secret
	HTTP   *http.Client
}

// Start writes a config per node (the same peers on each), starts every
// node and waits until each is ready.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	n := o.Nodes
	if n == 0 {
		n = 3
	}
	root := t.TempDir()
	ports := FreePorts(t, 3*n)
	c := &Cluster{t: t, bin: o.Bin, Root: root, Token: "systest-admin-token-0123456789abcdef",
		HTTP: &http.Client{Timeout: 10 * time.Second}}
	var err error
	if c.Secret, err = providers.GenerateSecret("standard"); err != nil {
		t.Fatal(err)
	}
	for _, f := range [][2]string{
		{"cluster.token", "systest-cluster-token-0123456789abcdef\n"},
		{"admin.token", c.Token + "\n"},
		{"orders.secret", c.Secret + "\n"},
	} {
		if err := WriteSecret(filepath.Join(root, f[0]), f[1]); err != nil {
			t.Fatal(err)
		}
	}
	var peers []string
	for i := 0; i < n; i++ {
		peers = append(peers, fmt.Sprintf("node%d=127.0.0.1:%d", i+1, ports[3*i+2]))
	}
	for i := 0; i < n; i++ {
		nd := &Node{ID: fmt.Sprintf("node%d", i+1)}
		nd.Dir = filepath.Join(root, nd.ID)
		nd.Cfg = filepath.Join(root, nd.ID+".toml")
		nd.Intake = fmt.Sprintf("127.0.0.1:%d", ports[3*i])
		nd.Admin = fmt.Sprintf("127.0.0.1:%d", ports[3*i+1])
		nd.Raft = fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])
		cfg := NodeConfig{
			ID: nd.ID, DataDir: nd.Dir, Listen: nd.Intake,
			RaftListen: nd.Raft, Peers: peers, ClusterTokenFile: "cluster.token",
			AdminListen: nd.Admin, AdminTokenName: "systest", AdminTokenFile: "admin.token",
			Sources: []SourceConfig{{
				Name: "orders", Provider: "standard", SecretFile: "orders.secret", Forward: o.Handler + "/orders",
				Lease: "3s", ForwardTimeout: "2s", BackoffMin: "50ms", BackoffMax: "500ms",
				Extra: o.SourceExtra,
			}},
		}
		if err := cfg.Write(nd.Cfg); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, nd)
	}
	for _, nd := range c.Nodes {
		c.StartNode(nd)
	}
	for _, nd := range c.Nodes {
		c.WaitReady(nd)
	}
	return c
}

// StartNode starts nd's process (again, after a stop or kill) without
// waiting for it to be ready.
func (c *Cluster) StartNode(nd *Node) {
	c.t.Helper()
	nd.Starts++
	nd.Proc = StartProc(c.t, fmt.Sprintf("%s#%d", nd.ID, nd.Starts), c.Root, c.bin, "serve", "-config", nd.Cfg)
}

// StopNode sends SIGTERM to nd and fails the test unless it exits within
// StopTimeout.
func (c *Cluster) StopNode(nd *Node) {
	c.t.Helper()
	if !nd.Proc.Stop(StopTimeout) {
		c.t.Fatalf("%s did not stop within %s of SIGTERM", nd.ID, StopTimeout)
	}
}

// KillNode SIGKILLs nd.
func (c *Cluster) KillNode(nd *Node) { nd.Proc.Kill() }

// RestartNode stops nd, starts it again and waits until it is ready.
func (c *Cluster) RestartNode(nd *Node) {
	c.t.Helper()
	c.StopNode(nd)
	c.StartNode(nd)
	c.WaitReady(nd)
}

// WaitReady waits until nd's intake answers /readyz with 200; it fails at
// once if the process exits meanwhile.
func (c *Cluster) WaitReady(nd *Node) {
	c.t.Helper()
	err := AwaitReady(context.Background(), nd.ID, nd.Proc, ReadyTimeout, func() bool {
		return Ready(context.Background(), c.HTTP, "http://"+nd.Intake+"/readyz")
	})
	if err != nil {
		c.t.Fatalf("%v", err)
	}
}

// Get fetches url, with the admin token when auth; 0 when the request failed.
func (c *Cluster) Get(url string, auth bool) (int, []byte) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Status is the part of GET /v1/status the tests read.
type Status struct {
	NodeID       string         `json:"node_id"`
	State        string         `json:"state"`
	LeaderID     string         `json:"leader_id"`
	AppliedIndex uint64         `json:"applied_index"`
	Counts       map[string]int `json:"counts"`

	Term          uint64 `json:"term"`
	CommitIndex   uint64 `json:"commit_index"`
	LeaderChanges uint64 `json:"leader_changes"`
	Ready         bool   `json:"ready"`
}

// Status reads nd's admin status; false when it does not answer.
func (c *Cluster) Status(nd *Node) (Status, bool) {
	st, err := FetchStatus(context.Background(), c.HTTP, "http://"+nd.Admin, c.Token)
	return st, err == nil
}

// Leader waits up to LeaderTimeout for a running node that says it leads.
func (c *Cluster) Leader() *Node {
	c.t.Helper()
	var l *Node
	WaitFor(c.t, "a leader", LeaderTimeout, func() bool {
		for _, nd := range c.Nodes {
			if !nd.Proc.Running() {
				continue
			}
			if st, ok := c.Status(nd); ok && st.State == "leader" {
				l = nd
				return true
			}
		}
		return false
	})
	return l
}

// Other returns the first node that is none of not.
func (c *Cluster) Other(not ...*Node) *Node {
	c.t.Helper()
	for _, nd := range c.Nodes {
		if !slices.Contains(not, nd) {
			return nd
		}
	}
	c.t.Fatal("no other node")
	return nil
}
