package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

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
	c := newTestCluster(t, 3, nil)
	l := c.waitLeader(-1)
	up, lag := (l+1)%3, (l+2)%3
	peers := c.peers()
	stop := func(i int) {
		t.Helper()
		if err := c.nodes[i].Close(); err != nil {
			t.Fatal(err)
		}
		c.set(i, nil)
	}
	stop(lag)
	ctx := ctxT(t, 10*time.Second)
	var keys []string
	for i := range 20 {
		k := fmt.Sprintf("src:acked%02d", i)
		if res, err := c.nodes[l].Claim(ctx, claimCmd(k)); err != nil || !res.Created {
			t.Fatalf("claim %s: %+v %v", k, res, err)
		}
		keys = append(keys, k)
	}
	stop(up)
	wiped := c.nodes[l].cfg.Dir
	stop(l)
	if err := os.RemoveAll(wiped); err != nil {
		t.Fatal(err)
	}
	c.connectAll()

	c.set(lag, c.open(lag, peers, nil))
	opened := make(chan error, 1)
	go func() {
		n, err := Open(c.config(l, peers, func(cfg *Config) { cfg.rejoinPatience = 30 * time.Second }))
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
	c.set(up, c.open(up, peers, nil))
	if err := <-opened; err != nil {
		t.Fatalf("open of the wiped node: %v", err)
	}
	leader := c.waitLeader(-1)
	if leader == lag {
		t.Fatal("the lagging follower leads")
	}
	c.waitConverged()
	for _, i := range []int{up, lag, l} {
		for _, k := range keys {
			if _, ok, err := c.nodes[i].Lookup(k); err != nil || !ok {
				t.Fatalf("%s on %s after the wiped leader came back: found %v, %v", k, c.ids[i], ok, err)
			}
		}
	}
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
		if c.nodes[i].votes.held.Load() {
			t.Errorf("%s still holds its votes", c.ids[i])
		}
	}
}
