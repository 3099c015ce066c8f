package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// wipedLeader is the start of the wiped-member tests: a cluster of three
// whose leader (l) commits keys with one follower (up) while the other
// (lag) is down; then up and l stop too, and l's data dir is wiped. Every
// node is down when it returns.
type wipedLeader struct {
	c          *testCluster
	l, up, lag int
	keys       []string
	dir        string // l's, wiped
	peers      []Peer
}

func newWipedLeader(t *testing.T) *wipedLeader {
	c := newTestCluster(t, 3, nil)
	l := c.waitLeader(-1)
	w := &wipedLeader{c: c, l: l, up: (l + 1) % 3, lag: (l + 2) % 3, dir: c.nodes[l].cfg.Dir, peers: c.peers()}
	// The lagging node holds the first leader's entry: one that never got
	// past the bootstrap entry cannot be told from a new node, and with the
	// wiped one it would be a second failure in three.
	waitFor(t, "the lagging node holds the first leader's entry", func() bool { return c.nodes[w.lag].raft.LastIndex() > 1 })
	w.stop(t, w.lag)
	for i := range 20 {
		// Sent again on an election (a loaded machine's 300 ms timeout):
		// with lag down, whichever of l and up leads, both hold the key.
		k := fmt.Sprintf("src:acked%02d", i)
		c.mustClaim(k, -1)
		w.keys = append(w.keys, k)
	}
	w.stop(t, w.up)
	w.stop(t, l)
	if err := os.RemoveAll(w.dir); err != nil {
		t.Fatal(err)
	}
	c.connectAll()
	return w
}

func (w *wipedLeader) stop(t *testing.T, i int) {
	t.Helper()
	if err := w.c.nodes[i].Close(); err != nil {
		t.Fatal(err)
	}
	w.c.set(i, nil)
}

// holdsEverything checks that every node holds every acknowledged key.
func (w *wipedLeader) holdsEverything(t *testing.T) {
	t.Helper()
	w.c.waitConverged()
	for _, i := range []int{w.up, w.lag, w.l} {
		for _, k := range w.keys {
			if _, ok, err := w.c.nodes[i].Lookup(k); err != nil || !ok {
				t.Fatalf("%s on %s after the wiped leader came back: found %v, %v", k, w.c.ids[i], ok, err)
			}
		}
	}
}

// TestWipedMemberDoesNotElectALaggingOne: the leader commits events with
// one follower while the other is down (it lags), then that follower goes
// down too and the leader loses its data dir. The lagging follower and the
// wiped leader come back first. Raft's empty log would grant the lagging
// one its vote, and the two would make a majority that cuts the events
// from the up-to-date follower's log when it returns (acknowledged
// webhooks lost, its engine apart from the others'). The wiped node holds
// its vote until it knows how far the history reaches, so no one leads
// until the up-to-date follower is back, and it leads with every event.
func TestWipedMemberDoesNotElectALaggingOne(t *testing.T) {
	w := newWipedLeader(t)
	c, l, up, lag := w.c, w.l, w.up, w.lag
	c.set(lag, c.open(lag, w.peers, nil))
	opened := make(chan error, 1)
	go func() {
		n, err := Open(c.config(l, w.peers, func(cfg *Config) { cfg.rejoinPatience = 30 * time.Second }))
		if err == nil {
			c.set(l, n)
		}
		opened <- err
	}()
	// The lagging node asks the wiped one for its vote, again and again;
	// without the guard it would lead at once.
	waitFor(t, "the wiped node refused votes, or the lagging one leads", func() bool {
		c.mu.Lock()
		n := c.nodes[l]
		c.mu.Unlock()
		return n != nil && n.guarded != nil && n.guarded.refused.Load() >= 3 || c.nodes[lag].IsLeader()
	})
	if c.nodes[lag].IsLeader() {
		t.Fatal("the lagging follower leads with the wiped node's vote")
	}
	c.set(up, c.open(up, w.peers, nil))
	if err := <-opened; err != nil {
		t.Fatalf("open of the wiped node: %v", err)
	}
	// Whoever leads now holds every entry (the lagging one too, if the
	// old leader's appends queued in its transport reached it).
	c.waitLeader(-1)
	w.holdsEverything(t)
}

// TestFirstStartWithAPeerMissing: a new cluster of three whose third node
// has not started yet elects a leader: the two that run start afresh, a
// majority with nothing to lose, and release their votes.
func TestFirstStartWithAPeerMissing(t *testing.T) {
	c := &testCluster{t: t, dir: t.TempDir(), cut: map[[2]string]bool{}, clock: &testClock{}}
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		_, tr := raft.NewInmemTransport(raft.ServerAddress(id))
		c.trans = append(c.trans, tr)
		c.ids = append(c.ids, id)
	}
	c.connectAll()
	c.nodes = make([]*Node, 3)
	c.lead = make([]func(context.Context), 3)
	t.Cleanup(c.close)
	for i := range 2 {
		c.set(i, c.open(i, c.peers(), nil))
	}
	l := c.waitLeader(-1)
	if res, err := c.nodes[l].Claim(ctxT(t, 10*time.Second), claimCmd("src:first")); err != nil || !res.Created {
		t.Fatalf("claim with two of three started: %+v %v", res, err)
	}
	for i := range 2 {
		if held, _ := c.nodes[i].votes.state(); held {
			t.Errorf("%s still holds its votes", c.ids[i])
		}
	}
}

// TestWipedMemberRestartedStillGuardsItsVote: as above, but the wiped node
// starts while both peers are down (nobody to ask: it bootstraps, and raft
// then holds a state for it) and is restarted before any peer answered. Its
// one-entry log would vote for the lagging follower; the guard's marker,
// written before raft's first write, arms it again, and it is removed only
// once the node's log reaches what its peers hold.
func TestWipedMemberRestartedStillGuardsItsVote(t *testing.T) {
	w := newWipedLeader(t)
	c, l, up, lag := w.c, w.l, w.up, w.lag
	c.set(l, c.open(l, w.peers, nil)) // alone: it bootstraps
	w.stop(t, l)
	marker := filepath.Join(w.dir, votesHeldFile)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the vote guard's marker after a start that released nothing: %v", err)
	}
	c.connectAll()
	c.set(l, c.open(l, w.peers, nil))
	if c.nodes[l].guarded == nil {
		t.Fatal("the restarted node, its log one bootstrap entry, guards no vote")
	}
	c.set(lag, c.open(lag, w.peers, nil))
	waitFor(t, "the wiped node refused votes, or the lagging one leads", func() bool {
		return c.nodes[l].guarded.refused.Load() >= 3 || c.nodes[lag].IsLeader()
	})
	if c.nodes[lag].IsLeader() {
		t.Fatal("the lagging follower leads with the restarted wiped node's vote")
	}
	c.set(up, c.open(up, w.peers, nil))
	// Whoever leads now holds every entry (the lagging one too, if the
	// old leader's appends queued in its transport reached it).
	c.waitLeader(-1)
	w.holdsEverything(t)
	waitFor(t, "the marker removed once the node caught up", func() bool {
		_, err := os.Stat(marker)
		return errors.Is(err, fs.ErrNotExist)
	})
	// Caught up, raft's own rule covers what the guard did: every request
	// goes to raft (a stranger's too, which raft answers with its term).
	if c.nodes[l].votes.refuses(logPos{}) {
		t.Error("the guard still answers votes itself once the node caught up")
	}
}

// TestVoteGuardRefuses: held, the guard refuses every candidate; released,
// one whose log is less up-to-date than the floor by raft's order (last
// term first: a longer log of an older term is less up-to-date), and a
// guarded transport answers such a request itself, not granted, in the
// candidate's term, passing the others to raft.
func TestVoteGuardRefuses(t *testing.T) {
	g := newVoteGuard()
	if !g.refuses(logPos{99, 99}) {
		t.Fatal("a held guard granted a vote")
	}
	g.set(false, logPos{term: 5, index: 100}, 0)
	for _, c := range []struct {
		cand    logPos
		refused bool
	}{
		{logPos{5, 100}, false},
		{logPos{5, 101}, false},
		{logPos{6, 3}, false},
		{logPos{5, 99}, true},
		{logPos{4, 500}, true}, // a deposed leader's longer, older tail
	} {
		if got := g.refuses(c.cand); got != c.refused {
			t.Errorf("candidate %+v against floor {5 100}: refused %v, want %v", c.cand, got, c.refused)
		}
	}

	// A peer of an earlier release tells only its commit index: a candidate
	// whose log ends below it lacks committed entries.
	g.set(false, logPos{}, 5000)
	if !g.refuses(logPos{7, 4000}) || g.refuses(logPos{7, 5000}) {
		t.Error("the commit index a peer told does not bound the candidates")
	}
	g.set(false, logPos{term: 5, index: 100}, 0)

	_, inner := raft.NewInmemTransport("w")
	tr := newGuardedTransport(inner, g, "w")
	defer tr.stop()
	resp := make(chan raft.RPCResponse, 1)
	low := &raft.RequestVoteRequest{Term: 7, LastLogTerm: 4, LastLogIndex: 500}
	if !tr.answered(raft.RPC{Command: low, RespChan: resp}) {
		t.Fatal("a vote below the floor went to raft")
	}
	r := (<-resp).Response.(*raft.RequestVoteResponse)
	if r.Granted || r.Term != 7 {
		t.Errorf("refusal %+v: want not granted, in the candidate's term 7", r)
	}
	pre := &raft.RequestPreVoteRequest{Term: 7, LastLogTerm: 5, LastLogIndex: 99}
	if !tr.answered(raft.RPC{Command: pre, RespChan: resp}) {
		t.Fatal("a pre-vote below the floor went to raft")
	}
	if r := (<-resp).Response.(*raft.RequestPreVoteResponse); r.Granted {
		t.Errorf("pre-vote refusal granted: %+v", r)
	}
	ok := &raft.RequestVoteRequest{Term: 7, LastLogTerm: 5, LastLogIndex: 100}
	if tr.answered(raft.RPC{Command: ok, RespChan: resp}) {
		t.Error("a vote at the floor was answered by the guard, not raft")
	}
	if tr.answered(raft.RPC{Command: &raft.AppendEntriesRequest{}, RespChan: resp}) {
		t.Error("an append was answered by the guard")
	}
	if _, ok := tr.forRaft().(raft.WithPreVote); !ok {
		t.Error("the guard over a transport with pre-vote hides it")
	}
	if tr.refused.Load() != 2 {
		t.Errorf("%d refusals counted, want 2", tr.refused.Load())
	}
}

// TestMarkerWithStalePeersAsksTheMembers: a follower whose data dir holds
// the vote guard's marker starts again with a peers list naming none of the
// live members (the list is read at a first start; its members were
// replaced since). It asks the members of its own raft configuration too,
// so the live member holding every entry is elected, the third being down.
func TestMarkerWithStalePeersAsksTheMembers(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.waitLeader(-1)
	f := c.follower(l)
	o := 3 - l - f
	c.partition(f)
	for i := range 5 {
		l = c.mustClaim(fmt.Sprintf("src:k%d", i), f)
	}
	dir := c.nodes[f].cfg.Dir
	if err := c.nodes[f].Close(); err != nil {
		t.Fatal(err)
	}
	c.set(f, nil)
	if err := writeDurably(filepath.Join(dir, votesHeldFile), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[l].Close(); err != nil {
		t.Fatal(err)
	}
	c.set(l, nil)
	c.heal()
	stale := []Peer{{ID: c.ids[f], Addr: c.ids[f]}, {ID: "old1", Addr: "old1"}, {ID: "old2", Addr: "old2"}}
	c.set(f, c.open(f, stale, func(cfg *Config) { cfg.voteGraceFor = 500 * time.Millisecond }))
	if c.nodes[f].guarded == nil {
		t.Fatal("the marker did not arm the guard")
	}
	waitFor(t, "the member with every entry leads", c.nodes[o].IsLeader)
}

// TestRemovedNodeStopsWatchingVotes: a wiped node that rejoins and is
// removed before its log caught up stops asking its former peers (every
// 200 ms, a dial each over TCP) once it was told for the grace that it is no
// member (a rejoin's removal, added back at once, does not end the watch).
func TestRemovedNodeStopsWatchingVotes(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	l := c.waitLeader(-1)
	f := c.follower(l)
	dir := c.nodes[f].cfg.Dir
	if err := c.nodes[f].Close(); err != nil {
		t.Fatal(err)
	}
	c.set(f, nil)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	// Raft cannot reach f (the internal channel can): it rejoins, but its
	// log does not catch up before it is removed.
	for j := range c.trans {
		if j != f {
			c.trans[f].Disconnect(raft.ServerAddress(c.ids[j]))
			c.trans[j].Disconnect(raft.ServerAddress(c.ids[f]))
		}
	}
	n := c.open(f, c.peers(), func(cfg *Config) { cfg.voteGraceFor = time.Second })
	c.set(f, n)
	waitFor(t, "the rejoined node released its votes", func() bool { held, _ := n.votes.state(); return !held })
	l = c.waitLeader(f)
	if err := c.nodes[l].raft.RemoveServer(raft.ServerID(c.ids[f]), 0, 0).Error(); err != nil {
		t.Fatal(err)
	}
	c.connectAll()
	waitFor(t, "the removed node's vote watch ends", func() bool {
		select {
		case <-n.votesDone:
			return true
		default:
			return false
		}
	})
}

// TestMemberHoldsHistory: what a peer's stats answer says of its past, on
// which a node with no data decides whether the peers start afresh (its
// vote, its bootstrap). A follower restarted before it learned its leader's
// commit reports commit 0 and, its engine behind, no cluster id: its log
// past the bootstrap entry is history all the same, or a wiped node and it
// make a majority that starts afresh and cut acknowledged entries.
func TestMemberHoldsHistory(t *testing.T) {
	for _, c := range []struct {
		name string
		ms   memberStats
		want bool
	}{
		{"a new node", memberStats{}, false},
		{"a new node that bootstrapped", memberStats{LastLogTerm: 1, LastLogIndex: 1, CommitIndex: 1}, false},
		{"an older release, new", memberStats{CommitIndex: 1}, false},
		{"a cluster id", memberStats{Cluster: "c0ffee"}, true},
		{"a commit past the bootstrap", memberStats{CommitIndex: 2}, true},
		{"a restarted follower that learned no commit yet", memberStats{LastLogTerm: 2, LastLogIndex: 25}, true},
		{"a log of a later term", memberStats{LastLogTerm: 2, LastLogIndex: 1}, true},
	} {
		if got := c.ms.holdsHistory(); got != c.want {
			t.Errorf("%s (%+v): holds history %v, want %v", c.name, c.ms, got, c.want)
		}
	}
}
