package cluster

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

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
		err := n.Join(ctxT(t, 5*time.Second), "node5", addr)
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
	// A port with nothing behind it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
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
			err := nodes[via].Join(ctxT(t, 10*time.Second), tc.id, tc.addr)
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
	// A running node re-added under its own id and address is accepted
	// (the path a node whose data was wiped takes).
	if err := nodes[follower].Join(ctxT(t, 20*time.Second), other.cfg.ID, other.cfg.Bind); err != nil {
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
