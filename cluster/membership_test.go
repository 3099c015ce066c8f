package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestRemovedWhileDownLearnsIt: a member removed while it was down never
// receives the entry that removes it (the leader replicates nothing to a
// server it no longer has). Started again with its data, it learns its
// removal from the others, and its readiness says so instead of waiting for
// a quorum forever.
func TestRemovedWhileDownLearnsIt(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.waitLeader(-1)
	fi := c.follower(li)
	c.waitKnowsLeader(fi, li)
	id := c.nodes[fi].cfg.ID
	if err := c.nodes[fi].Close(); err != nil {
		t.Fatal(err)
	}
	c.set(fi, nil)
	li = c.waitLeader(fi)
	// The leader's last try to send it the removal comes after a backoff, and
	// would reach it if it were up by then: the link between the two stays
	// cut, so only the other member can tell it.
	c.cutPair(li, fi)
	if err := c.nodes[li].RemovePeer(ctxT(t, 30*time.Second), id); err != nil {
		t.Fatalf("remove %s: %v", id, err)
	}

	n := c.open(fi, c.peers(), nil)
	c.set(fi, n)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, why := n.Ready()
		if !ok && strings.Contains(why, "removed, says "+c.ids[3-li-fi]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the removed node's readiness: %v %q, want not ready, removed (says a member)", ok, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n.IsLeader() {
		t.Fatalf("the removed node leads")
	}
	// A claim sent to it is refused saying why (waiting for a leader, it
	// would end in the wait's error instead).
	if _, err := n.Claim(ctxT(t, 10*time.Second), claimCmd("src:to-a-removed-node")); !errors.Is(err, ErrRemoved) || !errors.Is(err, ErrNoLeader) {
		t.Fatalf("claim on the removed node: %v, want ErrRemoved (an ErrNoLeader)", err)
	}
}

// cutPair cuts nodes i and j off from each other, both ways, the raft
// transport and the internal channel; their links to the others stay.
func (c *testCluster) cutPair(i, j int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trans[i].Disconnect(raft.ServerAddress(c.ids[j]))
	c.trans[j].Disconnect(raft.ServerAddress(c.ids[i]))
	c.cut[[2]string{c.ids[i], c.ids[j]}] = true
	c.cut[[2]string{c.ids[j], c.ids[i]}] = true
}
