package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"oncehook/engine"
)

// TestClusterStatusReportsEveryMember: the leader (and a follower) report
// every member of the configuration with the member's own role, term and
// indexes; after a write every member's commit and applied indexes reach the
// write's index and are equal; a member cut off is reported unknown, with why.
func TestClusterStatusReportsEveryMember(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	if _, err := c.nodes[leader].Claim(ctxT(t, 5*time.Second), claimCmd("src:evt_status")); err != nil {
		t.Fatal(err)
	}
	written := c.nodes[leader].raft.AppliedIndex()

	check := func(from int) (last string) {
		st := c.nodes[from].ClusterStatus(ctxT(t, 5*time.Second))
		if len(st.Nodes) != 3 {
			return fmt.Sprintf("%d members, want 3: %+v", len(st.Nodes), st.Nodes)
		}
		roles := map[string]int{}
		for i, s := range st.Nodes {
			if s.ID != c.ids[i] || s.Address != c.ids[i] || s.Suffrage != "Voter" {
				return fmt.Sprintf("member %d: %+v", i, s)
			}
			if s.Error != "" || s.Term == 0 || s.LastContact == "" || s.LastContact == "never" {
				return fmt.Sprintf("member %s: %+v", s.ID, s)
			}
			if s.Format != engine.FormatVersion { // what a rolling upgrade's status shows
				return fmt.Sprintf("member %s: format %d, want %d", s.ID, s.Format, engine.FormatVersion)
			}
			if s.CommitIndex < written || s.AppliedIndex != s.CommitIndex {
				return fmt.Sprintf("member %s: commit %d applied %d, want both >= %d and equal", s.ID, s.CommitIndex, s.AppliedIndex, written)
			}
			roles[s.Role]++
			if (s.ID == c.ids[leader]) != (s.Role == "leader") || (s.Role == "leader") != (s.State == "leader") {
				return fmt.Sprintf("member %s: role %s, state %s; leader is %s", s.ID, s.Role, s.State, c.ids[leader])
			}
			if s.Role == "leader" && s.LastContact != "0s" {
				return fmt.Sprintf("leader's last contact %q, want 0s", s.LastContact)
			}
		}
		if roles["leader"] != 1 || roles["follower"] != 2 {
			return fmt.Sprintf("roles %v, want one leader and two followers", roles)
		}
		return ""
	}
	for _, from := range []int{leader, c.follower(leader)} {
		var why string
		deadline := time.Now().Add(10 * time.Second)
		for why = check(from); why != "" && time.Now().Before(deadline); why = check(from) {
			time.Sleep(20 * time.Millisecond)
		}
		if why != "" {
			t.Fatalf("status from %s: %s", c.ids[from], why)
		}
	}

	// A member the leader cannot reach stays listed, as unknown, with why.
	cut := c.follower(leader)
	c.partition(cut)
	st := c.nodes[leader].ClusterStatus(ctxT(t, 5*time.Second))
	if len(st.Nodes) != 3 {
		t.Fatalf("%d members while %s is cut off, want 3", len(st.Nodes), c.ids[cut])
	}
	for _, s := range st.Nodes {
		if s.ID == c.ids[cut] && (s.Role != "unknown" || s.Error == "") {
			t.Fatalf("cut-off member %s reported as %+v", s.ID, s)
		}
		if s.ID != c.ids[cut] && s.Error != "" {
			t.Fatalf("member %s: %s", s.ID, s.Error)
		}
	}
	c.heal()
	c.waitConverged()
}

// TestStatusWithoutALeaderNamesOwnRole: a node that knows no leader (cut
// off, or the cluster lost its quorum) cannot tell the others' roles, but
// knows its own: itself is listed as follower or candidate, the others as
// unknown.
func TestStatusWithoutALeaderNamesOwnRole(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	leader := c.waitLeader(-1)
	cut := c.follower(leader)
	c.partition(cut)
	defer func() { c.heal(); c.waitConverged() }()
	n := c.nodes[cut]
	waitFor(t, "the cut-off node to lose its leader", func() bool { _, id := n.raft.LeaderWithID(); return id == "" })
	st := n.Status()
	if len(st.Nodes) != 3 {
		t.Fatalf("%d members, want 3", len(st.Nodes))
	}
	for _, s := range st.Nodes {
		switch {
		case s.ID == n.cfg.ID && s.State != "follower" && s.State != "candidate":
			t.Errorf("itself listed as %q, want its own role (follower or candidate)", s.State)
		case s.ID != n.cfg.ID && s.State != "unknown":
			t.Errorf("member %s listed as %q, want unknown without a leader", s.ID, s.State)
		}
	}
}

// TestLeaderChangesCountedOnEveryNode: Status.LeaderChanges counts the
// leaders a node has seen, on followers too, not only its own elections:
// after a hand-over every member's count has grown.
func TestLeaderChangesCountedOnEveryNode(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.waitLeader(-1)
	for i, n := range c.nodes {
		waitFor(t, fmt.Sprintf("node %d to count the first leader", i), func() bool { return n.Status().LeaderChanges >= 1 })
	}
	before := make([]uint64, len(c.nodes))
	for i, n := range c.nodes {
		before[i] = n.Status().LeaderChanges
	}
	fi := c.follower(li)
	if _, err := c.nodes[li].TransferLeadership(ctxT(t, 30e9), c.nodes[fi].cfg.ID); err != nil {
		t.Fatal(err)
	}
	c.waitLeader(li)
	for i, n := range c.nodes {
		waitFor(t, fmt.Sprintf("node %d to count the new leader", i), func() bool { return n.Status().LeaderChanges > before[i] })
	}
}

// TestLeaderWatchCountsAReelection: a leader that steps down and wins the
// next election is counted again (its deliveries in flight are repeated as
// after any change), whether or not the watch saw the moment without a
// leader; a leader seen again in its own term is not.
func TestLeaderWatchCountsAReelection(t *testing.T) {
	type view struct {
		id   raft.ServerID
		term uint64
	}
	steps := []struct {
		view
		want uint64
	}{
		{view{"", 1}, 0},
		{view{"n2", 2}, 1},
		{view{"n2", 2}, 1}, // read again: the same leadership
		{view{"", 2}, 1},   // stepped down
		{view{"n2", 3}, 2}, // and elected again
		{view{"n2", 4}, 3}, // a re-election the watch saw no gap in
		{view{"n1", 5}, 4},
		{view{"", 5}, 4},
		{view{"n1", 5}, 4}, // a dropped and regained contact in the same term
	}
	var cur view
	w := newLeaderWatch(func() (raft.ServerAddress, raft.ServerID) { return raft.ServerAddress(cur.id), cur.id },
		func() uint64 { return cur.term })
	for i, st := range steps {
		cur = st.view
		w.current()
		if got := w.leaderChanges(); got != st.want {
			t.Errorf("step %d (%v): %d leader changes, want %d", i, st.view, got, st.want)
		}
	}
}

// TestLeaderWatchElectionBetweenItsReads: an election that lands between
// the watch's read of the term and its read of the leader (raft clears the
// leader, takes the new term, then sets the new leader) counts once.
func TestLeaderWatchElectionBetweenItsReads(t *testing.T) {
	term, id := uint64(4), raft.ServerID("n2")
	var between func()
	w := newLeaderWatch(func() (raft.ServerAddress, raft.ServerID) {
		if between != nil {
			between()
			between = nil
		}
		return raft.ServerAddress(id), id
	}, func() uint64 { return term })
	w.current()
	between = func() { term, id = 5, "n3" }
	w.current()
	w.current()
	if got := w.leaderChanges(); got != 2 {
		t.Fatalf("n2 (term 4), then n3 (term 5): %d leader changes, want 2", got)
	}
}

// TestStatusAppliedIndexAfterARestart: a node restarted while cut off from
// the leader shows the index its persistent state was applied to, not the 0
// raft counts from until a leader tells it the commit index.
func TestStatusAppliedIndexAfterARestart(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	for i := range 5 {
		c.mustClaim(fmt.Sprintf("src:r%d", i), -1)
	}
	c.waitConverged()
	li := c.waitLeader(-1)
	fi := c.follower(li)
	applied := c.nodes[fi].eng.LastApplied()
	if applied == 0 {
		t.Fatal("the follower applied nothing")
	}
	c.partition(fi)
	if err := c.nodes[fi].Close(); err != nil {
		t.Fatal(err)
	}
	c.set(fi, nil)
	n := c.open(fi, nil, nil)
	c.set(fi, n)
	if got := n.Status().AppliedIndex; got < applied {
		t.Fatalf("status after the restart shows applied %d, want at least %d (raft says %d)", got, applied, n.raft.AppliedIndex())
	}
}

// TestLeaderCountsUnreachablePeers: with one member of three cut off, the
// cluster still commits and nothing else says it is one failure from
// stopping; the leader's status counts the member its heartbeats do not
// reach, and forgets it once they do again. Followers report none.
func TestLeaderCountsUnreachablePeers(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.waitLeader(-1)
	fi := c.follower(li)
	if got := c.nodes[li].Status().Unreachable; got != 0 {
		t.Fatalf("healthy cluster: leader reports %d unreachable", got)
	}
	// Whichever node leads (a loaded machine may move leadership) counts
	// the member it cannot reach; no other node counts any.
	leaderReports := func(want int) func() bool {
		return func() bool {
			found := false
			for _, n := range c.nodes {
				st := n.Status()
				switch {
				case st.State == "leader" && st.Unreachable == want:
					found = true
				case st.State != "leader" && st.Unreachable != 0:
					t.Errorf("%s, a %s, reports %d unreachable", st.NodeID, st.State, st.Unreachable)
				}
			}
			return found
		}
	}
	c.partition(fi)
	waitFor(t, "the leader to count the cut-off member", leaderReports(1))
	c.mustClaim("src:still-commits", fi)
	c.heal()
	waitFor(t, "the leader to see the member again", leaderReports(0))
}

func TestPeerReachForgetsOldFailures(t *testing.T) {
	var p peerReach
	t0 := time.Unix(1000, 0)
	servers := []raft.Server{{ID: "a"}, {ID: "b"}}
	p.observe(raft.FailedHeartbeatObservation{PeerID: "a"}, t0)
	p.observe(raft.FailedHeartbeatObservation{PeerID: "gone"}, t0) // no longer a member
	if got := p.unreachable(servers, t0.Add(time.Second)); got != 1 {
		t.Errorf("one failing member: %d", got)
	}
	if got := p.unreachable(servers, t0.Add(peerReachWindow)); got != 0 {
		t.Errorf("a failure a window old still counts: %d", got)
	}
	p.observe(raft.FailedHeartbeatObservation{PeerID: "b"}, t0)
	p.observe(raft.ResumedHeartbeatObservation{PeerID: "b"}, t0)
	p.reset()
	if got := p.unreachable(servers, t0); got != 0 {
		t.Errorf("after a resume and a reset: %d", got)
	}
}
