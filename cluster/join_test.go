package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// wipe stops nodes[i] and deletes its data dir, as an operator replacing a
// machine's disk does, and returns its configuration to start it again.
func wipe(t *testing.T, nodes []*Node, i int) Config {
	t.Helper()
	cfg := nodes[i].cfg
	if err := nodes[i].Close(); err != nil {
		t.Fatal(err)
	}
	nodes[i] = nil
	if err := os.RemoveAll(cfg.Dir); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// members lists the ids of n's raft configuration.
func members(t *testing.T, n *Node) []string {
	t.Helper()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		ids = append(ids, string(s.ID))
	}
	return ids
}

// TestJoinRefusedOnAStandaloneNode: a node without a cluster port adds no
// member (it could never reach one, and a second voter would take its
// quorum for good); it stays a cluster of one that commits.
func TestJoinRefusedOnAStandaloneNode(t *testing.T) {
	n := openSolo(t, t.TempDir(), nil)
	defer n.Close()
	for _, addr := range []string{"127.0.0.1:41999", "notanaddress"} {
		_, err := n.Join(ctxT(t, 5*time.Second), "node5", addr)
		if !errors.Is(err, ErrStandalone) {
			t.Errorf("join %s on a standalone node: %v, want ErrStandalone", addr, err)
		}
	}
	if got := members(t, n); len(got) != 1 || got[0] != "solo" {
		t.Fatalf("members after the refused joins: %v, want [solo]", got)
	}
	if res, err := n.Claim(ctxT(t, 5*time.Second), claimCmd("src:after-join")); err != nil || !res.Created {
		t.Fatalf("claim after the refused joins: %+v %v", res, err)
	}
}

// TestJoinChecksTheMember: a join naming an id the configuration would
// refuse, an address that is not one, or a node that does not answer there
// as that id is refused with ErrBadMember, on the leader and through a
// follower, and the configuration keeps its three members.
func TestJoinChecksTheMember(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	leader := leaderOf(t, nodes)
	follower := (leader + 1) % 3
	waitFor(t, "the follower knows the leader", func() bool { ok, _ := nodes[follower].Ready(); return ok })
	dead := freePort(t) // nothing behind it
	other := nodes[(leader+2)%3]
	cases := []struct{ name, id, addr string }{
		{"id with a space", "x y", dead},
		{"id too long", string(make([]byte, 65)), dead},
		{"address without a port", "node5", "notanaddress"},
		{"port out of range", "node5", "127.0.0.1:70000"},
		{"port zero", "node5", "127.0.0.1:0"},
		{"wildcard", "node5", "0.0.0.0:7070"},
		{"nothing listening", "node5", dead},
		{"a member under another id", "node5", other.cfg.Bind},
	}
	for _, tc := range cases {
		for _, via := range []int{leader, follower} {
			_, err := nodes[via].Join(ctxT(t, 10*time.Second), tc.id, tc.addr)
			if !errors.Is(err, ErrBadMember) {
				t.Errorf("%s via node %d: %v, want ErrBadMember", tc.name, via, err)
			}
		}
	}
	if got := members(t, nodes[leader]); len(got) != 3 {
		t.Fatalf("members after the refused joins: %v, want the three", got)
	}
	if res, err := nodes[follower].Claim(ctxT(t, 5*time.Second), claimCmd("src:after-join")); err != nil || !res.Created {
		t.Fatalf("claim after the refused joins: %+v %v", res, err)
	}
	// A running node asked for again under its own id and address is
	// accepted (TestJoinOfALiveMemberChangesNothing).
	waitFor(t, "the member knows the cluster's id", func() bool { return other.clusterID() != "" })
	if _, err := nodes[follower].Join(ctxT(t, 20*time.Second), other.cfg.ID, other.cfg.Bind); err != nil {
		t.Fatalf("re-adding %s: %v", other.cfg.ID, err)
	}
	waitFor(t, "three voters again", func() bool {
		f := nodes[leader].raft.GetConfiguration()
		if f.Error() != nil {
			return false
		}
		voters := 0
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
		return voters == 3
	})
}

// TestJoinOfTheLeaderItself: a join naming the leader at its own address
// changes nothing (removing it to add it again would end its leadership
// halfway and leave it out), at another address it is refused; the
// cluster keeps its three voters and commits.
func TestJoinOfTheLeaderItself(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	leader := leaderOf(t, nodes)
	follower := (leader + 1) % 3
	waitFor(t, "the follower knows the leader", func() bool { ok, _ := nodes[follower].Ready(); return ok })
	l := nodes[leader]
	if added, err := nodes[follower].Join(ctxT(t, 10*time.Second), l.cfg.ID, l.cfg.Bind); err != nil || added {
		t.Fatalf("join of the leader at its address: added %v, %v; want nothing to do, and said so", added, err)
	}
	if _, err := nodes[follower].Join(ctxT(t, 10*time.Second), l.cfg.ID, freePort(t)); !errors.Is(err, ErrBadMember) {
		t.Fatalf("join of the leader at another address: %v, want ErrBadMember", err)
	}
	if !l.IsLeader() || len(members(t, l)) != 3 {
		t.Fatalf("after the joins: leader %v, members %v", l.IsLeader(), members(t, l))
	}
	if res, err := nodes[follower].Claim(ctxT(t, 5*time.Second), claimCmd("src:after-join")); err != nil || !res.Created {
		t.Fatalf("claim after the joins: %+v %v", res, err)
	}
}

// TestJoinOfAnotherClustersNode: a node that holds a cluster of its own is
// refused (its log would be overwritten while its engine kept the other
// cluster's events), and both clusters keep their events.
func TestJoinOfAnotherClustersNode(t *testing.T) {
	a := tcpCluster(t, 1, nil)
	b := tcpCluster(t, 1, func(_ int, cfg *Config) {
		cfg.ID = "w2"
		cfg.Peers = []Peer{{ID: "w2", Addr: cfg.Bind}}
	})
	leaderOf(t, a)
	leaderOf(t, b)
	if _, err := a[0].Claim(ctxT(t, 5*time.Second), claimCmd("src:a1")); err != nil {
		t.Fatal(err)
	}
	if _, err := b[0].Claim(ctxT(t, 5*time.Second), claimCmd("src:b1")); err != nil {
		t.Fatal(err)
	}
	_, err := a[0].Join(ctxT(t, 10*time.Second), "w2", b[0].cfg.Bind)
	if !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), "belongs to another cluster") {
		t.Fatalf("join of another cluster's node: %v, want ErrBadMember naming another cluster", err)
	}
	if got := members(t, a[0]); len(got) != 1 {
		t.Fatalf("members after the refused join: %v", got)
	}
	if _, ok, _ := b[0].Lookup("src:b1"); !ok {
		t.Fatal("the other cluster's event is gone")
	}
}

// TestRefusedRejoinDoesNotBootstrap: a node whose data dir was wiped asks
// the running cluster to add it back; when the leader refuses (here it
// cannot reach the address the node advertises), the node does not start
// a cluster of its own (it would vote again in terms it may have voted in,
// beside a cluster that still counts it): it stops with the reason, and
// the cluster keeps it as a voter.
func TestRefusedRejoinDoesNotBootstrap(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	leader := leaderOf(t, nodes)
	f := (leader + 1) % 3
	cfg := wipe(t, nodes, f)
	cfg.Advertise = freePort(t) // the leader's probe finds nothing there
	n, err := Open(cfg)
	if err == nil {
		n.Close()
		t.Fatal("a wiped node the cluster refused started anyway")
	}
	if !strings.Contains(err.Error(), "refused to add this node") || !strings.Contains(err.Error(), "Not starting a cluster of its own") {
		t.Fatalf("open: %v, want the refusal and no cluster of its own", err)
	}
	if got := members(t, nodes[leader]); len(got) != 3 || !slices.Contains(got, cfg.ID) {
		t.Fatalf("members after the refused rejoin: %v, want %s still among three", got, cfg.ID)
	}
	// Started again as it should be, it rejoins.
	cfg.Advertise = cfg.Bind
	if nodes[f], err = Open(cfg); err != nil {
		t.Fatalf("rejoin with the right address: %v", err)
	}
	waitFor(t, "the rejoined node holds the cluster's state", func() bool {
		ok, _ := nodes[f].Ready()
		return ok
	})
}

// configIndex is the log index of n's latest configuration.
func configIndex(t *testing.T, n *Node) uint64 {
	t.Helper()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	return f.Index()
}

// threeWithOneDown starts three TCP nodes and stops one follower; it
// returns the nodes (the stopped one nil), the leader's index and the
// running follower's, once that follower knows the leader and the
// cluster's id.
func threeWithOneDown(t *testing.T) (nodes []*Node, leader, f int) {
	t.Helper()
	nodes = tcpCluster(t, 3, nil)
	leader = leaderOf(t, nodes)
	f, g := (leader+1)%3, (leader+2)%3
	waitFor(t, "the follower knows the leader and the cluster's id", func() bool {
		ok, _ := nodes[f].Ready()
		return ok && nodes[f].clusterID() != ""
	})
	if err := nodes[g].Close(); err != nil {
		t.Fatal(err)
	}
	nodes[g] = nil
	return nodes, leader, f
}

// TestJoinOfALiveMemberChangesNothing: a join naming a running voter, with
// its history, at its own address (an operator's retry) leaves the
// configuration as it is. Removed to be added back, it would be out of the
// quorum meanwhile: with another voter down, the removal alone would stop
// every commit and leave it out.
func TestJoinOfALiveMemberChangesNothing(t *testing.T) {
	nodes, leader, f := threeWithOneDown(t)
	before := configIndex(t, nodes[leader])
	for _, via := range []int{leader, f} {
		if added, err := nodes[via].Join(ctxT(t, 20*time.Second), nodes[f].cfg.ID, nodes[f].cfg.Bind); err != nil || added {
			t.Fatalf("join of a live member via node %d: added %v, %v; want a member already", via, added, err)
		}
	}
	if after := configIndex(t, nodes[leader]); after != before {
		t.Fatalf("configuration moved from index %d to %d: the member was removed and added", before, after)
	}
	if got := members(t, nodes[leader]); len(got) != 3 {
		t.Fatalf("members after the joins: %v", got)
	}
	if res, err := nodes[f].Claim(ctxT(t, 5*time.Second), claimCmd("src:after-join")); err != nil || !res.Created {
		t.Fatalf("claim after the joins with a voter down: %+v %v", res, err)
	}
}

// TestJoinOfALiveMemberAtANewAddress: a join naming a running voter, with
// its history, by another spelling of its address (an operator recording a
// member by name) moves its address in place: with another voter down, a
// removal first would leave a configuration without a majority up and stop
// every commit. The cluster keeps committing, and the voter is reached at
// the new address.
func TestJoinOfALiveMemberAtANewAddress(t *testing.T) {
	nodes, leader, f := threeWithOneDown(t)
	_, port, err := net.SplitHostPort(nodes[f].cfg.Bind)
	if err != nil {
		t.Fatal(err)
	}
	named := net.JoinHostPort("localhost", port)
	if added, err := nodes[leader].Join(ctxT(t, 20*time.Second), nodes[f].cfg.ID, named); err != nil || !added {
		t.Fatalf("join of a live member at %s: added %v, %v", named, added, err)
	}
	conf := nodes[leader].raft.GetConfiguration()
	if err := conf.Error(); err != nil {
		t.Fatal(err)
	}
	var at []string
	for _, s := range conf.Configuration().Servers {
		if s.ID == raft.ServerID(nodes[f].cfg.ID) {
			at = append(at, string(s.Address))
		}
	}
	if len(at) != 1 || at[0] != named {
		t.Fatalf("%s in the configuration at %v, want [%s]", nodes[f].cfg.ID, at, named)
	}
	for _, via := range []int{leader, f} {
		if res, err := nodes[via].Claim(ctxT(t, 10*time.Second), claimCmd(fmt.Sprintf("src:after-%d", via))); err != nil || !res.Created {
			t.Fatalf("claim via node %d after the address moved, a voter down: %+v %v", via, res, err)
		}
	}
}

// TestJoinOfAnotherClusterWithTheSameIDs: two clusters whose members share
// ids (both have t1) differ in their cluster id; a node of the other
// cluster is refused although its member list names this cluster's leader,
// and both clusters keep their own events.
func TestJoinOfAnotherClusterWithTheSameIDs(t *testing.T) {
	a := tcpCluster(t, 1, nil)
	b := tcpCluster(t, 2, nil)
	la, lb := leaderOf(t, a), leaderOf(t, b)
	other := b[1] // t2, whose members name t1, as this cluster's leader is
	waitFor(t, "both clusters named, the other one on its follower too", func() bool {
		return a[la].clusterID() != "" && b[lb].clusterID() != "" && other.clusterID() == b[lb].clusterID()
	})
	if a[la].clusterID() == b[lb].clusterID() {
		t.Fatalf("two clusters named alike: %s", a[la].clusterID())
	}
	if _, err := b[lb].Claim(ctxT(t, 5*time.Second), claimCmd("src:b1")); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(members(t, other), a[la].cfg.ID) {
		t.Fatalf("the other cluster's members %v lack %s: the test would not reach the id check", members(t, other), a[la].cfg.ID)
	}
	_, err := a[la].Join(ctxT(t, 10*time.Second), other.cfg.ID, other.cfg.Bind)
	if !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), "another cluster (id "+other.clusterID()) {
		t.Fatalf("join of a node of another cluster with the same ids: %v, want ErrBadMember naming its cluster id", err)
	}
	if got := members(t, a[la]); len(got) != 1 {
		t.Fatalf("members after the refused join: %v", got)
	}
	waitFor(t, "the other cluster's event on its follower", func() bool {
		_, ok, _ := other.Lookup("src:b1")
		return ok
	})
}

// TestClusterStatusNamesTheCluster: every member reports the one cluster
// id, and a member caught up from the leader after its data was wiped
// takes it too.
func TestClusterStatusNamesTheCluster(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	leader := leaderOf(t, nodes)
	var id string
	waitFor(t, "every member named alike", func() bool {
		id = nodes[leader].clusterID()
		for _, n := range nodes {
			if n.clusterID() != id || id == "" {
				return false
			}
		}
		return true
	})
	if st := nodes[leader].Status(); st.ClusterID != id {
		t.Fatalf("status cluster id %q, want %q", st.ClusterID, id)
	}
	f := (leader + 1) % 3
	cfg := wipe(t, nodes, f)
	var err error
	if nodes[f], err = Open(cfg); err != nil {
		t.Fatalf("rejoin of the wiped node: %v", err)
	}
	waitFor(t, "the wiped node takes the cluster's id", func() bool { return nodes[f].clusterID() == id })
}

// TestRejoinWithoutAnAnswerDoesNotBootstrap: a wiped node whose peers take
// its request to be added back but never answer (their processes stopped,
// or a leader still at work on the change) does not start a cluster of its
// own: the leader may have removed it already and be about to add it back.
// It asks again until its patience ends, then stops with the reason;
// started again once the peers answer, it rejoins.
func TestRejoinWithoutAnAnswerDoesNotBootstrap(t *testing.T) {
	freezers := make([]*freezer, 3)
	nodes := tcpCluster(t, 3, func(i int, cfg *Config) {
		freezers[i] = newFreezer()
		cfg.wrapConn = freezers[i].wrap
	})
	t.Cleanup(func() {
		for _, f := range freezers {
			f.thaw()
		}
	})
	leader := leaderOf(t, nodes)
	f := (leader + 1) % 3
	waitFor(t, "the follower knows the leader", func() bool { ok, _ := nodes[f].Ready(); return ok })
	cfg := wipe(t, nodes, f)
	for i := range nodes {
		if i != f {
			freezers[i].freeze()
		}
	}
	cfg.wrapConn = nil
	cfg.rejoinPatience = time.Second
	n, err := Open(cfg)
	if err == nil {
		n.Close()
		t.Fatal("a wiped node whose peers never answered started a cluster of its own")
	}
	if !strings.Contains(err.Error(), "did not confirm") || !strings.Contains(err.Error(), "Not starting a cluster of its own") {
		t.Fatalf("open: %v, want no confirmation and no cluster of its own", err)
	}
	for _, fr := range freezers {
		fr.thaw()
	}
	if nodes[f], err = Open(cfg); err != nil {
		t.Fatalf("rejoin once the peers answer: %v", err)
	}
	waitFor(t, "the rejoined node holds the cluster's state", func() bool {
		ok, _ := nodes[f].Ready()
		return ok
	})
	// The join sent while the peers were frozen reaches the leader after
	// the thaw too, and removes the node and adds it back once more: wait
	// for the last of them.
	waitFor(t, "the rejoined node a member", func() bool {
		got := members(t, nodes[leader])
		return len(got) == 3 && slices.Contains(got, cfg.ID)
	})
}

// TestJoinOfAnUnnamedClustersNode: a node with history but no cluster id
// (a cluster of an older release, or not led since its upgrade) whose
// members share this cluster's ids is refused: nothing tells its history
// from another cluster's.
func TestJoinOfAnUnnamedClustersNode(t *testing.T) {
	a := tcpCluster(t, 1, nil)
	b := tcpCluster(t, 2, func(_ int, cfg *Config) { cfg.unnamed = true })
	la := leaderOf(t, a)
	leaderOf(t, b)
	waitFor(t, "this cluster named", func() bool { return a[la].clusterID() != "" })
	if _, err := b[0].Claim(ctxT(t, 5*time.Second), claimCmd("src:b1")); err != nil {
		t.Fatal(err)
	}
	_, err := a[la].Join(ctxT(t, 10*time.Second), b[1].cfg.ID, b[1].cfg.Bind)
	if !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), "no cluster id") {
		t.Fatalf("join of an unnamed cluster's node: %v, want ErrBadMember saying it has no cluster id", err)
	}
	if got := members(t, a[la]); len(got) != 1 {
		t.Fatalf("members after the refused join: %v", got)
	}
}

// TestWipedNodeWaitsForASurvivorWithoutQuorum: two of three nodes are down
// and one of them comes back with an empty data dir. The survivor knows no
// leader (it lost its quorum) but holds the cluster's history; the wiped
// node must not bootstrap beside it (two such nodes would form a second
// majority of the configuration and acknowledge events the survivor never
// sees). It waits, gives the survivor its vote once the third has been
// silent for the vote guard's grace (voteguard.go), and is added back by it:
// the configuration changes, and the event acknowledged before is there.
func TestWipedNodeWaitsForASurvivorWithoutQuorum(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	leader := leaderOf(t, nodes)
	if _, err := nodes[leader].Claim(ctxT(t, 5*time.Second), claimCmd("src:before")); err != nil {
		t.Fatal(err)
	}
	f, g := (leader+1)%3, (leader+2)%3
	waitFor(t, "every member named alike", func() bool {
		id := nodes[leader].clusterID()
		return id != "" && nodes[f].clusterID() == id && nodes[g].clusterID() == id
	})
	id := nodes[leader].clusterID()
	if err := nodes[g].Close(); err != nil {
		t.Fatal(err)
	}
	nodes[g] = nil
	cfg := wipe(t, nodes, f)
	waitFor(t, "the survivor knows no leader", func() bool {
		addr, _ := nodes[leader].raft.LeaderWithID()
		return addr == ""
	})
	cfg.rejoinPatience = 20 * time.Second
	cfg.voteGraceFor = 2 * time.Second
	var out lockedBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&out, nil))
	var err error
	if nodes[f], err = Open(cfg); err != nil {
		t.Fatalf("open of the wiped node: %v", err)
	}
	if !strings.Contains(out.String(), "joined the running cluster") {
		t.Fatalf("the wiped node did not join the survivor's cluster; its log:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "votes released without hearing from every peer") {
		t.Errorf("the wiped node did not say it voted without hearing from the silent peer; its log:\n%s", out.String())
	}
	waitFor(t, "the wiped node holds the survivor's state", func() bool {
		_, ok, _ := nodes[f].Lookup("src:before")
		return ok && nodes[f].clusterID() == id
	})
	// It stayed a voter: removed, it would have left a configuration of
	// the survivor and a node that is down, and nothing would commit.
	if got := members(t, nodes[leader]); len(got) != 3 {
		t.Fatalf("members: %v, want the three", got)
	}
	if res, err := nodes[f].Claim(ctxT(t, 10*time.Second), claimCmd("src:after")); err != nil || !res.Created {
		t.Fatalf("claim through the wiped node with one voter down: %+v %v", res, err)
	}
}

// TestFollowerOfAnotherClustersLeaderIsNotReady: a follower whose cluster
// id differs from its leader's (its engine applied another cluster's
// entries) says so on its readiness, with the remedy; the same check
// against its own leader clears it.
func TestFollowerOfAnotherClustersLeaderIsNotReady(t *testing.T) {
	a := tcpCluster(t, 2, nil)
	b := tcpCluster(t, 1, func(_ int, cfg *Config) { cfg.ID = "w1"; cfg.Peers = []Peer{{ID: "w1", Addr: cfg.Bind}} })
	la, lb := leaderOf(t, a), leaderOf(t, b)
	f := a[(la+1)%2]
	waitFor(t, "both clusters named", func() bool {
		return f.clusterID() != "" && f.clusterID() == a[la].clusterID() && b[lb].clusterID() != ""
	})
	waitFor(t, "the follower ready", func() bool { ok, _ := f.Ready(); return ok })
	f.checkLeaderIdentity(ctxT(t, 5*time.Second), b[lb].cfg.Bind)
	ok, why := f.Ready()
	if ok || !strings.Contains(why, "belongs to cluster "+f.clusterID()) || !strings.Contains(why, b[lb].clusterID()) || !strings.Contains(why, "empty its data dir") {
		t.Fatalf("ready after meeting another cluster's leader: %v %q", ok, why)
	}
	f.checkLeaderIdentity(ctxT(t, 5*time.Second), a[la].cfg.Bind)
	if ok, why := f.Ready(); !ok {
		t.Fatalf("ready after its own leader: %v %q", ok, why)
	}
}

// TestJoinOfAnOlderBinary: a node whose binary reads an older data format
// than the cluster's state is refused, naming both formats: added, it
// could install no snapshot and apply no entry, a voter that never catches
// up.
func TestJoinOfAnOlderBinary(t *testing.T) {
	a := tcpCluster(t, 1, nil)
	b := tcpCluster(t, 1, func(_ int, cfg *Config) {
		cfg.ID = "w2"
		cfg.Peers = []Peer{{ID: "w2", Addr: cfg.Bind}}
		cfg.format = engine.FormatVersion - 1
	})
	leaderOf(t, a)
	leaderOf(t, b)
	_, err := a[0].Join(ctxT(t, 10*time.Second), "w2", b[0].cfg.Bind)
	want := fmt.Sprintf("runs data format %d and this cluster's state is format %d", engine.FormatVersion-1, engine.FormatVersion)
	if !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), want) {
		t.Fatalf("join of an older binary: %v, want ErrBadMember with %q", err, want)
	}
	if got := members(t, a[0]); len(got) != 1 {
		t.Fatalf("members after the refused join: %v", got)
	}
}

// TestRejoinWhilePeersAreBusy: a new node whose peers answer that their
// cap of unproved connections from its address is full (something on its
// host holds them) learns nothing of its credentials nor of a cluster: it
// asks again for its patience, then stops without a cluster of its own,
// saying the peers were busy, not that they refused its token.
func TestRejoinWhilePeersAreBusy(t *testing.T) {
	var peers []Peer
	for i := range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		t.Cleanup(func() { ln.Close(); wg.Wait() })
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				wg.Go(func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(5 * time.Second))
					c.Read(make([]byte, 512)) // the hello
					c.Write(busyAnswer[:])
				})
			}
		})
		peers = append(peers, Peer{ID: fmt.Sprintf("busy%d", i+1), Addr: ln.Addr().String()})
	}
	bind := freePort(t)
	peers = append(peers, Peer{ID: "t4", Addr: bind})
	cfg := tcpNodeConfig("t4", filepath.Join(t.TempDir(), "t4"), bind, peers)
	cfg.rejoinPatience = time.Second
	n, err := Open(cfg)
	if err == nil {
		n.Close()
		t.Fatal("a node whose peers were all busy started a cluster of its own")
	}
	if !errors.Is(err, ErrPeerBusy) || errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "Not starting a cluster of its own") {
		t.Fatalf("open: %v, want ErrPeerBusy, not ErrUnauthorized, and no cluster of its own", err)
	}
}

// TestJoinOfANodeSlowToAnswerIsNoRefusal: a node whose cluster port takes
// the leader's connection but answers after the leader's check gave up (a
// node starting on a busy host: most often the one that asked to be added)
// is not refused as a member that cannot be: the join fails with an error
// the node asks again on, never ErrBadMember, which ends its start.
func TestJoinOfANodeSlowToAnswerIsNoRefusal(t *testing.T) {
	nodes := tcpCluster(t, 3, nil)
	leader := leaderOf(t, nodes)
	follower := (leader + 1) % 3
	waitFor(t, "the follower knows the leader", func() bool { ok, _ := nodes[follower].Ready(); return ok })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	t.Cleanup(func() { ln.Close(); held.Wait() })
	held.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept() // taken, never answered
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	})
	for _, via := range []int{leader, follower} {
		_, err := nodes[via].Join(ctxT(t, 10*time.Second), "node5", ln.Addr().String())
		for errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) {
			// An election under load: asked again, as the operator would.
			leader = leaderOf(t, nodes)
			_, err = nodes[leader].Join(ctxT(t, 10*time.Second), "node5", ln.Addr().String())
		}
		if !errors.Is(err, ErrMemberSlow) || errors.Is(err, ErrBadMember) || strings.Contains(err.Error(), ErrBadMember.Error()) {
			t.Errorf("join of a node slow to answer via node %d: %v, want ErrMemberSlow to ask again on, not ErrBadMember", via, err)
		}
	}
	if got := members(t, nodes[leader]); len(got) != 3 {
		t.Fatalf("members after the joins: %v, want the three", got)
	}

	// A node that shakes hands but answers the stats request late: the
	// check's deadline and its close of the connection race, and either
	// way it is slow, not bad. Its own id at its own address: were it not
	// slow, nothing would change.
	leader = leaderOf(t, nodes)
	slow := nodes[(leader+1)%3]
	slow.statsDelay.Store(int64(memberStatsTimeout + time.Second))
	defer slow.statsDelay.Store(0)
	for range 5 {
		_, err := nodes[leader].Join(ctxT(t, 10*time.Second), slow.cfg.ID, slow.cfg.Advertise)
		if !errors.Is(err, ErrMemberSlow) || strings.Contains(err.Error(), ErrBadMember.Error()) {
			t.Fatalf("join of a member slow to answer its stats: %v, want ErrMemberSlow", err)
		}
	}
}
