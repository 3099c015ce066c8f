package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"oncehook/engine"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testCluster is N real nodes (real engines on real files, real raft) joined
// by raft.InmemTransport, with partition and heal helpers.
type testCluster struct {
	t     testing.TB
	dir   string
	mu    sync.Mutex
	nodes []*Node
	trans []*raft.InmemTransport
	ids   []string
	cut   map[[2]string]bool // pairs of addresses that cannot talk
	clock *testClock
	lead  [](func(context.Context))
}

type testClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestCluster starts n nodes with identical bootstrap peers and waits for a leader.
func newTestCluster(t testing.TB, n int, tune func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dir: t.TempDir(), cut: map[[2]string]bool{}, clock: &testClock{}}
	var peers []Peer
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("n%d", i+1)
		_, tr := raft.NewInmemTransport(raft.ServerAddress(id))
		c.trans = append(c.trans, tr)
		c.ids = append(c.ids, id)
		peers = append(peers, Peer{ID: id, Addr: id})
	}
	c.connectAll()
	c.nodes = make([]*Node, n)
	c.lead = make([]func(context.Context), n)
	for i := range c.ids {
		c.set(i, c.open(i, peers, tune))
	}
	t.Cleanup(c.close)
	c.waitLeader(-1)
	return c
}

func (c *testCluster) config(i int, peers []Peer, tune func(*Config)) Config {
	cfg := Config{
		ID:                 c.ids[i],
		Dir:                filepath.Join(c.dir, c.ids[i]),
		Peers:              peers,
		Transport:          c.trans[i],
		Logger:             quietLogger(),
		RaftLogLevel:       "error",
		Now:                c.clock.now,
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 300 * time.Millisecond,
		CommitTimeout:      2 * time.Millisecond,
		NoSync:             true,
		inproc:             c.inproc(c.ids[i]),
		answering:          func(n *Node) { c.set(i, n) },
		noTransfer:         true,
	}
	if f := c.lead[i]; f != nil {
		cfg.OnLeader = f
	}
	if tune != nil {
		tune(&cfg)
	}
	return cfg
}

func (c *testCluster) open(i int, peers []Peer, tune func(*Config)) *Node {
	c.t.Helper()
	n, err := Open(c.config(i, peers, tune))
	if err != nil {
		c.t.Fatalf("open %s: %v", c.ids[i], err)
	}
	return n
}

// openSolo opens (or reopens) a single-node cluster "solo" on its own
// transport in dir, with short timeouts and tune's changes, and waits until
// it leads and has applied its log.
func openSolo(t testing.TB, dir string, tune func(*Config)) *Node {
	t.Helper()
	cfg := Config{ID: "solo", Dir: dir, Logger: quietLogger(), RaftLogLevel: "error",
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond}
	if tune != nil {
		tune(&cfg)
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "single node leads", n.IsLeader)
	if err := n.Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	return n
}

// inproc returns node from's view of the internal channel: a partition cuts it too.
func (c *testCluster) inproc(from string) func(string) *Node {
	return func(addr string) *Node {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.cut[[2]string{from, addr}] {
			return nil
		}
		for i, id := range c.ids {
			if id == addr && c.nodes[i] != nil {
				return c.nodes[i]
			}
		}
		return nil
	}
}

// peers lists every node of the cluster, as a node started again is told.
func (c *testCluster) peers() []Peer {
	var ps []Peer
	for _, id := range c.ids {
		ps = append(ps, Peer{ID: id, Addr: id})
	}
	return ps
}

// set puts n at position i (nil: closed). The nodes' own goroutines look
// nodes up through inproc, under mu.
func (c *testCluster) set(i int, n *Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[i] = n
}

func (c *testCluster) connectAll() {
	for i, a := range c.trans {
		for j, b := range c.trans {
			if i != j {
				a.Connect(raft.ServerAddress(c.ids[j]), b)
			}
		}
	}
}

// partition cuts node i off from every other node, both ways.
func (c *testCluster) partition(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for j := range c.trans {
		if j == i {
			continue
		}
		c.trans[i].Disconnect(raft.ServerAddress(c.ids[j]))
		c.trans[j].Disconnect(raft.ServerAddress(c.ids[i]))
		c.cut[[2]string{c.ids[i], c.ids[j]}] = true
		c.cut[[2]string{c.ids[j], c.ids[i]}] = true
	}
}

func (c *testCluster) heal() {
	c.mu.Lock()
	c.cut = map[[2]string]bool{}
	c.mu.Unlock()
	c.connectAll()
}

func (c *testCluster) close() {
	// The leader goes first, so its leadership transfer finds a live peer
	// (a transfer to a closed in-memory peer blocks for the RPC timeout).
	for i, n := range c.nodes {
		if n != nil && n.IsLeader() {
			if err := n.Close(); err != nil {
				c.t.Errorf("close %s: %v", c.ids[i], err)
			}
			c.set(i, nil)
			// Let the transfer finish: the old leader's TimeoutNow call waits
			// for the target's answer, and the target must still be running.
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				led := false
				for _, m := range c.nodes {
					if m != nil && m.IsLeader() {
						led = true
					}
				}
				if led {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	for i, n := range c.nodes {
		if n != nil {
			if err := n.Close(); err != nil {
				c.t.Errorf("close %s: %v", c.ids[i], err)
			}
		}
	}
	for _, tr := range c.trans {
		tr.Close()
	}
}

// waitLeader waits for a leader other than node `not` (-1: any) that every
// connected node agrees on, and returns its position.
func (c *testCluster) waitLeader(not int) int {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range c.nodes {
			// Named: the leader's first entry of its own is behind it,
			// and counts of entries start from a quiet log.
			if n != nil && i != not && n.IsLeader() && n.clusterID() != "" {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no leader within 10s")
	return -1
}

// waitKnowsLeader waits until node i has heard from the leader li.
func (c *testCluster) waitKnowsLeader(i, li int) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, id := c.nodes[i].raft.LeaderWithID(); string(id) == c.nodes[li].cfg.ID {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("node %d did not hear from leader %d within 10s", i, li)
}

func (c *testCluster) follower(leader int) int {
	for i, n := range c.nodes {
		if n != nil && i != leader {
			return i
		}
	}
	c.t.Fatal("no follower")
	return -1
}

// waitConverged waits until every listed node has applied the same index and
// returns their hashes, which must then be equal.
func (c *testCluster) waitConverged(nodes ...int) {
	c.t.Helper()
	if len(nodes) == 0 {
		for i := range c.nodes {
			nodes = append(nodes, i)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		hashes := map[[32]byte][]string{}
		applied := map[uint64]bool{}
		for _, i := range nodes {
			n := c.nodes[i]
			applied[n.eng.LastApplied()] = true
			h, err := n.Hash()
			if err != nil {
				c.t.Fatalf("hash %s: %v", c.ids[i], err)
			}
			hashes[h] = append(hashes[h], c.ids[i])
		}
		if len(hashes) == 1 && len(applied) == 1 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("replicas did not converge: %d distinct hashes %v, applied %v", len(hashes), hashes, applied)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mustClaim commits a claim of key through whichever node leads, never node
// `not` (-1: any), and returns that node. Like a provider it sends again when
// the outcome is unknown or there is no leader: on a loaded machine a 300 ms
// election timeout can move leadership in the middle of a test.
func (c *testCluster) mustClaim(key string, not int) int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := c.waitLeader(not)
		_, err := c.nodes[l].Claim(ctxT(c.t, 5*time.Second), claimCmd(key))
		if err == nil {
			return l
		}
		retry := errors.Is(err, ErrIndeterminate) || errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader)
		if !retry || time.Now().After(deadline) {
			c.t.Fatalf("claim %s on %s: %v", key, c.ids[l], err)
		}
	}
}

// claimThrough commits a claim of key through node n, sending it again, as
// a provider does on a 503, while the answer is that there is no leader or
// its outcome is unknown: on a loaded machine a 300 ms election timeout can
// move leadership under any claim, and a test that is not about elections
// must not fail on one. Each send has its own deadline; created is whether
// any send created the event.
func claimThrough(t testing.TB, n *Node, key string) (created bool) {
	t.Helper()
	_, created = sendThrough(t, n, claimCmd(key))
	return created
}

// sendThrough is claimThrough for any claim command: it returns the answer
// of the send that committed, and whether any send created the event.
func sendThrough(t testing.TB, n *Node, cmd engine.Command) (res engine.Result, created bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := n.Claim(ctxT(t, 5*time.Second), cmd)
		if err == nil {
			return res, created || res.Created
		}
		retry := errors.Is(err, ErrIndeterminate) || errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader)
		if !retry || time.Now().After(deadline) {
			t.Fatalf("claim %s through %s: %v", cmd.Key, n.cfg.ID, err)
		}
		created = created || errors.Is(err, ErrIndeterminate) // it may have been committed
		time.Sleep(20 * time.Millisecond)
	}
}

func claimCmd(key string) engine.Command {
	return engine.Command{Op: engine.OpClaim, Key: key, Source: "src", Payload: []byte(`{"id":"` + key + `"}`), Retention: int64(time.Hour), LeaseFor: int64(30 * time.Second)}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// bareFSM is an fsm over a fresh engine file and no raft, for feeding it
// log entries by hand; a fatal error fails the test.
func bareFSM(t *testing.T) *fsm {
	t.Helper()
	eng, err := engine.Open(filepath.Join(t.TempDir(), "fsm.db"), engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return &fsm{eng: eng, fatal: func(err error) { t.Errorf("fatal: %v", err) }}
}
