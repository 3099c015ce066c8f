package cluster

import (
	"context"
	"errors"
	"fmt"
	"syscall"
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

// relayRefusal is a refused handshake with the leader at addr, or a dial
// to it that found nobody (unreachable): a firewall that drops this node's
// connections to the leader while the leader's reach it, so that the node
// hears the leader and looks caught up while none of its claims can go.
type relayRefusal struct {
	addr        string
	since       time.Time // the refusal, or the last check of it
	unreachable bool
	timedOut    bool // unreachable: the dial timed out (a firewall that drops)
	busy        bool // refused: the leader's cap of connections from here is full (ErrPeerBusy)
}

// refusalOf is the relayRefusal a failed dial to addr records, and false
// for an error that is neither a refused handshake nor a failed dial.
func refusalOf(addr string, err error, at time.Time) (*relayRefusal, bool) {
	switch {
	case errors.Is(err, ErrPeerUnproven):
		return &relayRefusal{addr: addr, since: at, busy: errors.Is(err, ErrPeerBusy)}, true
	case isDialError(err):
		return &relayRefusal{addr: addr, since: at, unreachable: true, timedOut: isTimeout(err)}, true
	}
	return nil, false
}

// sameCause reports whether r and o say the same thing of the leader.
func (r *relayRefusal) sameCause(o *relayRefusal) bool {
	return r.unreachable == o.unreachable && r.timedOut == o.timedOut && r.busy == o.busy
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
		r, _ := refusalOf(addr, err, time.Now())
		n.refusedBy.Store(r)
	case isDialError(err):
		// Only while addr leads: a dial to a peer not up yet (a first
		// start) says nothing of the leader it may become.
		if a, _ := n.raft.LeaderWithID(); string(a) == addr {
			r, _ := refusalOf(addr, err, time.Now())
			n.refusedBy.Store(r)
		}
	}
}

// probeLeader dials the leader at addr once, in the background, after a
// relay stream to it timed out: a stream opened before a firewall began to
// drop the leader's answers, or this node's packets, stays open and silent,
// and only a dial tells the node's readiness (noteRelayDial). One probe at a
// time; it ends with the node.
func (n *Node) probeLeader(addr string) {
	if n.mux == nil || !n.probing.CompareAndSwap(false, true) {
		return
	}
	n.probeMu.Lock()
	defer n.probeMu.Unlock()
	if n.probeCtx.Err() != nil { // closing: cleanup waits, or has waited, for the probes
		n.probing.Store(false)
		return
	}
	n.probes.Go(func() {
		defer n.probing.Store(false)
		ctx, cancel := context.WithTimeout(n.probeCtx, 5*time.Second)
		defer cancel()
		c, err := n.mux.dial(ctx, addr, kindRelay, 5*time.Second)
		if err == nil {
			c.Close()
		}
		if err == nil || n.probeCtx.Err() == nil {
			n.noteRelayDial(addr, err)
		}
	})
}

// unreachableNow reports whether the last dial to the leader at addr timed
// out less than refusalRecheck ago: a relay then fails at once instead of
// waiting for another dial to time out (the caller's provider may give up
// first); after that it dials again.
func (n *Node) unreachableNow(addr string) bool {
	r := n.refusedBy.Load()
	return r != nil && r.timedOut && r.addr == addr && time.Since(r.since) < refusalRecheck
}

// leaderRefuses returns why this follower cannot serve intake when the
// leader at addr (id) refused its last handshake, or could not be reached
// by its last dial, "" when neither. A
// refusal older than refusalRecheck is checked again first, by one caller
// at a time, with a dial of at most refusalProbe.
func (n *Node) leaderRefuses(addr raft.ServerAddress, id raft.ServerID) string {
	r := n.refusedBy.Load()
	if r == nil || r.addr != string(addr) || n.mux == nil || n.IsLeader() {
		return ""
	}
	if time.Since(r.since) >= refusalRecheck {
		if next := (&relayRefusal{addr: r.addr, since: time.Now(), unreachable: r.unreachable, timedOut: r.timedOut, busy: r.busy}); n.refusedBy.CompareAndSwap(r, next) {
			ctx, cancel := context.WithTimeout(context.Background(), refusalProbe)
			c, err := n.mux.dial(ctx, r.addr, kindRelay, refusalProbe)
			cancel()
			switch {
			case err == nil:
				c.Close()
				n.refusedBy.CompareAndSwap(next, nil)
				return ""
			default:
				if now, ok := refusalOf(r.addr, err, next.since); ok && !now.sameCause(r) {
					r = now
					n.refusedBy.CompareAndSwap(next, r)
				}
			}
		}
	}
	switch {
	case r.timedOut:
		return "the leader " + string(id) + " cannot be reached on its cluster port from this node, so claims here cannot reach it " +
			"(a firewall or route between them, one way: the leader's own connections reach this node)"
	case r.unreachable:
		return "the leader " + string(id) + "'s cluster port refuses connections from this node, so claims here cannot reach it " +
			"(it went down, or a firewall rejects them)"
	case r.busy:
		return "the leader " + string(id) + " takes no more cluster connections from this node's address, so claims here cannot reach it " +
			"(its cap of connections not yet authenticated is full: something on this host holds connections to the leader's cluster port; its log names the address)"
	}
	return "the leader " + string(id) + " refuses this node's cluster handshake, so claims here cannot reach it " +
		"(its cluster token differs, or it runs an older release: docs/operations.md, Upgrades)"
}

// A follower knows the cluster's commit index only as far as the leader's
// last append told it: raft's heartbeats carry none. A follower that was
// frozen (SIGSTOP, a paused VM) or cut off hears the leader's heartbeats
// again before replication, whose back-off grew while it was away, sends it
// what it missed; until then its applied index equals its stale commit index
// and it read as caught up while seconds of events behind. So a follower's
// readiness asks the leader how far it has committed (rpcStats) and waits to
// apply that far.
//
// One answer serves the probes of the next leaderCommitAge. One probe at a
// time asks; the others wait for its answer up to leaderCommitJoin (an ask
// takes a millisecond or two), then go by the last answer, or, with none
// from this leader in leaderCommitStale, are not ready (asking). A failed
// ask is tried again after leaderCommitRetry, and the last answer stands
// until it is leaderCommitStale old: with probes that come more often than
// that, one slow or lost ask (a dropped SYN is resent after a second) does
// not take a healthy follower out of rotation; with rarer ones it fails
// that one probe, and load balancers take a node out after two or three.
const (
	leaderCommitAge   = time.Second
	leaderCommitRetry = 500 * time.Millisecond
	leaderCommitStale = 5 * time.Second
	leaderCommitAsk   = time.Second            // bounds one ask
	leaderCommitJoin  = 300 * time.Millisecond // how long a probe waits for another's ask
)

// commitAsk is an ask of the leader's commit index in flight; done closes
// when its answer is stored.
type commitAsk struct{ done chan struct{} }

// leaderCommit is what a follower's readiness knows of the leader's commit
// index: the last answer (index, answered) and the last ask (at, err).
type leaderCommit struct {
	leader   raft.ServerID
	index    uint64
	answered time.Time // zero: no answer from this leader yet
	at       time.Time
	err      error
}

// fresh reports whether c is recent enough for leader id not to ask again.
func (c *leaderCommit) fresh(id raft.ServerID) bool {
	if c == nil || c.leader != id {
		return false
	}
	age := leaderCommitAge
	if c.err != nil {
		age = leaderCommitRetry
	}
	return time.Since(c.at) < age
}

// usable reports whether c holds an answer of leader id young enough to go by.
func (c *leaderCommit) usable(id raft.ServerID) bool {
	return c != nil && c.leader == id && !c.answered.IsZero() && time.Since(c.answered) < leaderCommitStale
}

// behindLeader returns why this follower is not caught up with the leader
// at addr (id), "" when it is, when it leads, or when the leader cannot say
// (a release that does not answer rpcStats, a test's own transport).
func (n *Node) behindLeader(addr raft.ServerAddress, id raft.ServerID) string {
	if n.IsLeader() || (n.mux == nil && n.inproc == nil) {
		return ""
	}
	c := n.leaderCommit.Load()
	if !c.fresh(id) {
		n.askMu.Lock()
		a := n.asking
		first := a == nil
		if first {
			a = &commitAsk{done: make(chan struct{})}
			n.asking = a
		}
		n.askMu.Unlock()
		if first {
			c = n.askLeaderCommit(addr, id)
			n.askMu.Lock()
			n.asking = nil
			n.askMu.Unlock()
			close(a.done)
		} else {
			join := time.NewTimer(leaderCommitJoin)
			select {
			case <-a.done:
			case <-join.C:
			case <-n.probeCtx.Done():
			}
			join.Stop()
			if c = n.leaderCommit.Load(); !c.usable(id) && !c.fresh(id) {
				return fmt.Sprintf("asking the leader %s how far it has committed", id)
			}
		}
	}
	if !c.usable(id) {
		if why := n.leaderRefuses(addr, id); why != "" {
			return why
		}
		return fmt.Sprintf("cannot ask the leader %s how far it has committed: %v", id, c.err)
	}
	if n.raft.AppliedIndex() < c.index && !n.awaitApplied(c.index) {
		return fmt.Sprintf("catching up: applied %d of the leader's %d (leader %s)", n.raft.AppliedIndex(), c.index, id)
	}
	return ""
}

// askLeaderCommit asks the leader at addr (id) for its commit index, unless
// another probe did since, and records the outcome. One runs at a time
// (Node.asking).
func (n *Node) askLeaderCommit(addr raft.ServerAddress, id raft.ServerID) *leaderCommit {
	prev := n.leaderCommit.Load()
	if prev.fresh(id) {
		return prev
	}
	ctx, cancel := context.WithTimeout(n.probeCtx, leaderCommitAsk)
	ms, err := n.askStats(ctx, string(addr))
	cancel()
	if err == nil && ms.ID != string(id) {
		err = fmt.Errorf("%s answers as %q, not as the leader %s", addr, ms.ID, id)
	}
	now := time.Now()
	c := &leaderCommit{leader: id, at: now, err: err}
	var refused statsRefused
	switch {
	case err == nil:
		c.index, c.answered = ms.CommitIndex, now
		n.noteRelayDial(string(addr), nil) // the leader took this node's connection
	case errors.As(err, &refused), errors.Is(err, ErrPeerUnproven):
		// A release that does not know the request, or that predates the
		// cluster handshake (it cannot tell this node from a stranger
		// until it is upgraded too, in a rolling upgrade without TLS):
		// nothing to compare with. Its refusal of this node's claims shows
		// once a relay meets it (leaderRefuses).
		c.err, c.answered = nil, now
	default:
		if prev != nil && prev.leader == id {
			c.index, c.answered = prev.index, prev.answered
		}
		// A port that refuses connections (the leader's process is down)
		// is the leader's word; a timeout or a reset is not (the relay's
		// own dial may well pass), and recording it would fail this node's
		// claims at once for a while (unreachableNow).
		if errors.Is(err, syscall.ECONNREFUSED) && n.probeCtx.Err() == nil {
			n.noteRelayDial(string(addr), err)
		}
	}
	n.leaderCommit.Store(c)
	return c
}
