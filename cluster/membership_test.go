package cluster

import (
	"context"
	"errors"
	"net"
	"net/netip"
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
	// Its status's row for itself says so, though its configuration, which
	// never got the removal, lists it as a voter.
	for _, s := range n.ClusterStatus(ctxT(t, 10*time.Second)).Nodes {
		if s.ID == id && s.Role != "removed" {
			t.Errorf("the removed node's own row: role %q, want removed", s.Role)
		}
	}
	// A claim sent to it is refused saying why (waiting for a leader, it
	// would end in the wait's error instead).
	if _, err := n.Claim(ctxT(t, 10*time.Second), claimCmd("src:to-a-removed-node")); !errors.Is(err, ErrRemoved) || !errors.Is(err, ErrNoLeader) {
		t.Fatalf("claim on the removed node: %v, want ErrRemoved (an ErrNoLeader)", err)
	}
}

// TestRemovedWhileRunningSaysSo: a member removed while it runs applies its
// own removal; once it has no leader, a claim sent to it is refused at once
// saying it was removed, not after the wait for a leader as "no leader".
func TestRemovedWhileRunningSaysSo(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li := c.waitLeader(-1)
	fi := c.follower(li)
	c.waitKnowsLeader(fi, li)
	if err := c.nodes[li].RemovePeer(ctxT(t, 30*time.Second), c.nodes[fi].cfg.ID); err != nil {
		t.Fatalf("remove %s: %v", c.nodes[fi].cfg.ID, err)
	}
	n := c.nodes[fi]
	deadline := time.Now().Add(20 * time.Second)
	// It applies its removal, or, when raft's last best-effort append to a
	// removed server did not reach it (it stops replicating to it right
	// after), a member tells it once it has no leader: either way it knows.
	for !n.removedWhileRunning() && n.removedBy.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the removed node still has a leader, or itself in its configuration and no member told it")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Well under the 2 s a claim waits for a leader: the refusal comes at once.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := n.Claim(ctx, claimCmd("src:to-a-node-removed-while-running")); !errors.Is(err, ErrRemoved) {
		t.Fatalf("claim on the removed node: %v, want ErrRemoved", err)
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

// TestMemberLookups: members named by DNS are looked up again every
// memberLookupEvery (a peer restarted under its name may have another
// address), a failed lookup after memberLookupRetry, addresses alone only
// when the hosts change; addresses are kept without zone and v4-mapped ones
// as IPv4, so that a connection from any form of a member's address counts
// as the member's.
func TestMemberLookups(t *testing.T) {
	answer := map[string][]netip.Addr{"member.test": {netip.MustParseAddr("10.9.9.1")}}
	lookup := func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if ips, ok := answer[host]; ok {
			return ips, nil
		}
		return nil, errors.New("no such host")
	}
	hosts := []string{"member.test", "fe80::1%eth0", "::ffff:10.0.0.1", "2001:db8::5"}
	set, l := resolveMembers(t.Context(), hosts, nil, lookup)
	for _, a := range []*net.TCPAddr{
		{IP: net.ParseIP("10.9.9.1")},
		{IP: net.ParseIP("fe80::1"), Zone: "eth0"},
		{IP: net.ParseIP("fe80::1"), Zone: "eth1"},
		{IP: net.ParseIP("10.0.0.1")},
		{IP: net.ParseIP("::ffff:10.0.0.1")},
		{IP: net.ParseIP("2001:db8::5")},
	} {
		if !set.holds(a) {
			t.Errorf("%v is not taken for a member's", a)
		}
	}
	if set.holds(&net.TCPAddr{IP: net.ParseIP("10.9.9.2")}) {
		t.Error("a stranger's address is taken for a member's")
	}
	if !l.names || l.failed {
		t.Fatalf("lookup %+v, want names, none failed", l)
	}

	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	l.hosts, l.at = "member.test other", t0
	for _, tc := range []struct {
		name  string
		l     memberLookup
		hosts string
		after time.Duration
		due   bool
	}{
		{"names, just looked up", l, l.hosts, time.Second, false},
		{"names, looked up a while ago", l, l.hosts, memberLookupEvery, true},
		{"the hosts changed", l, "member.test", time.Second, true},
		{"addresses only", memberLookup{hosts: "10.0.0.1", at: t0}, "10.0.0.1", 1000 * time.Hour, false},
		{"a lookup failed, just now", memberLookup{hosts: "x.test", at: t0, names: true, failed: true}, "x.test", time.Second, false},
		{"a lookup failed, a while ago", memberLookup{hosts: "x.test", at: t0, names: true, failed: true}, "x.test", memberLookupRetry, true},
		{"never looked up", memberLookup{}, "10.0.0.1", 0, true},
	} {
		if got := tc.l.due(tc.hosts, t0.Add(tc.after)); got != tc.due {
			t.Errorf("%s: due = %v, want %v", tc.name, got, tc.due)
		}
	}

	// The name moves: the next lookup has the new address, not the old.
	answer["member.test"] = []netip.Addr{netip.MustParseAddr("10.9.9.2")}
	set, l = resolveMembers(t.Context(), hosts, l.byName, lookup)
	if !set.holds(&net.TCPAddr{IP: net.ParseIP("10.9.9.2")}) || set.holds(&net.TCPAddr{IP: net.ParseIP("10.9.9.1")}) {
		t.Error("the member's new address is not taken for its, or its old one still is")
	}
	// DNS fails: the name keeps its last addresses, and the failure is
	// reported for a retry.
	delete(answer, "member.test")
	set, l = resolveMembers(t.Context(), hosts, l.byName, lookup)
	if !l.failed || !set.holds(&net.TCPAddr{IP: net.ParseIP("10.9.9.2")}) {
		t.Errorf("a failed lookup: failed %v, member's last address kept %v; want both", l.failed, set.holds(&net.TCPAddr{IP: net.ParseIP("10.9.9.2")}))
	}
}
