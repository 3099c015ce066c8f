package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// A follower serves intake by handing its claims to the leader (relayBatch).
// When the leader's cluster port refuses this node's handshake, every claim
// here fails with 503 while the node otherwise looks healthy: it hears the
// leader and is caught up, since the leader's own connections to it work. It
// happens during a rolling upgrade of a cluster without TLS (an older leader
// knows only the token preamble; docs/operations.md, "Upgrades") and when
// the nodes' tokens differ one way. Such a node reports itself not ready,
// so a load balancer sends the providers elsewhere, and it asks the leader
// again now and then, so that it is ready again once the leader accepts it.

// relayRefusal is a refused handshake with the leader at addr.
type relayRefusal struct {
	addr  string
	since time.Time // the refusal, or the last check of it
}

// refusalRecheck is how long a refusal stands before a readiness check
// dials the leader again; refusalProbe bounds that dial.
const (
	refusalRecheck = 2 * time.Second
	refusalProbe   = time.Second
)

// noteRelayDial records how a relay dial to addr ended: a refused handshake
// makes the node unready while addr leads; a handshake that passed ends it.
func (n *Node) noteRelayDial(addr string, err error) {
	switch {
	case err == nil:
		if r := n.refusedBy.Load(); r != nil && r.addr == addr {
			n.refusedBy.CompareAndSwap(r, nil)
		}
	case errors.Is(err, ErrPeerUnproven):
		n.refusedBy.Store(&relayRefusal{addr: addr, since: time.Now()})
	}
}

// leaderRefuses returns why this follower cannot serve intake when the
// leader at addr (id) refused its last handshake, "" when it did not. A
// refusal older than refusalRecheck is checked again first, by one caller
// at a time, with a dial of at most refusalProbe.
func (n *Node) leaderRefuses(addr raft.ServerAddress, id raft.ServerID) string {
	r := n.refusedBy.Load()
	if r == nil || r.addr != string(addr) || n.mux == nil || n.IsLeader() {
		return ""
	}
	if time.Since(r.since) >= refusalRecheck {
		if next := (&relayRefusal{addr: r.addr, since: time.Now()}); n.refusedBy.CompareAndSwap(r, next) {
			ctx, cancel := context.WithTimeout(context.Background(), refusalProbe)
			c, err := n.mux.dial(ctx, r.addr, kindRelay, refusalProbe)
			cancel()
			if err == nil {
				c.Close()
				n.refusedBy.CompareAndSwap(next, nil)
				return ""
			}
		}
	}
	return "the leader " + string(id) + " refuses this node's cluster handshake, so claims here cannot reach it " +
		"(its cluster token differs, or it runs an older release: docs/operations.md, Upgrades)"
}
